package faultsim_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/deliver"
	"github.com/genjobs/genjobs/internal/dev/faultsim"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/intake"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/replay"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/bolt"
	"github.com/genjobs/genjobs/internal/store/storetest"
	"github.com/genjobs/genjobs/internal/worker"
)

// The flags replay or widen TestSimulation: a failing run prints the
// exact command line that reproduces it.
// defaultSeed is TestSimulation's seed, checked to exercise every fault.
const defaultSeed = 20261129

var (
	seedFlag   = flag.Uint64("faultsim.seed", defaultSeed, "seed of TestSimulation")
	opsFlag    = flag.Int("faultsim.ops", 1000, "operations of TestSimulation")
	faultsFlag = flag.String("faultsim.faults", "all", "faults of TestSimulation: all, none, or a list (see faultsim.ParseFaults)")
	outboxFlag = flag.Bool("faultsim.unrecorded-dispatch", false, "the application does not record the dispatch it owes (the contract the simulation found wanting)")
	traceFlag  = flag.String("faultsim.trace", "", "comma-separated operations whose history TestSimulation prints")
)

// TestSimulation drives a thousand operations through the real handlers
// with every fault on and fails on any invariant violation, listing each
// with its operation's history and the command that replays the run.
func TestSimulation(t *testing.T) {
	faults, err := faultsim.ParseFaults(*faultsFlag)
	if err != nil {
		t.Fatal(err)
	}
	cfg := faultsim.Config{Seed: *seedFlag, Operations: *opsFlag, Faults: faults, UnrecordedDispatch: *outboxFlag}
	if *traceFlag != "" {
		cfg.Trace = strings.Split(*traceFlag, ",")
	}
	res, err := faultsim.Run(cfg)
	if err != nil {
		t.Fatalf("seed %d: %v", cfg.Seed, err)
	}
	var out strings.Builder
	res.WriteSummary(&out)
	t.Log("\n" + out.String())
	if *seedFlag == defaultSeed && *faultsFlag == "all" && *opsFlag >= 1000 {
		// The default run must meet every fault; another seed may miss a
		// rare one (a storm-free quarter hour, say) and still be a fine run.
		for _, k := range faultsim.Kinds {
			if cfg.Faults[k] > 0 && res.Injected[k] == 0 {
				t.Errorf("fault %s is on but was never injected: the run does not exercise it", k)
			}
		}
		reachesEveryPath(t, res)
	}
	if n := len(res.Violations); n > 0 {
		t.Errorf("%d invariant violations with seed %d (listed above); replay: %s", n, res.Seed, res.ReplayTest())
	}
	for _, th := range res.Thresholds() {
		t.Errorf("threshold exceeded: %s", th)
	}
}

func TestThresholds(t *testing.T) {
	cases := []struct {
		name               string
		uncertain, unknown int
		ofTerminal         int
		want               []string
	}{
		{"quiet run", 0, 0, 0, nil},
		{"each unknown submission left uncertain", 327, 327, 0, nil},
		{"fewer uncertain than unknown (late evidence resolved some)", 300, 327, 0, nil},
		{"more uncertain than unknown", 407, 327, 0, []string{"407 operations left uncertain per 327 submissions of genuinely unknown outcome: 1.24, above 1.00"}},
		{"uncertain without any unknown submission", 3, 0, 0, []string{"3 operations left uncertain per 0 submissions of genuinely unknown outcome: +Inf, above 1.00"}},
		{"reviews left on terminal operations", 1, 1, 75, []string{"75 reviews left open on operations that ended terminal, above 0"}},
		{"both", 5, 2, 1, []string{"above 1.00", "1 reviews left open"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &faultsim.Result{LeftUncertain: tc.uncertain, UnknownSubmissions: tc.unknown, ReviewsOfTerminal: tc.ofTerminal}
			got := r.Thresholds()
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %d lines like %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("line %d: got %q, want it to contain %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// defaultPaths are the decisions the default run must reach: every path
// a fault leads a handler or the sweep down. A run that stops reaching
// one no longer tests it, however many operations it drives.
var defaultPaths = []string{
	// With the dispatch queue's visibility above what a POST needs (as
	// deployed), only a lease the receive gap ran down needs renewing
	// before the POST; on db53769 no worker renews it (hole 8), so this
	// path is reached only once the POST renews its lease.
	"submit: no authority to POST; releasing the claim",
	"submit: submission outcome unknown: left for reconciliation (post_outcome_unknown)",
	"submit: submission outcome unknown: left for reconciliation (redelivered_while_submitting)",
	"submit: acknowledged as obsolete (claim_conflict)",
	"submit: acknowledged as obsolete (stale_revision)",
	"submit: acknowledged as obsolete (follow_up_pending)",
	"submit: acknowledged as obsolete (awaiting_reconciliation)",
	"submit: acknowledged as obsolete (terminal)",
	"observe: lost the revision race; the newer state stands",
	"observe: failed; retrying later",
	"observe: acknowledged as obsolete (stale_revision)",
	// Not "deliver: delivery handed on (lease)": with the deployed
	// deliver visibility (720 s) a delivery renews its lease only after a
	// receive gap used it up, and a renewal failure rarely meets one in a
	// thousand operations; internal/deliver's tests hold that path.
	"deliver: failed; retrying later",
	"deliver: signed URL expired; reading the job again",
	"deliver: lost the revision race; the newer state stands",
	"deliver: acknowledged as obsolete (already_delivered)",
	"sweep: sweep acted (rearmed)",
	// The operator replays every kind of decision, racing the handlers.
	"operator: replay dispatch (done)",
	"operator: replay observe (done)",
	"operator: replay deliver (done)",
	"operator: replay inspect_accounting (done)",
	"operator: replay reconcile --job-id (done)",
	"operator: replay reconcile --confirmed-not-submitted (done)",
	"operator: replay observe (refused)",
	// A worker died between its claim and its POST, and the sweep, not
	// the redelivery, found the claim first (as with the deployed
	// visibility): the only path that parks a claim nobody redelivers.
	"sweep: sweep acted (claim_expired)",
	// The paths of issue 9's last fault classes: a dispatch the allowance
	// no longer covers taken out of the sweep's index
	// (user_change_unauthorized), a delivery that a foreign object blocks
	// parked (artifact_foreign_object), a delivery with too little of its
	// function left handed on (invocation_time_used), a job named by an
	// id no message can carry left for reconciliation
	// (post_unusable_job_id), and a late answer's second job id kept in a
	// review (genace_second_job).
	"sweep: sweep dropped a dispatch the allowance no longer covers",
	"deliver: cannot continue; parked for review",
	"deliver: delivery handed on (deadline)",
	"submit: submission outcome unknown: left for reconciliation (unusable_job_id)",
	"submit: job id could not be persisted on the record",
}

// reachesEveryPath fails for every path of defaultPaths the run missed,
// and for the safety net's figures that must not be zero.
func reachesEveryPath(t *testing.T, res *faultsim.Result) {
	t.Helper()
	for _, p := range defaultPaths {
		if res.Paths[p] == 0 {
			t.Errorf("the default run never reached %q", p)
		}
	}
	for name, n := range map[string]int{
		"stale claims parked by the sweep (SweepClaimsExpired)": res.SweepClaimsExpired,
		"chains re-armed by the sweep (SweepRearmed)":           res.SweepRearmed,
		"acknowledgements of a message another worker held":     int(res.StaleDeletes),
		"outputs uploaded again":                                res.Reuploads,
		"reviews kept open for a second job (SecondJobReviews)": res.SecondJobReviews,
	} {
		if n == 0 {
			t.Errorf("the default run had no %s", name)
		}
	}
	for _, p := range []operation.Phase{operation.PhaseDelivered, operation.PhaseFailed, operation.PhaseRejected, operation.PhaseSuperseded, operation.PhaseUncertain} {
		if res.Phases[p] == 0 {
			t.Errorf("no operation of the default run ended %s", p)
		}
	}
}

// TestUnrecordedDispatchStrandsOperations keeps the finding that made
// recorded dispatch the application contract: when the application sends
// a dispatch without recording it on the record, a concurrent write to the
// prepared record makes the dispatch stale, submit rightly acknowledges it
// without writing, and nothing ever sends another: the operation is stuck
// in prepared with no review. The checks must report it.
func TestUnrecordedDispatchStrandsOperations(t *testing.T) {
	faults, err := faultsim.ParseFaults("store_conflict=1")
	if err != nil {
		t.Fatal(err)
	}
	res, err := faultsim.Run(faultsim.Config{Seed: 1, Operations: 20, Faults: faults, UnrecordedDispatch: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) == 0 {
		t.Fatal("no violation reported for dispatches made stale without a recorded next action")
	}
	// With the dispatch recorded, the sweep re-arms what went stale: under
	// heavy (not total: then no write could ever land) concurrent writes,
	// nothing is stranded.
	heavy, err := faultsim.ParseFaults("store_conflict=0.3")
	if err != nil {
		t.Fatal(err)
	}
	res, err = faultsim.Run(faultsim.Config{Seed: 1, Operations: 50, Faults: heavy})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.Violations); n > 0 {
		var out strings.Builder
		res.WriteSummary(&out)
		t.Fatalf("%d violations with the dispatch recorded:\n%s", n, out.String())
	}
}

// TestDeterministic runs one seed twice: a replay must reproduce the run,
// or a violation's replay command would be worthless.
func TestDeterministic(t *testing.T) {
	cfg := faultsim.Config{Seed: 7, Operations: 150}
	a, err := faultsim.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := faultsim.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fingerprint := func(r *faultsim.Result) string {
		return fmt.Sprintf("virtual %s writes %d actions %d posts %d jobs %d gets %d downloads %d sweeps %d stale %d phases %v faults %v invocations %v violations %v",
			r.Virtual, r.Writes, r.Actions, r.Posts, r.Jobs, r.Gets, r.Downloads, r.Sweeps, r.StaleDeletes, r.Phases, r.Injected, r.Invocations, r.Violations)
	}
	if fa, fb := fingerprint(a), fingerprint(b); fa != fb {
		t.Fatalf("the same seed ran differently:\n%s\n%s", fa, fb)
	}
	if !reflect.DeepEqual(a.Histories, b.Histories) {
		t.Fatal("the same seed gave different histories")
	}
}

// ignoreRevision is a planted bug: a store whose Update writes over
// whatever revision is current, as if the condition revision = :expected
// were missing.
type ignoreRevision struct{ store.Store }

func (s ignoreRevision) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	if cur, err := s.Store.Get(ctx, rec.OperationID); err == nil && !cur.Terminal() {
		expected = cur.Revision
	}
	return s.Store.Update(ctx, rec, expected)
}

// hideSubmitting is a planted bug: a store that shows a claimed
// (submitting) record as prepared, so a redelivered dispatch claims it
// again and POSTs a second time.
type hideSubmitting struct{ store.Store }

func (s hideSubmitting) Get(ctx context.Context, id string) (operation.Record, error) {
	rec, err := s.Store.Get(ctx, id)
	if err == nil && rec.Phase == operation.PhaseSubmitting {
		rec.Phase, rec.Claim = operation.PhasePrepared, nil
	}
	return rec, err
}

// retryUnknownPost is a planted bug: a client that retries a POST whose
// outcome is unknown — the mistake invariant 1 exists to forbid.
type retryUnknownPost struct{ faultsim.Genace }

func (c retryUnknownPost) Submit(ctx context.Context, req genace.SubmitRequest, timeout time.Duration) genace.SubmitResult {
	res := c.Genace.Submit(ctx, req, timeout)
	if res.Outcome == genace.OutcomeUnknown && res.RequestSent {
		res = c.Genace.Submit(ctx, req, timeout)
	}
	return res
}

// staleRewrite is a planted bug: a handler that, when its conditional
// write loses, writes what it computed from its older read again at the
// revision the conflict reported (the mutant "rewrite a stale view at the
// current revision"): the revision check passes, the content is stale.
type staleRewrite struct{ faultsim.Records }

func (s staleRewrite) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	saved, err := s.Records.Update(ctx, rec, expected)
	var ce *store.ConflictError
	if errors.As(err, &ce) && ce.Current != nil && !ce.Current.Terminal() {
		return s.Records.Update(ctx, rec, ce.Current.Revision)
	}
	return saved, err
}

// dropFailedJobID is a planted bug: a client that classifies a 5xx as
// unknown without looking for error.job_id (the mutant "drop a 5xx's job
// id in the client's classification"). Genace created the job and named
// it; nothing the client hands back says so.
type dropFailedJobID struct{ faultsim.Genace }

func (c dropFailedJobID) Submit(ctx context.Context, req genace.SubmitRequest, timeout time.Duration) genace.SubmitResult {
	res := c.Genace.Submit(ctx, req, timeout)
	if res.Outcome == genace.OutcomeSubmissionFailed {
		res.Outcome, res.JobID = genace.OutcomeUnknown, ""
	}
	return res
}

// staleFollowUps is a planted bug: follow-ups of observations sent for
// the revision before the one just written (the mutant that kills the
// chain): each one arrives stale and is dropped, and only the sweep moves
// the operation on, one step per re-arm.
type staleFollowUps struct{ schedule.QueueSender }

func (q staleFollowUps) Send(ctx context.Context, queueURL string, body []byte, delay time.Duration) (string, error) {
	if env, err := message.Decode(body); err == nil && env.Action == message.ActionObserveGeneration && env.Attempt > 1 {
		env.ExpectedRevision--
		if b, err := env.Encode(); err == nil {
			body = b
		}
	}
	return q.QueueSender.Send(ctx, queueURL, body, delay)
}

// replayablePost is a planted bug: a transport that makes every POST body
// rewindable (as http.NewRequest does for a bytes.Reader), so Go's HTTP/2
// transport re-sends a POST whose stream the server reset after reading
// it: two POSTs, two jobs.
type replayablePost struct{ http.RoundTripper }

func (t replayablePost) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && r.Body != nil && r.GetBody == nil {
		b, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	return t.RoundTripper.RoundTrip(r)
}

// dropIDOfDrift is a planted bug: a client that decodes the whole body
// before it takes the job id, so an answer that names its job but drifts
// elsewhere comes back unknown, without the id.
type dropIDOfDrift struct{ faultsim.Genace }

func (c dropIDOfDrift) Submit(ctx context.Context, req genace.SubmitRequest, timeout time.Duration) genace.SubmitResult {
	res := c.Genace.Submit(ctx, req, timeout)
	if res.Outcome == genace.OutcomeUnknown || (res.Outcome == genace.OutcomeAccepted && res.Job == nil) {
		res.Outcome, res.JobID, res.Job = genace.OutcomeUnknown, "", nil
	}
	return res
}

// ownWriteConflict is a planted bug: a store that answers the resend of a
// write it already applied with a conflict, whose current item is the
// write itself, as a store that does not recognise its own write does.
// The caller takes its own write for someone else's.
type ownWriteConflict struct{ store.Store }

func (s ownWriteConflict) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	if cur, err := s.Store.Get(ctx, rec.OperationID); err == nil && cur.Revision == expected+1 &&
		cur.LastAppliedMessageID != "" && cur.LastAppliedMessageID == rec.LastAppliedMessageID {
		return operation.Record{}, &store.ConflictError{OperationID: rec.OperationID, Expected: expected, Current: &cur}
	}
	return s.Store.Update(ctx, rec, expected)
}

// claimLooksOwn is a planted bug: submit takes any dispatch that finds a
// claim for the claimant's own redelivery (the claim shows the reading
// message as its holder), so a duplicate during a live claim marks it
// uncertain.
type claimLooksOwn struct{ faultsim.Records }

func (s claimLooksOwn) Get(ctx context.Context, id string) (operation.Record, error) {
	rec, err := s.Records.Get(ctx, id)
	if err == nil && rec.Phase == operation.PhaseSubmitting && rec.Claim != nil {
		if m, ok := faultsim.MessageOf(ctx, id); ok {
			rec.Claim.MessageID, rec.LastAppliedMessageID = m.MessageId, m.MessageId
		}
	}
	return rec, err
}

// ownClock is a planted bug: a worker whose authority comes from its own
// clock, started when its handler started, rather than from the queue: a
// renewal is believed without asking the queue, so a lease the gap
// between receive and handler used up looks whole.
type ownClock struct{ worker.Extender }

func (ownClock) ChangeVisibility(context.Context, string, string, time.Duration) error { return nil }

// actsAgain is a planted bug: an observation whose message comes back
// after its own write landed is handled as new (the record is shown at
// the revision the message names, and written at the one it has), so the
// operation is observed twice from one message.
type actsAgain struct{ faultsim.Records }

func (s actsAgain) Get(ctx context.Context, id string) (operation.Record, error) {
	rec, err := s.Records.Get(ctx, id)
	if m, ok := faultsim.MessageOf(ctx, id); ok && err == nil && rec.LastAppliedMessageID == m.MessageId {
		if env, derr := message.Decode([]byte(m.Body)); derr == nil && env.Action == message.ActionObserveGeneration && rec.Revision > env.ExpectedRevision {
			rec.Revision = env.ExpectedRevision
		}
	}
	return rec, err
}

func (s actsAgain) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	if cur, err := s.Records.Get(ctx, rec.OperationID); err == nil && cur.LastAppliedMessageID == rec.LastAppliedMessageID && cur.Revision > expected {
		expected = cur.Revision
	}
	return s.Records.Update(ctx, rec, expected)
}

// skipRevision is a planted bug: a replay that writes its decision over
// whatever revision the record has reached, not the one its plan was
// made from, so a write that landed meanwhile is undone.
type skipRevision struct{ replay.Store }

func (s skipRevision) UpdateWithAudit(ctx context.Context, rec operation.Record, expected int64, e review.AuditEntry) (operation.Record, error) {
	if cur, err := s.Store.Get(ctx, rec.OperationID); err == nil && !cur.Terminal() {
		expected, e.Revision = cur.Revision, 0
	}
	return s.Store.UpdateWithAudit(ctx, rec, expected, e)
}

// reject408 is a planted bug: a client that reads a POST answered 408 as
// a rejection, although the job may exist (the contract lists 408 among
// no answers that create nothing).
type reject408 struct{ faultsim.Genace }

func (c reject408) Submit(ctx context.Context, req genace.SubmitRequest, timeout time.Duration) genace.SubmitResult {
	res := c.Genace.Submit(ctx, req, timeout)
	if res.StatusCode == http.StatusRequestTimeout {
		res.Outcome = genace.OutcomeRejected
	}
	return res
}

// acceptUnusableID is a planted bug: a client whose job id definition is
// wider than the messages' (message.ValidJobID), so it hands back an id
// that no follow-up can carry as the accepted job.
type acceptUnusableID struct{ faultsim.Genace }

func (c acceptUnusableID) Submit(ctx context.Context, req genace.SubmitRequest, timeout time.Duration) genace.SubmitResult {
	res := c.Genace.Submit(ctx, req, timeout)
	if id, err := strconv.Unquote(res.UnusableJobID); err == nil && res.StatusCode == http.StatusAccepted {
		res.Outcome, res.JobID, res.UnusableJobID = genace.OutcomeAccepted, id, ""
	}
	return res
}

// staleConflictItem is a planted bug: a store whose conflict answer
// carries the current item without the job id it holds (read from a
// lagging replica, say), when the refused write names another job. The
// writer re-applies its outcome to it and replaces the known job id.
type staleConflictItem struct{ faultsim.Records }

func (s staleConflictItem) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	saved, err := s.Records.Update(ctx, rec, expected)
	var ce *store.ConflictError
	if errors.As(err, &ce) && ce.Current != nil && ce.Current.RemoteJobID != "" && rec.RemoteJobID != "" && rec.RemoteJobID != ce.Current.RemoteJobID {
		cur := ce.Current.Clone()
		cur.RemoteJobID = ""
		return saved, &store.ConflictError{OperationID: ce.OperationID, Expected: ce.Expected, Current: &cur}
	}
	return saved, err
}

// reviewsWithoutJobIDs is a planted bug: the replay reads an operation's
// reviews without the job ids they carry, so it takes a review that holds
// the only trace of a second job for resolved and closes it.
type reviewsWithoutJobIDs struct{ replay.Store }

func (s reviewsWithoutJobIDs) OperationReviews(ctx context.Context, id string) ([]review.Record, error) {
	rs, err := s.Store.OperationReviews(ctx, id)
	for i := range rs {
		rs[i].RemoteJobID = ""
	}
	return rs, err
}

// putEchoes is a planted bug: an artifact store that answers a Put onto a
// key another writer took meanwhile with the object the caller meant to
// store (a conditional put whose refusal reads as success), so the
// delivery records content the store does not hold.
type putEchoes struct{ deliver.Artifacts }

func (a putEchoes) Put(ctx context.Context, key string, r io.Reader, size int64, sum, contentType string) (artifact.Object, error) {
	obj, err := a.Artifacts.Put(ctx, key, r, size, sum, contentType)
	if errors.Is(err, artifact.ErrConflict) {
		return artifact.Object{Key: key, Size: size, SHA256: sum}, nil
	}
	return obj, err
}

// sweepLeavesDue is a planted bug: the sweep's write that takes a dispatch
// the allowance no longer covers out of its index is lost (answered as a
// conflict), so the record keeps its old due time, sorts first in every
// run, and enough of them starve the sweep.
type sweepLeavesDue struct{ faultsim.Records }

func (s sweepLeavesDue) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	if rec.Phase == operation.PhasePrepared && rec.Schedule == nil && rec.LastAppliedMessageID == "sweep" {
		cur, err := s.Records.Get(ctx, rec.OperationID)
		if err != nil {
			return operation.Record{}, err
		}
		return operation.Record{}, &store.ConflictError{OperationID: rec.OperationID, Expected: expected, Current: &cur}
	}
	return s.Records.Update(ctx, rec, expected)
}

// detachedDeadline is a planted bug: handlers run under a context
// detached from the invocation (context.WithoutCancel, to let writes
// finish), which drops its deadline too, so submit no longer sees how
// little time its function has left before the POST.
func detachedDeadline(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// TestPlantedBugIsFound turns one safeguard off at a time through a store
// wrapper and asserts that the run reports it: the checks are only worth
// their zero if they can fail.
func TestPlantedBugIsFound(t *testing.T) {
	cases := []struct {
		name   string
		cfg    faultsim.Config
		faults string
		want   faultsim.Invariant
	}{
		{"store ignores the revision condition", faultsim.Config{WrapStore: func(s store.Store) store.Store { return ignoreRevision{s} }}, "all", faultsim.InvWrites},
		// Revision checks keep a redelivered dispatch from claiming again;
		// what gives the bug away is the claim nobody can see any more:
		// neither redelivery nor the sweep parks it for review.
		{"a claimed record reads as prepared", faultsim.Config{WrapStore: func(s store.Store) store.Store { return hideSubmitting{s} }}, "all,crash_after_post=0.05", faultsim.InvSettled},
		{"the client retries a POST of unknown outcome", faultsim.Config{WrapGenace: func(g faultsim.Genace) faultsim.Genace { return retryUnknownPost{g} }}, "all", faultsim.InvPosts},
		{"a handler rewrites its stale view at the current revision", faultsim.Config{WrapRecords: func(r faultsim.Records) faultsim.Records { return staleRewrite{r} }}, "all", faultsim.InvWrites},
		{"the client drops a 5xx's job id", faultsim.Config{WrapGenace: func(g faultsim.Genace) faultsim.Genace { return dropFailedJobID{g} }}, "all,operator_race=0", faultsim.InvJobID},
		// One per fault class: the safeguard the class exists to test. The
		// operator stays away from the job id ones: attaching the job
		// Genace's support names would repair what the planted bug lost.
		{"post_h2_stream_reset: the transport re-sends a POST whose stream was reset", faultsim.Config{WrapTransport: func(t http.RoundTripper) http.RoundTripper { return replayablePost{t} }}, "all,post_h2_stream_reset=0.1", faultsim.InvPosts},
		{"post_body_drift: the client drops the id of an answer that drifts", faultsim.Config{WrapGenace: func(g faultsim.Genace) faultsim.Genace { return dropIDOfDrift{g} }}, "all,post_body_drift=0.1,operator_race=0", faultsim.InvJobID},
		{"store_lost_ack: the store takes a resent write of its own for a conflict", faultsim.Config{WrapStore: func(s store.Store) store.Store { return ownWriteConflict{s} }}, "all,store_lost_ack=0.1", faultsim.InvChain},
		{"dispatch_dup_during_claim: any dispatch during a claim marks it uncertain", faultsim.Config{WrapRecords: func(r faultsim.Records) faultsim.Records { return claimLooksOwn{r} }}, "all,dispatch_dup_during_claim=0.1", faultsim.InvChain},
		{"receive_gap: the lease is taken from the worker's own clock, not the queue's", faultsim.Config{WrapExtender: func(e worker.Extender) worker.Extender { return ownClock{e} }}, "all,receive_gap=0.2", faultsim.InvAuthority},
		// Only stale deletes bring an applied message back here: no crash
		// or lease fault does it too.
		{"stale_delete: a message that comes back after its write landed is handled as new", faultsim.Config{WrapRecords: func(r faultsim.Records) faultsim.Records { return actsAgain{r} }}, "stale_delete=0.3", faultsim.InvChain},
		{"operator_race: a replay skips its revision check", faultsim.Config{WrapOperator: func(s replay.Store) replay.Store { return skipRevision{s} }}, "all,operator_race=0.05", faultsim.InvWrites},
		{"follow-ups name the revision before", faultsim.Config{WrapQueue: func(q schedule.QueueSender) schedule.QueueSender { return staleFollowUps{q} }}, "all", faultsim.InvChain},
		{"post_408_after_create: the client reads a 408 as a rejection", faultsim.Config{WrapGenace: func(g faultsim.Genace) faultsim.Genace { return reject408{g} }}, "all,post_408_after_create=0.05", faultsim.InvJobID},
		{"post_unusable_job_id: the client's job id definition is wider than the messages'", faultsim.Config{WrapGenace: func(g faultsim.Genace) faultsim.Genace { return acceptUnusableID{g} }}, "all,post_unusable_job_id=0.05", faultsim.InvJobID},
		{"genace_second_job: a late answer's job id replaces the one an operator attached", faultsim.Config{WrapRecords: func(r faultsim.Records) faultsim.Records { return staleConflictItem{r} }}, "all,genace_second_job=0.1", faultsim.InvWrites},
		{"genace_second_job: the replay closes the review that keeps a second job's id", faultsim.Config{WrapOperator: func(s replay.Store) replay.Store { return reviewsWithoutJobIDs{s} }}, "all,genace_second_job=0.1", faultsim.InvJobID},
		{"artifact_foreign_object: the store reports a Put onto a taken key as stored", faultsim.Config{WrapArtifacts: func(a deliver.Artifacts) deliver.Artifacts { return putEchoes{a} }}, "all,artifact_foreign_object=0.2", faultsim.InvDelivery},
		// A Limit of 5 lets the records the sweep passes over starve it.
		{"user_change_unauthorized: the sweep leaves a dispatch it cannot send due", faultsim.Config{SweepLimit: 5, WrapRecords: func(r faultsim.Records) faultsim.Records { return sweepLeavesDue{r} }}, "all,user_change_unauthorized=0.1", faultsim.InvSettled},
		{"invocation_time_used: the handler's context drops the invocation's deadline", faultsim.Config{WrapContext: detachedDeadline}, "all,invocation_time_used=0.1", faultsim.InvAuthority},
		// The intake classes (intake_test.go), one per intake invariant.
		{"intake_create_race: the store answers a raced create as created", faultsim.Config{WrapStore: func(s store.Store) store.Store { return createsTwice{s} }}, "all,intake_create_race=0.2", faultsim.InvOneCreate},
		{"intake_create_answer_lost: the store answers a retried create as created", faultsim.Config{WrapStore: func(s store.Store) store.Store { return createsTwice{s} }}, "all,intake_create_race=0,intake_create_answer_lost=0.2", faultsim.InvOneCreate},
		{"intake_change_race: the intake changes a claimed operation", faultsim.Config{WrapIntake: func(s intake.Store) intake.Store { return claimUnseen{s} }}, "all,intake_change_race=0.3", faultsim.InvSpecInEffect},
		{"intake_cancel: the intake cancels a claimed operation", faultsim.Config{WrapIntake: func(s intake.Store) intake.Store { return claimUnseen{s} }}, "all,intake_cancel=0.3", faultsim.InvSpecInEffect},
		{"intake: submit reads every spec as authorized", faultsim.Config{WrapRecords: func(r faultsim.Records) faultsim.Records { return authorizesAll{r} }}, "all,user_change_unauthorized=0.2", faultsim.InvSpecPosts},
		{"intake_change_race: the intake refuses a change before the claim", faultsim.Config{WrapIntake: func(s intake.Store) intake.Store { return claimSeen{s} }}, "all,intake_change_race=0.3", faultsim.InvRefusal},
		// The persistent classes (persistent_test.go): a failure that
		// persists must end parked, with a review, within the bound.
		{"get_5xx_persistent: a write forgets the failure count", faultsim.Config{WrapRecords: func(r faultsim.Records) faultsim.Records { return forgetFailures{r} }}, "all,get_5xx_persistent=0.05", faultsim.InvLiveness},
		{"get_body_undecodable: the client reads a body it cannot decode as a running job", faultsim.Config{WrapGenace: func(g faultsim.Genace) faultsim.Genace { return undecodableRuns{g} }}, "all,get_body_undecodable=0.05", faultsim.InvLiveness},
		{"copy_sha256_mismatch: the store verifies a copy against its own hash", faultsim.Config{WrapArtifacts: func(a deliver.Artifacts) deliver.Artifacts { return selfVerifying{a} }}, "all,copy_sha256_mismatch=0.05", faultsim.InvDelivery},
		// The completion events' classes (events_test.go).
		{"the store marks each event it records as sent, unpublished", faultsim.Config{WrapStore: func(s store.Store) store.Store { return marksSent{s} }}, "all", faultsim.InvEvents},
		{"the handlers' store announces a delivery at succeeded, before the outputs are stored", faultsim.Config{WrapRecords: func(r faultsim.Records) faultsim.Records { return announcesEarly{r} }}, "all", faultsim.InvEvents},
		{"event_send_fail: a refused event is marked sent when the sweep defers it", faultsim.Config{WrapRecords: func(r faultsim.Records) faultsim.Records { return deferMarks{r, false} }}, "all,event_send_fail=0.3", faultsim.InvEvents},
		{"event_send_fail: a refused event is deferred hours", faultsim.Config{WrapRecords: func(r faultsim.Records) faultsim.Records { return deferMarks{r, true} }}, "all,event_send_fail=0.3", faultsim.InvEvents},
		{"artifact_store_persistent: the store does not keep a record's parking", faultsim.Config{WrapStore: func(s store.Store) store.Store { return dropsParked{s} }}, "all,artifact_store_persistent=0.05", faultsim.InvLiveness},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			faults, err := faultsim.ParseFaults(tc.faults)
			if err != nil {
				t.Fatal(err)
			}
			cfg := tc.cfg
			cfg.Seed, cfg.Operations, cfg.Faults = 3, 200, faults
			res, err := faultsim.Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			found := 0
			for _, v := range res.Violations {
				if v.Invariant == tc.want {
					found++
				}
			}
			if found == 0 {
				var out strings.Builder
				res.WriteSummary(&out)
				t.Fatalf("planted bug not reported as %s:\n%s", tc.want, out.String())
			}
			t.Logf("reported %d %s violations (%d in all), e.g. %s", found, tc.want, len(res.Violations), res.Violations[0])
		})
	}
}

// TestNoSyncBoltConformance runs the store conformance suite on the
// NoSync bbolt file the simulation uses: skipping fsync must not change
// the store's semantics.
func TestNoSyncBoltConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		b, err := bolt.OpenWith(filepath.Join(t.TempDir(), "genjobs.db"), bolt.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

func TestParseFaults(t *testing.T) {
	all, err := faultsim.ParseFaults("all")
	if err != nil || len(all) != len(faultsim.DefaultFaults()) {
		t.Fatalf("all: %v, %d of %d faults", err, len(all), len(faultsim.DefaultFaults()))
	}
	every, err := faultsim.ParseFaults("all,persistent")
	if err != nil || len(every) != len(faultsim.Kinds) {
		t.Fatalf("all,persistent: %v, %d of %d faults", err, len(every), len(faultsim.Kinds))
	}
	if f, err := faultsim.ParseFaults("none"); err != nil || len(f) != 0 || f.String() != "none" {
		t.Fatalf("none: %v %v", f, err)
	}
	f, err := faultsim.ParseFaults("all,dup_send=0.5,get_5xx=0")
	if err != nil || f[faultsim.DupSend] != 0.5 || f[faultsim.Get5xx] != 0 {
		t.Fatalf("overrides: %v %v", f, err)
	}
	back, err := faultsim.ParseFaults(f.String())
	if err != nil || back.String() != f.String() {
		t.Fatalf("String does not round-trip: %q → %q (%v)", f, back, err)
	}
	for _, bad := range []string{"nonsense", "dup_send=2", "dup_send=x"} {
		if _, err := faultsim.ParseFaults(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
