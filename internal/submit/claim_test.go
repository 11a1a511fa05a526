package submit_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/submit"
)

// postOutcomes are the definite answers a claimant's POST can get.
var postOutcomes = []struct {
	name     string
	fault    genacesim.Fault
	phase    operation.Phase
	followUp message.Action
}{
	{"202", genacesim.NoFault(), operation.PhaseAccepted, message.ActionObserveGeneration},
	{"429", genacesim.RateLimited(7 * time.Second), operation.PhasePrepared, message.ActionSubmitGeneration},
	{"422", genacesim.Reject(422, "invalid_request"), operation.PhaseRejected, ""},
	{"502 with a job id", genacesim.SubmissionFailed(502), operation.PhaseFailed, message.ActionObserveGeneration},
}

// other is a second submit worker on the same store, Genace and queues.
func (e *env) other() *submit.Handler {
	return submit.New(submit.Deps{Store: e.store, Genace: &gen{inner: e.client}, Extender: e.ext, Sender: e.out, Clock: e.clk, Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()}, submit.Config{})
}

// checkApplied asserts that the claimant's definite answer is what the
// record says, with the follow-up it needs and nothing left parked.
func checkApplied(t *testing.T, e *env, op string, phase operation.Phase, followUp message.Action) {
	t.Helper()
	got := handlertest.Get(t, e.store, op)
	if got.Phase != phase || got.Parked != nil {
		t.Fatalf("record %s parked=%+v last_error=%q; want the claimant's answer applied: %s", got.Phase, got.Parked, got.LastError, phase)
	}
	if jobs := e.sim.JobsForOperation(op); len(jobs) > 0 && got.RemoteJobID != jobs[0] {
		t.Fatalf("job %q on the record, Genace created %v", got.RemoteJobID, jobs)
	}
	sent := e.out.Take()
	if followUp == "" {
		if len(sent) != 0 {
			t.Fatalf("sent %+v, want nothing", sent)
		}
		return
	}
	if len(sent) != 1 || sent[0].Env.Action != followUp || sent[0].Env.ExpectedRevision != got.Revision {
		t.Fatalf("sent %+v, want one %s at r%d", sent, followUp, got.Revision)
	}
}

// A duplicate dispatch (an SQS duplicate, a re-emit, a sweep re-arm) that
// arrives while another worker holds the claim is obsolete: it must not
// make the operation uncertain, and the claimant's answer then applies.
func TestDuplicateDispatchDuringLiveClaimIsObsolete(t *testing.T) {
	t.Parallel()
	for _, tt := range postOutcomes {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, g := newEnv(t, "bolt", submit.Config{})
			rec := handlertest.Create(t, e.store, handlertest.Prepared("op"))
			e.sim.ScriptPOST("op", tt.fault)
			d := handlertest.Dispatch(rec)
			dup := d
			dup.ID = "duplicate-dispatch"
			g.during = func() {
				g.during = nil
				resp, err := e.other().Handle(context.Background(), handlertest.Event(t, e.clk.Now(), dup))
				if err != nil || len(resp.BatchItemFailures) != 0 {
					t.Errorf("duplicate: %v, failures %v; want it acknowledged", err, handlertest.Failed(resp))
				}
				if got := handlertest.Get(t, e.store, "op"); got.Phase != operation.PhaseSubmitting || got.Revision != 2 {
					t.Errorf("the duplicate wrote the live claim: %s r%d, want submitting r2", got.Phase, got.Revision)
				}
			}
			e.handle(t, d)
			checkApplied(t, e, "op", tt.phase, tt.followUp)
			if n := e.sim.PostCount("op"); n != 1 {
				t.Fatalf("POSTs = %d, want 1", n)
			}
		})
	}
}

// Only the claiming message's own redelivery may take a live claim for
// dead; any other dispatch is obsolete.
func TestOnlyTheClaimingMessageMarksALiveClaimUncertain(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		messageID string
		phase     operation.Phase
		revision  int64
	}{
		{"the claiming message redelivered", "dispatch-op", operation.PhaseUncertain, 3},
		{"another dispatch", "duplicate-dispatch", operation.PhaseSubmitting, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnv(t, "bolt", submit.Config{})
			rec := handlertest.Create(t, e.store, handlertest.Prepared("op"))
			d := handlertest.Dispatch(rec)
			claimed, err := operation.ClaimSubmission(rec, "a-worker", d.ID, handlertest.Start)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.Update(context.Background(), claimed, rec.Revision); err != nil {
				t.Fatal(err)
			}
			d.ID = tt.messageID
			if failed := e.handle(t, d); len(failed) != 0 {
				t.Fatalf("failed %v", failed)
			}
			if got := handlertest.Get(t, e.store, "op"); got.Phase != tt.phase || got.Revision != tt.revision {
				t.Fatalf("record %s r%d, want %s r%d", got.Phase, got.Revision, tt.phase, tt.revision)
			}
			if n := e.sim.TotalPosts(); n != 0 {
				t.Fatalf("%d POSTs", n)
			}
		})
	}
}

// The claiming message comes back while its POST is in flight (its
// visibility ran out) and marks the claim uncertain; the answer the
// claimant then gets is the outcome of the only POST and is applied.
func TestLateDefiniteAnswerAfterUncertainIsApplied(t *testing.T) {
	t.Parallel()
	type row struct {
		name     string
		fault    genacesim.Fault
		unsent   bool // the POST never left: release
		phase    operation.Phase
		followUp message.Action
	}
	var tests []row
	for _, o := range postOutcomes {
		tests = append(tests, row{o.name, o.fault, false, o.phase, o.followUp})
	}
	tests = append(tests, row{"POST never sent", genacesim.NoFault(), true, operation.PhasePrepared, message.ActionSubmitGeneration})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, g := newEnv(t, "bolt", submit.Config{})
			rec := handlertest.Create(t, e.store, handlertest.Prepared("op"))
			e.sim.ScriptPOST("op", tt.fault)
			if tt.unsent {
				g.inner = refusingClient(t)
			}
			d := handlertest.Dispatch(rec)
			g.during = func() {
				g.during = nil
				if _, err := e.other().Handle(context.Background(), handlertest.Event(t, e.clk.Now(), d)); err != nil {
					t.Error(err)
				}
				if got := handlertest.Get(t, e.store, "op"); got.Phase != operation.PhaseUncertain {
					t.Errorf("the redelivery left %s, want uncertain", got.Phase)
				}
			}
			e.handle(t, d)
			checkApplied(t, e, "op", tt.phase, tt.followUp)
			got := handlertest.Get(t, e.store, "op")
			wantPosts := 1
			if tt.unsent {
				wantPosts = 0
			}
			if n := e.sim.PostCount("op"); n != wantPosts || got.Posts != wantPosts {
				t.Fatalf("Genace saw %d POSTs, the record counts %d; want %d", n, got.Posts, wantPosts)
			}
			if tt.phase == operation.PhasePrepared && got.Claim != nil {
				t.Fatalf("claim %+v kept on a prepared record", got.Claim)
			}
		})
	}
}

// While a claimant's POST was in flight, its message came back and
// marked the claim uncertain, an operator confirmed "not submitted", and
// a new dispatch claimed the operation. The first claimant's answer must
// not undo the new claim (whose POST may be under way): a job id goes to
// a review, anything else is dropped.
func TestClaimantsAnswerNeverUndoesAnotherClaim(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		fault  genacesim.Fault
		unsent bool
	}{
		{"202", genacesim.NoFault(), false},
		{"429", genacesim.RateLimited(7 * time.Second), false},
		{"422", genacesim.Reject(422, "invalid_request"), false},
		{"POST never sent", genacesim.NoFault(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e, g := newEnv(t, "bolt", submit.Config{})
			rec := handlertest.Create(t, e.store, handlertest.Prepared("op"))
			e.sim.ScriptPOST("op", tt.fault)
			if tt.unsent {
				g.inner = refusingClient(t)
			}
			d := handlertest.Dispatch(rec)
			var theirs operation.Record
			g.during = func() {
				g.during = nil
				if _, err := e.other().Handle(ctx, handlertest.Event(t, e.clk.Now(), d)); err != nil {
					t.Error(err)
				}
				cur, err := e.store.Get(ctx, "op")
				if err == nil {
					var reset operation.Record
					if reset, err = operation.ConfirmNotSubmitted(cur, e.clk.Now()); err == nil {
						cur, err = e.store.Update(ctx, reset, cur.Revision)
					}
				}
				if err == nil {
					var claimed operation.Record
					if claimed, err = operation.ClaimSubmission(cur, "worker-2", "dispatch-2", e.clk.Now()); err == nil {
						theirs, err = e.store.Update(ctx, claimed, cur.Revision)
					}
				}
				if err != nil {
					t.Errorf("operator's reset and the new claim: %v", err)
				}
			}
			e.handle(t, d)
			got := handlertest.Get(t, e.store, "op")
			if theirs.Claim == nil {
				t.Fatal("the race was not set up")
			}
			if got.Revision != theirs.Revision || got.Phase != operation.PhaseSubmitting || got.Claim == nil || got.Claim.Owner != "worker-2" {
				t.Fatalf("record %s r%d claim %+v; want the new claim untouched at r%d", got.Phase, got.Revision, got.Claim, theirs.Revision)
			}
			if sent := e.out.Take(); len(sent) != 0 {
				t.Fatalf("sent %+v", sent)
			}
			jobs := e.sim.JobsForOperation("op")
			rv, err := e.store.OpenReviews(ctx)
			if err != nil {
				t.Fatal(err)
			}
			kept := false
			for _, r := range rv {
				kept = kept || (len(jobs) == 1 && r.RemoteJobID == jobs[0])
			}
			if (len(jobs) == 1) != kept {
				t.Fatalf("Genace created %v; open reviews %+v: a job id must be kept in one", jobs, rv)
			}
		})
	}
}

// refusingClient is a Genace client whose every connection is refused: a
// POST through it provably never leaves.
func refusingClient(t *testing.T) *genace.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err := genace.New("http://"+addr, handlertest.APIKey, &http.Client{Transport: &http.Transport{}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// racingStore lets another writer move the record right after the
// handler read it.
type racingStore struct {
	store.Store
	once sync.Once
	race func()
}

func (s *racingStore) Get(ctx context.Context, id string) (operation.Record, error) {
	r, err := s.Store.Get(ctx, id)
	s.once.Do(s.race)
	return r, err
}

// Two dispatches race for one operation: the other worker's claim lands
// between this worker's read and its claim. The claim's conditional
// write fails, and without a claim there is no POST.
func TestLostClaimRaceNeverPosts(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e, g := newEnv(t, kind, submit.Config{})
		rec := handlertest.Create(t, e.store, handlertest.Prepared("op"))
		st := &racingStore{Store: e.store, race: func() {
			claimed, err := operation.ClaimSubmission(rec, "other-worker", "other-dispatch", handlertest.Start)
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := e.store.Update(context.Background(), claimed, rec.Revision); err != nil {
				t.Error(err)
			}
		}}
		h := submit.New(submit.Deps{Store: st, Genace: g, Extender: e.ext, Sender: e.out, Clock: e.clk, Log: slog.New(slog.NewJSONHandler(e.logs, nil)), Metrics: metrics.New(e.mlines, "submit", e.clk)}, submit.Config{})
		resp, err := h.Handle(context.Background(), handlertest.Event(t, e.clk.Now(), handlertest.Dispatch(rec)))
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("%v, failures %v", err, handlertest.Failed(resp))
		}
		if n := e.sim.TotalPosts(); n != 0 {
			t.Fatalf("POSTed %d times without holding the claim", n)
		}
		got := handlertest.Get(t, e.store, "op")
		if got.Phase != operation.PhaseSubmitting || got.Revision != 2 || got.Claim == nil || got.Claim.Owner != "other-worker" {
			t.Fatalf("record %s r%d claim %+v; want the other worker's claim untouched", got.Phase, got.Revision, got.Claim)
		}
		if e.out.Len() != 0 || !strings.Contains(e.mlines.String(), `"Reason":"claim_conflict"`) {
			t.Fatalf("sent %d; metrics:\n%s", e.out.Len(), e.mlines.String())
		}
	})
}

// While a claimant's POST was in flight, its message came back and marked
// the claim uncertain, and an operator reconciled the operation with the
// job Genace shows (the observation may have moved it on since). The
// claimant's 202 then names the job the record already holds: it is
// already applied. Writing it again sends a second observation next to
// the one the reconciliation started, and once the record has moved past
// accepted the write is refused and the id goes to a review, asking an
// operator to attach a job id the record carries (seed 42's op-002668).
func TestLate202ForTheJobTheRecordHoldsWritesNothing(t *testing.T) {
	t.Parallel()
	for _, moved := range []operation.Phase{operation.PhaseAccepted, operation.PhaseSucceeded} {
		t.Run("reconciled then "+string(moved), func(t *testing.T) {
			t.Parallel()
			forEachStore(t, func(t *testing.T, kind string) {
				ctx := context.Background()
				e, g := newEnv(t, kind, submit.Config{})
				rec := handlertest.Create(t, e.store, handlertest.Prepared("op"))
				d := handlertest.Dispatch(rec)
				var reconciled operation.Record
				g.during = func() {
					g.during = nil
					if _, err := e.other().Handle(ctx, handlertest.Event(t, e.clk.Now(), d)); err != nil {
						t.Error(err)
					}
					cur := handlertest.Get(t, e.store, "op")
					jobs := e.sim.JobsForOperation("op")
					if cur.Phase != operation.PhaseUncertain || len(jobs) != 1 {
						t.Fatalf("before the reconciliation: %s, jobs %v; want uncertain and one job", cur.Phase, jobs)
					}
					// The operator's reconcile --job-id, as replay's attach-job
					// writes it: no message applied it.
					next, err := operation.Accept(cur, jobs[0], nil, e.clk.Now())
					if err != nil {
						t.Fatal(err)
					}
					next.LastAppliedMessageID = ""
					if reconciled, err = e.store.Update(ctx, next, cur.Revision); err != nil {
						t.Fatal(err)
					}
					if moved == operation.PhaseSucceeded { // the observation found the job done
						next := reconciled.Clone()
						next.Phase = operation.PhaseSucceeded
						next.Remote = &operation.Snapshot{State: operation.RemoteState("succeeded"), ObservedAt: e.clk.Now()}
						if reconciled, err = e.store.Update(ctx, next, reconciled.Revision); err != nil {
							t.Fatal(err)
						}
					}
					e.out.Take() // the chain the operator's write started
				}
				if failed := e.handle(t, d); len(failed) != 0 {
					t.Fatalf("failed %v", failed)
				}
				got := handlertest.Get(t, e.store, "op")
				if got.Revision != reconciled.Revision || got.Phase != moved || got.RemoteJobID != reconciled.RemoteJobID {
					t.Fatalf("record r%d %s job %q after the late 202; want it left as reconciled: r%d %s job %q",
						got.Revision, got.Phase, got.RemoteJobID, reconciled.Revision, moved, reconciled.RemoteJobID)
				}
				if sent := e.out.Take(); len(sent) != 0 {
					t.Fatalf("the late 202 sent %+v; the reconciliation's chain already carries the operation", sent)
				}
				reviews, err := e.store.OpenReviewsOf(ctx, "op")
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range reviews {
					if r.RemoteJobID != "" {
						t.Fatalf("review %s (%s) asks to attach job %s, which the record holds", r.ID, r.ErrorCategory, r.RemoteJobID)
					}
				}
			})
		})
	}
}
