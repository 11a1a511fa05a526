package submit_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/submit"
)

type env struct {
	clk    *clock.Manual
	sim    *genacesim.Simulator
	client *genace.Client
	store  store.Store
	out    *handlertest.Outbox
	ext    *handlertest.Extender
	logs   *handlertest.Buffer
	mlines *handlertest.Buffer
	h      *submit.Handler
}

// gen wraps the client so a test can act while a POST is in flight:
// before runs as it leaves, during once Genace has answered and before the
// answer is persisted.
type gen struct {
	inner  *genace.Client
	before func()
	during func()
}

func (g *gen) Submit(ctx context.Context, req genace.SubmitRequest, timeout time.Duration) genace.SubmitResult {
	if g.before != nil {
		g.before()
	}
	res := g.inner.Submit(ctx, req, timeout)
	if g.during != nil {
		g.during()
	}
	return res
}

func newEnv(t *testing.T, kind string, cfg submit.Config) (*env, *gen) {
	t.Helper()
	e := &env{clk: clock.NewManual(handlertest.Start), out: &handlertest.Outbox{}, ext: &handlertest.Extender{}, logs: &handlertest.Buffer{}, mlines: &handlertest.Buffer{}}
	e.sim, e.client = handlertest.Sim(t, e.clk, genacesim.Config{})
	e.store = handlertest.OpenStore(t, kind)
	g := &gen{inner: e.client}
	log := slog.New(slog.NewJSONHandler(e.logs, nil))
	e.h = submit.New(submit.Deps{Store: e.store, Genace: g, Extender: e.ext, Sender: e.out, Clock: e.clk, Log: log, Metrics: metrics.New(e.mlines, "submit", e.clk)}, cfg)
	return e, g
}

func (e *env) handle(t *testing.T, msgs ...handlertest.Sent) []string {
	t.Helper()
	resp, err := e.h.Handle(context.Background(), handlertest.Event(t, e.clk.Now(), msgs...))
	if err != nil {
		t.Fatal(err)
	}
	return handlertest.Failed(resp)
}

func forEachStore(t *testing.T, f func(t *testing.T, kind string)) {
	for _, kind := range handlertest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f(t, kind)
		})
	}
}

func TestAcceptedPersistsJobAndSchedulesObservation(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e, _ := newEnv(t, kind, submit.Config{})
		rec := handlertest.Create(t, e.store, handlertest.Prepared("op-ok"))
		if failed := e.handle(t, handlertest.Dispatch(rec)); len(failed) != 0 {
			t.Fatalf("failed records %v", failed)
		}
		got := handlertest.Get(t, e.store, "op-ok")
		jobs := e.sim.JobsForOperation("op-ok")
		if got.Phase != operation.PhaseAccepted || len(jobs) != 1 || got.RemoteJobID != jobs[0] || got.Revision != 3 {
			t.Fatalf("record %s r%d job %q; simulator jobs %v", got.Phase, got.Revision, got.RemoteJobID, jobs)
		}
		sent := e.out.Take()
		want := message.Envelope{Action: message.ActionObserveGeneration, OperationID: "op-ok", ExpectedRevision: 3, ExpectedRemoteJobID: jobs[0], Attempt: 1}
		if len(sent) != 1 || sent[0].Env != want || sent[0].Delay != 0 {
			t.Fatalf("sent %+v, want one %+v", sent, want)
		}
		if e.sim.PostCount("op-ok") != 1 {
			t.Fatalf("POSTs = %d", e.sim.PostCount("op-ok"))
		}
	})
}

func TestRedeliveredDispatchNeverPostsAgain(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e, _ := newEnv(t, kind, submit.Config{})
		rec := handlertest.Create(t, e.store, handlertest.Prepared("op-dup"))
		d := handlertest.Dispatch(rec)
		e.handle(t, d)
		e.out.Take()
		// The same message again (its delete was lost): it re-emits its
		// follow-up, never a POST.
		e.handle(t, d)
		if sent := e.out.Take(); len(sent) != 1 || sent[0].Env.Action != message.ActionObserveGeneration {
			t.Fatalf("redelivery sent %+v, want the observation again", sent)
		}
		// A second dispatch message for the same operation (a duplicate
		// send): the job id is known and an observation is pending.
		dup := d
		dup.ID = "another-dispatch"
		e.handle(t, dup)
		if n := e.out.Len(); n != 0 {
			t.Fatalf("duplicate dispatch sent %d messages", n)
		}
		// Much later, with the observation overdue, it re-arms one.
		e.clk.Advance(time.Hour)
		e.handle(t, dup)
		if sent := e.out.Take(); len(sent) != 1 || sent[0].Env.ExpectedRevision != 3 {
			t.Fatalf("overdue re-arm sent %+v", sent)
		}
		if n := e.sim.PostCount("op-dup"); n != 1 {
			t.Fatalf("POSTs = %d, want 1", n)
		}
	})
}

func TestLostResponseGoesToReconciliationNotASecondPost(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e, _ := newEnv(t, kind, submit.Config{})
		rec := handlertest.Create(t, e.store, handlertest.Prepared("op-lost"))
		e.sim.ScriptPOST("op-lost", genacesim.AcceptThenDrop())
		d := handlertest.Dispatch(rec)
		e.handle(t, d)
		got := handlertest.Get(t, e.store, "op-lost")
		if got.Phase != operation.PhaseUncertain || got.RemoteJobID != "" {
			t.Fatalf("after a lost response: %s %q", got.Phase, got.RemoteJobID)
		}
		rv, err := e.store.OpenReviews(context.Background())
		if err != nil || len(rv) != 1 || rv[0].Recommended != operation.ActionReconcile || rv[0].OperationID != "op-lost" {
			t.Fatalf("reviews %+v, %v", rv, err)
		}
		// The redelivered dispatch: obsolete, no POST, no write.
		e.handle(t, d)
		if again := handlertest.Get(t, e.store, "op-lost"); again.Revision != got.Revision {
			t.Fatalf("redelivery wrote revision %d", again.Revision)
		}
		if n := e.sim.PostCount("op-lost"); n != 1 {
			t.Fatalf("simulator counted %d POSTs, want exactly 1", n)
		}
		if e.out.Len() != 0 {
			t.Fatal("an uncertain operation scheduled a follow-up")
		}
	})
}

func TestRedeliveryWhileSubmittingMarksUncertainWithoutPost(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e, _ := newEnv(t, kind, submit.Config{})
		rec := handlertest.Create(t, e.store, handlertest.Prepared("op-crash"))
		// A worker claimed it and died; nobody knows whether it POSTed.
		claimed, err := operation.ClaimSubmission(rec, "dead-worker", "dispatch-op-crash", handlertest.Start)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Update(context.Background(), claimed, rec.Revision); err != nil {
			t.Fatal(err)
		}
		e.handle(t, handlertest.Dispatch(rec))
		if got := handlertest.Get(t, e.store, "op-crash"); got.Phase != operation.PhaseUncertain {
			t.Fatalf("phase %s, want uncertain", got.Phase)
		}
		if n := e.sim.TotalPosts(); n != 0 {
			t.Fatalf("%d POSTs", n)
		}
	})
}

func TestJobIDPersistedEvenWhenRevisionMoved(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e, g := newEnv(t, kind, submit.Config{})
		rec := handlertest.Create(t, e.store, handlertest.Prepared("op-race"))
		d := handlertest.Dispatch(rec)
		// While the first worker's POST is in flight, its message becomes
		// visible again and a second worker marks the claim uncertain.
		second, _ := newEnv(t, kind, submit.Config{})
		second2 := submit.New(submit.Deps{Store: e.store, Genace: second.client, Extender: e.ext, Sender: e.out, Clock: e.clk, Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()}, submit.Config{})
		g.during = func() {
			g.during = nil
			if _, err := second2.Handle(context.Background(), handlertest.Event(t, e.clk.Now(), d)); err != nil {
				t.Error(err)
			}
			if got := handlertest.Get(t, e.store, "op-race"); got.Phase != operation.PhaseUncertain {
				t.Errorf("second worker left %s, want uncertain", got.Phase)
			}
		}
		e.handle(t, d)
		got := handlertest.Get(t, e.store, "op-race")
		jobs := e.sim.JobsForOperation("op-race")
		if got.Phase != operation.PhaseAccepted || len(jobs) != 1 || got.RemoteJobID != jobs[0] {
			t.Fatalf("record %s job %q, simulator %v: the job id was not persisted", got.Phase, got.RemoteJobID, jobs)
		}
		if n := e.sim.PostCount("op-race") + second.sim.TotalPosts(); n != 1 {
			t.Fatalf("%d POSTs", n)
		}
	})
}

func TestSubmissionFailureKeepsJobID(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e, _ := newEnv(t, kind, submit.Config{})
		rec := handlertest.Create(t, e.store, handlertest.Prepared("op-502"))
		e.sim.ScriptPOST("op-502", genacesim.SubmissionFailed(502))
		e.handle(t, handlertest.Dispatch(rec))
		got := handlertest.Get(t, e.store, "op-502")
		jobs := e.sim.JobsForOperation("op-502")
		if got.Phase != operation.PhaseFailed || got.Settlement != operation.SettlementUnresolved || len(jobs) != 1 || got.RemoteJobID != jobs[0] {
			t.Fatalf("record %s/%s job %q; simulator %v", got.Phase, got.Settlement, got.RemoteJobID, jobs)
		}
		sent := e.out.Take()
		if len(sent) != 1 || sent[0].Env.Action != message.ActionObserveGeneration || sent[0].Env.ExpectedRemoteJobID != jobs[0] {
			t.Fatalf("sent %+v, want an observation of the failed job", sent)
		}
	})
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		fault     genacesim.Fault
		phase     operation.Phase
		followUp  message.Action
		minDelay  time.Duration
		wantPosts int
	}{
		{"rejected 422", genacesim.Reject(422, "invalid_request"), operation.PhaseRejected, "", 0, 1},
		{"rejected 402", genacesim.Reject(402, "insufficient_credits"), operation.PhaseRejected, "", 0, 1},
		{"rate limited", genacesim.RateLimited(7 * time.Second), operation.PhasePrepared, message.ActionSubmitGeneration, 7 * time.Second, 1},
		{"5xx no job", genacesim.ServerErrorNoJob(503), operation.PhaseUncertain, "", 0, 1},
		{"5xx job created", genacesim.ServerErrorJobCreated(500), operation.PhaseUncertain, "", 0, 1},
		{"garbage 202", genacesim.GarbageBody(), operation.PhaseUncertain, "", 0, 1},
		{"timeout", genacesim.DelayResponse(time.Hour), operation.PhaseUncertain, "", 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnv(t, "bolt", submit.Config{SubmitTimeout: 200 * time.Millisecond})
			rec := handlertest.Create(t, e.store, handlertest.Prepared("op"))
			e.sim.ScriptPOST("op", tt.fault)
			e.handle(t, handlertest.Dispatch(rec))
			got := handlertest.Get(t, e.store, "op")
			if got.Phase != tt.phase {
				t.Fatalf("phase %s, want %s", got.Phase, tt.phase)
			}
			sent := e.out.Take()
			if tt.followUp == "" {
				if len(sent) != 0 {
					t.Fatalf("sent %+v, want nothing", sent)
				}
			} else if len(sent) != 1 || sent[0].Env.Action != tt.followUp || sent[0].Delay < tt.minDelay || sent[0].Env.ExpectedRevision != got.Revision {
				t.Fatalf("sent %+v, want %s after ≥%s at r%d", sent, tt.followUp, tt.minDelay, got.Revision)
			}
			if n := e.sim.PostCount("op"); n != tt.wantPosts {
				t.Fatalf("POSTs = %d, want %d", n, tt.wantPosts)
			}
			if tt.phase == operation.PhasePrepared {
				// The delayed dispatch goes through once the limit passes.
				e.clk.Advance(sent[0].Delay)
				e.handle(t, sent[0])
				if again := handlertest.Get(t, e.store, "op"); again.Phase != operation.PhaseAccepted || e.sim.PostCount("op") != 2 {
					t.Fatalf("after the retry: %s with %d POSTs (one 429, one accepted)", again.Phase, e.sim.PostCount("op"))
				}
			}
		})
	}
}

func TestStaleOrUnauthorizedDispatchWritesNothing(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e, _ := newEnv(t, kind, submit.Config{})
		ctx := context.Background()
		// The user changed the request after the dispatch was sent.
		rec := handlertest.Create(t, e.store, handlertest.Prepared("op-stale"))
		changed, err := operation.ChangeSpec(rec, handlertest.Start)
		if err != nil {
			t.Fatal(err)
		}
		changed.AuthorizedSpecRevision = changed.SpecRevision // re-authorized
		if _, err := e.store.Update(ctx, changed, rec.Revision); err != nil {
			t.Fatal(err)
		}
		e.handle(t, handlertest.Dispatch(rec))
		if got := handlertest.Get(t, e.store, "op-stale"); got.Revision != 2 || got.Phase != operation.PhasePrepared {
			t.Fatalf("stale dispatch wrote: r%d %s", got.Revision, got.Phase)
		}
		// Unauthorized, over budget, stale spec: acknowledged, nothing written.
		for id, f := range map[string]func(*operation.Record){
			"op-unauth": func(r *operation.Record) { r.Authorized = false },
			"op-budget": func(r *operation.Record) { r.EstimatedCredits = 999 },
			"op-spec":   func(r *operation.Record) { r.SpecRevision = 2 },
		} {
			r := handlertest.Prepared(id)
			f(&r)
			r = handlertest.Create(t, e.store, r)
			if failed := e.handle(t, handlertest.Dispatch(r)); len(failed) != 0 {
				t.Fatalf("%s: failed %v", id, failed)
			}
			if got := handlertest.Get(t, e.store, id); got.Revision != 1 {
				t.Fatalf("%s: wrote revision %d", id, got.Revision)
			}
		}
		if n := e.sim.TotalPosts(); n != 0 {
			t.Fatalf("%d POSTs", n)
		}
		if !strings.Contains(e.mlines.String(), `"Reason":"stale_revision"`) || !strings.Contains(e.mlines.String(), `"Reason":"precondition_authorization"`) {
			t.Fatalf("obsolete metrics missing their reasons:\n%s", e.mlines.String())
		}
	})
}

func TestLeaseRenewalFailurePreventsPost(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		// The queue's visibility (10 s) is shorter than POST + persist
		// (25 s): the worker must renew first, and the renewal fails.
		e, _ := newEnv(t, kind, submit.Config{Visibility: 10 * time.Second})
		e.ext.Fail = true
		rec := handlertest.Create(t, e.store, handlertest.Prepared("op-lease"))
		e.handle(t, handlertest.Dispatch(rec))
		if n := e.sim.TotalPosts(); n != 0 {
			t.Fatalf("POSTed %d times without a lease", n)
		}
		got := handlertest.Get(t, e.store, "op-lease")
		if got.Phase != operation.PhasePrepared || got.Claim != nil || got.Posts != 0 {
			t.Fatalf("claim not released: %s claim=%v posts=%d", got.Phase, got.Claim, got.Posts)
		}
		sent := e.out.Take()
		if len(sent) != 1 || sent[0].Env.Action != message.ActionSubmitGeneration || sent[0].Env.ExpectedRevision != got.Revision {
			t.Fatalf("sent %+v, want a fresh dispatch at r%d", sent, got.Revision)
		}
		if !strings.Contains(e.mlines.String(), metrics.LeaseRenewalFailures) {
			t.Fatal("lease renewal failure not counted")
		}
		// With a working lease the fresh dispatch submits.
		e.ext.Fail = false
		e.handle(t, sent[0])
		if got := handlertest.Get(t, e.store, "op-lease"); got.Phase != operation.PhaseAccepted || e.sim.TotalPosts() != 1 {
			t.Fatalf("fresh dispatch: %s, %d POSTs", got.Phase, e.sim.TotalPosts())
		}
	})
}

func TestBadInputFailsTowardsDLQAndLosesNothing(t *testing.T) {
	t.Parallel()
	e, _ := newEnv(t, "bolt", submit.Config{})
	ctx := context.Background()
	for _, body := range []string{`not json`, `{"action":"submit_generation"}`, `{"action":"observe_generation","operation_id":"op","expected_remote_job_id":"j","expected_revision":1,"attempt":0}`} {
		resp, err := e.h.Handle(ctx, handlertest.Raw("bad", body))
		if err != nil || !slices.Equal(handlertest.Failed(resp), []string{"bad"}) {
			t.Fatalf("body %q: failures %v err %v; want the record reported failed", body, handlertest.Failed(resp), err)
		}
	}
	// An unknown operation fails too (towards triage), without a POST.
	unknown := handlertest.Dispatch(operation.Record{OperationID: "op-nobody", Revision: 1})
	if failed := e.handle(t, unknown); len(failed) != 1 {
		t.Fatalf("unknown operation: failures %v", failed)
	}
	if e.sim.TotalPosts() != 0 || e.out.Len() != 0 {
		t.Fatal("bad input caused a POST or a send")
	}
	if _, err := e.store.Get(ctx, "op-nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown operation was created: %v", err)
	}
}

func TestNoSecretOrPromptInLogsMetricsOrMessages(t *testing.T) {
	t.Parallel()
	e, _ := newEnv(t, "bolt", submit.Config{})
	for i, f := range []genacesim.Fault{genacesim.NoFault(), genacesim.AcceptThenDrop(), genacesim.SubmissionFailed(502), genacesim.GarbageBody()} {
		id := "op-secret-" + string(rune('a'+i))
		rec := handlertest.Create(t, e.store, handlertest.Prepared(id))
		e.sim.ScriptPOST(id, f)
		e.handle(t, handlertest.Dispatch(rec))
	}
	var bodies strings.Builder
	for _, s := range e.out.Take() {
		b, _ := s.Env.Encode()
		bodies.Write(b)
	}
	for _, where := range []string{e.logs.String(), e.mlines.String(), bodies.String()} {
		for _, secret := range []string{handlertest.APIKey, "lighthouse", "sig=", "expires="} {
			if strings.Contains(where, secret) {
				t.Fatalf("%q leaked:\n%s", secret, where)
			}
		}
	}
	if !strings.Contains(e.logs.String(), "POST classified") {
		t.Fatal("the logs are empty; the leak check proves nothing")
	}
}

func TestRateLimitRetryStaysWithinSQSDelay(t *testing.T) {
	t.Parallel()
	e, _ := newEnv(t, "bolt", submit.Config{})
	rec := handlertest.Create(t, e.store, handlertest.Prepared("op-429"))
	e.sim.ScriptPOST("op-429", genacesim.RateLimited(2*time.Hour))
	e.handle(t, handlertest.Dispatch(rec))
	sent := e.out.Take()
	if len(sent) != 1 || sent[0].Delay != 15*time.Minute {
		t.Fatalf("sent %+v, want one dispatch after exactly 15m", sent)
	}
}
