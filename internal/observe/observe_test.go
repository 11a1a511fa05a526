package observe_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/submit"
	"github.com/genjobs/genjobs/internal/triage"
)

var _ observe.Delays = (*schedule.Observation)(nil)

// gen wraps the client: it records the long poll asked for, can hold a
// GET until released, and answers at once (wait 0) so the manual clock
// never blocks a test.
type gen struct {
	inner   *genace.Client
	mu      sync.Mutex
	waits   []time.Duration
	entered chan struct{}
	release chan struct{}
}

func (g *gen) Get(ctx context.Context, jobID string, wait, timeout time.Duration) (*genace.Job, error) {
	g.mu.Lock()
	g.waits = append(g.waits, wait)
	entered, release := g.entered, g.release
	g.entered, g.release = nil, nil
	g.mu.Unlock()
	job, err := g.inner.Get(ctx, jobID, 0, 5*time.Second)
	if entered != nil {
		close(entered)
		<-release
	}
	return job, err
}

// hold makes the next GET block after reading until release is closed.
func (g *gen) hold() (entered, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.entered, g.release = make(chan struct{}), make(chan struct{})
	return g.entered, g.release
}

type env struct {
	clk    *clock.Manual
	sim    *genacesim.Simulator
	gen    *gen
	store  store.Store
	out    *handlertest.Outbox
	ext    *handlertest.Extender
	delays *schedule.Observation
	logs   *handlertest.Buffer
	mlines *handlertest.Buffer
	obs    *observe.Handler
	sub    *submit.Handler
	cfg    observe.Config
}

func testPolicies() schedule.Policies {
	ps := schedule.DefaultPolicies()
	ps.Default = schedule.Policy{LongPoll: 20 * time.Second, Immediate: 0, Base: 5 * time.Second, Cap: time.Minute, Multiplier: 2, Jitter: 0}
	ps.Accounting = schedule.Backoff{Base: 30 * time.Second, Cap: 10 * time.Minute, Multiplier: 2}
	return ps
}

func newEnv(t testing.TB, kind string, simCfg genacesim.Config, cfg observe.Config) *env {
	t.Helper()
	e := &env{clk: clock.NewManual(handlertest.Start), out: &handlertest.Outbox{}, ext: &handlertest.Extender{}, logs: &handlertest.Buffer{}, mlines: &handlertest.Buffer{}, cfg: cfg}
	var client *genace.Client
	e.sim, client = handlertest.Sim(t, e.clk, simCfg)
	e.gen = &gen{inner: client}
	e.store = handlertest.OpenStore(t, kind)
	e.delays = schedule.NewObservation(testPolicies())
	e.delays.Rand = func() float64 { return 0.5 }
	log := slog.New(slog.NewJSONHandler(e.logs, nil))
	e.obs = observe.New(observe.Deps{Store: e.store, Genace: e.gen, Delays: e.delays, Extender: e.ext, Sender: e.out, Clock: e.clk, Log: log, Metrics: metrics.New(e.mlines, "observe", e.clk)}, cfg)
	e.sub = submit.New(submit.Deps{Store: e.store, Genace: client, Extender: e.ext, Sender: e.out, Clock: e.clk, Log: log, Metrics: metrics.Discard()}, submit.Config{})
	return e
}

// accept creates an operation and submits it; it returns the first
// observation message.
func (e *env) accept(t *testing.T, id string) handlertest.Sent { return e.acceptB(t, id) }

func (e *env) acceptB(t testing.TB, id string) handlertest.Sent {
	t.Helper()
	rec := handlertest.Create(t, e.store, handlertest.Prepared(id))
	if _, err := e.sub.Handle(context.Background(), handlertest.Event(t, e.clk.Now(), handlertest.Dispatch(rec))); err != nil {
		t.Fatal(err)
	}
	sent := e.out.Take()
	if len(sent) != 1 || sent[0].Env.Action != message.ActionObserveGeneration {
		t.Fatalf("submit sent %+v", sent)
	}
	return sent[0]
}

func (e *env) observe(t *testing.T, msgs ...handlertest.Sent) []string {
	t.Helper()
	resp, err := e.obs.Handle(context.Background(), handlertest.Event(t, e.clk.Now(), msgs...))
	if err != nil {
		t.Fatal(err)
	}
	return handlertest.Failed(resp)
}

// drain delivers observation messages (after their delay) until none is
// left or another action appears; it returns the last message sent.
func (e *env) drain(t *testing.T, next handlertest.Sent, max int) (handlertest.Sent, int) {
	t.Helper()
	for steps := 0; steps < max; steps++ {
		e.clk.Advance(next.Delay)
		if failed := e.observe(t, next); len(failed) != 0 {
			t.Fatalf("observation failed: %v\n%s", failed, e.logs.String())
		}
		sent := e.out.Take()
		if len(sent) == 0 {
			return handlertest.Sent{}, steps + 1
		}
		if len(sent) != 1 {
			t.Fatalf("one observation sent %d messages: the chain forked", len(sent))
		}
		next = sent[0]
		if next.Env.Action != message.ActionObserveGeneration {
			return next, steps + 1
		}
	}
	t.Fatalf("chain still running after %d observations", max)
	return handlertest.Sent{}, 0
}

func forEachStore(t *testing.T, f func(t *testing.T, kind string)) {
	for _, kind := range handlertest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f(t, kind)
		})
	}
}

func TestObservesUntilSucceededThenHandsToDelivery(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind, genacesim.Config{}, observe.Config{})
		first := e.accept(t, "op-ok")
		last, steps := e.drain(t, first, 50)
		got := handlertest.Get(t, e.store, "op-ok")
		want := message.Envelope{Action: message.ActionDeliverArtifacts, OperationID: "op-ok", ExpectedRevision: got.Revision, ExpectedRemoteJobID: got.RemoteJobID, Attempt: last.Env.Attempt}
		if got.Phase != operation.PhaseSucceeded || last.Env != want {
			t.Fatalf("record %s, last message %+v; want succeeded and %+v", got.Phase, last.Env, want)
		}
		if got.Counters.Observations != steps || e.sim.GetCount(got.RemoteJobID) != steps {
			t.Fatalf("%d observations recorded, %d GETs, %d steps", got.Counters.Observations, e.sim.GetCount(got.RemoteJobID), steps)
		}
		if got.Remote == nil || len(got.Remote.Outputs) != 1 || got.Remote.Outputs[0].SHA256 == "" {
			t.Fatalf("snapshot outputs %+v", got.Remote)
		}
		if e.sim.TotalPosts() != 1 {
			t.Fatalf("%d POSTs", e.sim.TotalPosts())
		}
	})
}

// The seed's first test: pause an observer until its visibility expires,
// let a second worker receive the same message. Both GET the same saved
// job; exactly one write lands; the loser writes and schedules nothing.
func TestPausedObserverLosesToSecondWorker(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind, genacesim.Config{}, observe.Config{})
		m := e.accept(t, "op-pause")
		before := handlertest.Get(t, e.store, "op-pause")
		entered, release := e.gen.hold()
		done := make(chan []string)
		go func() {
			resp, _ := e.obs.Handle(context.Background(), handlertest.Event(t, e.clk.Now(), m))
			done <- handlertest.Failed(resp)
		}()
		<-entered // worker A has read the job and is paused
		e.clk.Advance(7 * time.Minute)
		if failed := e.observe(t, m); len(failed) != 0 { // worker B: same message
			t.Fatalf("worker B failed: %v", failed)
		}
		afterB := handlertest.Get(t, e.store, "op-pause")
		sentB := e.out.Take()
		close(release)
		if failed := <-done; len(failed) != 0 {
			t.Fatalf("worker A reported failure %v; losing the race is a normal acknowledgement", failed)
		}
		after := handlertest.Get(t, e.store, "op-pause")
		if n := e.sim.GetCount(before.RemoteJobID); n != 2 {
			t.Fatalf("%d GETs of the saved job, want 2 (one per worker)", n)
		}
		if after.Revision != before.Revision+1 || after.Revision != afterB.Revision || after.Counters.Observations != 1 {
			t.Fatalf("revision %d → %d (B wrote %d), observations %d: want exactly one write", before.Revision, after.Revision, afterB.Revision, after.Counters.Observations)
		}
		if len(sentB) != 1 || e.out.Len() != 0 {
			t.Fatalf("B sent %d, A sent %d; want 1 and 0", len(sentB), e.out.Len())
		}
	})
}

func TestSubmissionFailureObservedUntilRefundSettles(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind, genacesim.Config{RefundSettleAfter: 2 * time.Minute}, observe.Config{})
		e.sim.ScriptPOST("op-502", genacesim.SubmissionFailed(502))
		first := e.accept(t, "op-502")
		last, steps := e.drain(t, first, 20)
		got := handlertest.Get(t, e.store, "op-502")
		if got.Phase != operation.PhaseFailed || got.Settlement != operation.SettlementSettled || !got.Terminal() || last.Env.Action != "" {
			t.Fatalf("record %s/%s after %d steps, last %+v", got.Phase, got.Settlement, steps, last)
		}
		if steps < 2 {
			t.Fatalf("settled after %d observations; the refund was pending at first", steps)
		}
		if got.Remote.Credits.RefundState != operation.RefundSettled || e.sim.PostCount("op-502") != 1 {
			t.Fatalf("refund %s, POSTs %d", got.Remote.Credits.RefundState, e.sim.PostCount("op-502"))
		}
	})
}

func TestReconcileFailIsLeftForAccountingNeverSettled(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind, genacesim.Config{}, observe.Config{})
		e.delays.DefaultBudgets = operation.Budgets{MaxObservations: 100, Polling: time.Hour, Accounting: 20 * time.Minute}
		first := e.accept(t, "op-recon")
		rec := handlertest.Get(t, e.store, "op-recon")
		e.sim.Reconcile(rec.RemoteJobID)
		last, _ := e.drain(t, first, 30)
		got := handlertest.Get(t, e.store, "op-recon")
		if got.Phase != operation.PhaseFailed || got.Settlement != operation.SettlementUnresolved || got.Parked == nil || last.Env.Action != "" {
			t.Fatalf("record %s/%s parked=%v", got.Phase, got.Settlement, got.Parked)
		}
		if rc := operation.Recommend(&got); rc.Action != operation.ActionInspectAccounting {
			t.Fatalf("recommendation %+v", rc)
		}
		rv, err := e.store.OpenReviews(context.Background())
		if err != nil || len(rv) != 1 || rv[0].Recommended != operation.ActionInspectAccounting || rv[0].RemoteState != operation.RemoteFailed {
			t.Fatalf("reviews %+v %v", rv, err)
		}
	})
}

func TestStaleObservationWritesAndSchedulesNothing(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind, genacesim.Config{}, observe.Config{})
		m := e.accept(t, "op-stale")
		e.clk.Advance(time.Second)
		e.observe(t, m)
		e.out.Take()
		before := handlertest.Get(t, e.store, "op-stale")
		// An older message (another id, the old revision): obsolete.
		old := m
		old.ID = "older-copy"
		e.observe(t, old)
		// A message for another job id: obsolete.
		wrong := handlertest.Sent{ID: "wrong-job", Env: message.Envelope{Action: message.ActionObserveGeneration, OperationID: "op-stale", ExpectedRevision: before.Revision, ExpectedRemoteJobID: "job_someone_else"}}
		e.observe(t, wrong)
		after := handlertest.Get(t, e.store, "op-stale")
		if after.Revision != before.Revision || e.out.Len() != 0 {
			t.Fatalf("stale messages wrote r%d→r%d and sent %d", before.Revision, after.Revision, e.out.Len())
		}
		if e.sim.GetCount(before.RemoteJobID) != 1 {
			t.Fatalf("stale messages read the job: %d GETs", e.sim.GetCount(before.RemoteJobID))
		}
	})
}

func TestCrashBetweenWriteAndSendDoesNotEndTheChain(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind, genacesim.Config{}, observe.Config{})
		m := e.accept(t, "op-crash")
		e.out.FailNext(1) // the write lands, the send does not
		if failed := e.observe(t, m); len(failed) != 1 {
			t.Fatalf("a failed send must fail the record so SQS redelivers it; failures %v", failed)
		}
		written := handlertest.Get(t, e.store, "op-crash")
		if written.Revision != m.Env.ExpectedRevision+1 || e.out.Len() != 0 {
			t.Fatalf("after the crash: r%d, %d sent", written.Revision, e.out.Len())
		}
		// Redelivery of the same message: it recognises its own write and
		// re-emits the follow-up without reading or writing again.
		gets := e.sim.GetCount(written.RemoteJobID)
		e.observe(t, m)
		sent := e.out.Take()
		if len(sent) != 1 || sent[0].Env.ExpectedRevision != written.Revision {
			t.Fatalf("re-emitted %+v, want one observation at r%d", sent, written.Revision)
		}
		if e.sim.GetCount(written.RemoteJobID) != gets || handlertest.Get(t, e.store, "op-crash").Revision != written.Revision {
			t.Fatal("the re-emission read or wrote again")
		}
		last, _ := e.drain(t, sent[0], 50)
		if last.Env.Action != message.ActionDeliverArtifacts {
			t.Fatalf("chain ended with %+v", last)
		}
	})
}

func TestPollingBudgetStallsForReview(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt", genacesim.Config{DefaultModel: genacesim.ModelConfig{Price: 5, QueueFor: time.Hour, RunFor: time.Hour}}, observe.Config{})
	e.delays.DefaultBudgets = operation.Budgets{MaxObservations: 4, Polling: 24 * time.Hour, Accounting: time.Hour}
	last, steps := e.drain(t, e.accept(t, "op-slow"), 10)
	got := handlertest.Get(t, e.store, "op-slow")
	if got.Phase != operation.PhaseStalled || steps != 4 || last.Env.Action != "" {
		t.Fatalf("phase %s after %d steps", got.Phase, steps)
	}
	rv, _ := e.store.OpenReviews(context.Background())
	if len(rv) != 1 || rv[0].Recommended != operation.ActionObserve || rv[0].RemoteState != operation.RemoteQueued {
		t.Fatalf("reviews %+v", rv)
	}
}

func TestTransientReadFailureRidesOutWithoutDLQ(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt", genacesim.Config{}, observe.Config{MaxReadFailures: 3})
	m := e.accept(t, "op-flaky")
	job := handlertest.Get(t, e.store, "op-flaky").RemoteJobID
	e.sim.ScriptGET(job, genacesim.ServerErrorNoJob(503))
	if failed := e.observe(t, m); len(failed) != 0 {
		t.Fatalf("a transient read failure failed the record: %v", failed)
	}
	got := handlertest.Get(t, e.store, "op-flaky")
	sent := e.out.Take()
	if got.Counters.ReadFailures != 1 || got.LastError != "genace_read_failed" || len(sent) != 1 || sent[0].Delay <= 0 {
		t.Fatalf("failures %d, last error %q, sent %+v", got.Counters.ReadFailures, got.LastError, sent)
	}
	last, _ := e.drain(t, sent[0], 50)
	if last.Env.Action != message.ActionDeliverArtifacts || handlertest.Get(t, e.store, "op-flaky").Counters.ReadFailures != 0 {
		t.Fatalf("chain did not recover: %+v", last)
	}
	// At MaxReadFailures the operation parks with one review (before, the
	// message failed towards a DLQ it never reached: the sweep re-armed
	// the due record first and the old message came back obsolete).
	m2 := e.accept(t, "op-down")
	job2 := handlertest.Get(t, e.store, "op-down").RemoteJobID
	e.sim.ScriptGET(job2, genacesim.ServerErrorNoJob(503), genacesim.ServerErrorNoJob(503), genacesim.ServerErrorNoJob(503))
	next := m2
	for i := 0; i < 2; i++ {
		e.clk.Advance(next.Delay)
		e.observe(t, next)
		next = e.out.Take()[0]
	}
	e.clk.Advance(next.Delay)
	before := handlertest.Get(t, e.store, "op-down")
	if failed := e.observe(t, next); len(failed) != 0 {
		t.Fatalf("third consecutive failure: failures %v, want the message acknowledged", failed)
	}
	got = handlertest.Get(t, e.store, "op-down")
	if got.Parked == nil || got.Active() || got.Schedule != nil || got.LastError != "genace_read_failed" || got.Revision != before.Revision+1 || e.out.Len() != 0 {
		t.Fatalf("record r%d parked %+v active %t schedule %+v last error %q; want parked at r%d", got.Revision, got.Parked, got.Active(), got.Schedule, got.LastError, before.Revision+1)
	}
	open, err := e.store.OpenReviewsOf(context.Background(), "op-down")
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || open[0].RemoteJobID != job2 || open[0].ErrorCategory != "genace_read_failed" ||
		!strings.Contains(open[0].Reason, job2) || !strings.Contains(open[0].Reason, "3 failed read(s)") {
		t.Fatalf("open reviews %+v; want one naming the job, the category and the count", open)
	}
}

// A job Genace no longer knows is not a failure any retry can fix: the
// operation is parked with one review and the message acknowledged.
// Before, the record was left due: the message dead-lettered, and every
// sweep run re-armed it (five receives, the DLQ and a review each time,
// forever), as deliver once did.
func TestUnknownJobParksTheOperation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt", genacesim.Config{}, observe.Config{})
	rec := handlertest.Prepared("op-ghost")
	rec.Phase = operation.PhaseAccepted
	rec.RemoteJobID = "job_nobody_knows"
	rec.Schedule = &operation.NextAction{Action: string(message.ActionObserveGeneration), Due: e.clk.Now()}
	rec = handlertest.Create(t, e.store, rec)
	m := handlertest.Sent{ID: "m", Env: message.Envelope{Action: message.ActionObserveGeneration, OperationID: "op-ghost", ExpectedRevision: rec.Revision, ExpectedRemoteJobID: rec.RemoteJobID}}
	if failed := e.observe(t, m); len(failed) != 0 {
		t.Fatalf("failures %v: the message should be acknowledged once the operation is parked", failed)
	}
	got := handlertest.Get(t, e.store, "op-ghost")
	if got.Parked == nil || !strings.Contains(got.Parked.Reason, "job_nobody_knows") || got.Phase != operation.PhaseAccepted {
		t.Fatalf("record %s parked %+v; want it parked, naming the job", got.Phase, got.Parked)
	}
	if _, due := got.SweepDue(); due {
		t.Fatal("the parked record is still in the sweep's index: the sweep would re-arm it")
	}
	reviews, err := e.store.OpenReviews(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(reviews) != 1 || reviews[0].OperationID != "op-ghost" {
		t.Fatalf("open reviews %+v, want one for op-ghost", reviews)
	}
}

func TestLongPollFitsTheLease(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		failExt  bool
		wantWait time.Duration
	}{
		{"renewed: the full long poll", false, 20 * time.Second},
		{"renewal failed: what the lease still covers", true, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Visibility 15 s cannot hold a 20 s long poll plus 5 s overhead.
			e := newEnv(t, "bolt", genacesim.Config{}, observe.Config{Visibility: 15 * time.Second, Overhead: 5 * time.Second})
			m := e.accept(t, "op-lp")
			e.ext.Calls = 0 // submit renewed its own message before the POST
			e.ext.Fail = tt.failExt
			e.observe(t, m)
			if len(e.gen.waits) != 1 || e.gen.waits[0] != tt.wantWait {
				t.Fatalf("long poll %v, want %v", e.gen.waits, tt.wantWait)
			}
			if e.ext.Calls != 1 {
				t.Fatalf("%d renewals, want 1", e.ext.Calls)
			}
			// Either way the conditional write lands: it is safe without the lease.
			if got := handlertest.Get(t, e.store, "op-lp"); got.Revision != m.Env.ExpectedRevision+1 {
				t.Fatalf("revision %d", got.Revision)
			}
		})
	}
}

func TestNoPromptOrSignedURLInLogs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt", genacesim.Config{}, observe.Config{})
	e.drain(t, e.accept(t, "op-logs"), 50)
	logs := e.logs.String()
	for _, leak := range []string{handlertest.APIKey, "lighthouse", "sig=", "/files/"} {
		if strings.Contains(logs, leak) {
			t.Fatalf("%q in logs", leak)
		}
	}
	if !strings.Contains(logs, "observation saved") {
		t.Fatal("no logs to check")
	}
}

func TestLongPollOnlyRightAfterThePreviousLook(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt", genacesim.Config{DefaultModel: genacesim.ModelConfig{Price: 5, QueueFor: time.Hour, RunFor: time.Hour}}, observe.Config{})
	m := e.accept(t, "op-fresh")
	e.observe(t, m) // right after acceptance: long poll
	next := e.out.Take()[0]
	e.clk.Advance(time.Minute) // a delay: the job may have finished meanwhile
	e.observe(t, next)
	if len(e.gen.waits) != 2 || e.gen.waits[0] != 20*time.Second || e.gen.waits[1] != 0 {
		t.Fatalf("long polls %v, want [20s 0s]", e.gen.waits)
	}
}

func TestNoLongPollForASucceededSnapshot(t *testing.T) {
	t.Parallel()
	// A render that finished at once: the 202's snapshot already says so.
	e := newEnv(t, "bolt", genacesim.Config{DefaultModel: genacesim.ModelConfig{Price: 5}}, observe.Config{})
	m := e.accept(t, "op-instant")
	rec := handlertest.Get(t, e.store, "op-instant")
	if rec.Remote == nil || rec.Remote.State != operation.RemoteSucceeded {
		t.Fatalf("the simulator's 202 reported %v; the test needs an instantly finished render", rec.Remote)
	}
	e.observe(t, m)
	if len(e.gen.waits) != 1 || e.gen.waits[0] != 0 {
		t.Fatalf("long polls %v, want one immediate read", e.gen.waits)
	}
}

// The observation that settles a failed operation closes the reviews it
// resolved, through the handler's own write path: the dead letter triage
// filed while the refund was pending closes with the reason; a review
// that carries a job the record does not hold stays for an operator.
func TestSettlingObservationClosesResolvedReviews(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		ctx := context.Background()
		e := newEnv(t, kind, genacesim.Config{RefundSettleAfter: 2 * time.Minute}, observe.Config{})
		e.sim.ScriptPOST("op-settle", genacesim.SubmissionFailed(502))
		first := e.accept(t, "op-settle")
		failed := handlertest.Get(t, e.store, "op-settle")
		if failed.Phase != operation.PhaseFailed || failed.Terminal() {
			t.Fatalf("record %s/%s; want failed with the refund unresolved", failed.Phase, failed.Settlement)
		}
		// An earlier observe message dead-lettered: triage files it.
		tri := triage.New(triage.Deps{Store: e.store, Clock: e.clk, Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()}, triage.Config{Concurrency: 1})
		body, _ := first.Env.Encode()
		if resp, err := tri.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "dead-observe", Body: string(body)}}}); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("triage: %v %v", resp, err)
		}
		foreign := review.ForRecord("job:job_foreign", review.SourceHandler, &failed, e.clk.Now())
		foreign.RemoteJobID, foreign.Recommended = "job_foreign", operation.ActionReconcile
		if _, err := e.store.PutReview(ctx, foreign); err != nil {
			t.Fatal(err)
		}
		e.drain(t, first, 20)
		got := handlertest.Get(t, e.store, "op-settle")
		if !got.Terminal() {
			t.Fatalf("record %s/%s; want settled", got.Phase, got.Settlement)
		}
		dead, err := e.store.GetReview(ctx, triage.ReviewID("dead-observe"))
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("resolved: operation failed at revision %d", got.Revision)
		if dead.Open || dead.ClosedReason != want || dead.ClosedBy != "automation (handler)" {
			t.Fatalf("dead letter's review open=%t, closed by %q because %q; want closed by automation (handler) because %q", dead.Open, dead.ClosedBy, dead.ClosedReason, want)
		}
		open, err := e.store.OpenReviewsOf(ctx, "op-settle")
		if err != nil {
			t.Fatal(err)
		}
		if len(open) != 1 || open[0].ID != foreign.ID {
			t.Fatalf("open reviews %+v; want only the one about job_foreign", open)
		}
	})
}

// The read budget is sized to ride out hours of a 5xx outage before a
// person is asked: with the default backoff at its shortest jitter, the
// retries between the first failed read and the park span at least 4
// hours.
func TestDefaultReadBudgetCoversHours(t *testing.T) {
	t.Parallel()
	d := schedule.NewObservation(schedule.DefaultPolicies())
	d.Rand = func() float64 { return 0 }
	var span time.Duration
	for n := 1; n < observe.DefaultMaxReadFailures; n++ {
		span += d.ReadRetry(n)
	}
	if span < 4*time.Hour {
		t.Fatalf("%d failed reads park after %s of retries; want at least 4h", observe.DefaultMaxReadFailures, span)
	}
}

// A 429 is waited out for its Retry-After and counts towards no cap:
// more of them than MaxReadFailures in a row neither park the operation
// nor count a failure. Before, each was a failed read retried after the
// read backoff (5 s doubling), whatever Retry-After said, and the third
// here parked it.
func TestRateLimitedReadsWaitRetryAfterAndCountNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt", genacesim.Config{}, observe.Config{MaxReadFailures: 3})
	next := e.accept(t, "op-busy")
	job := handlertest.Get(t, e.store, "op-busy").RemoteJobID
	limited := make([]genacesim.Fault, 6)
	for i := range limited {
		limited[i] = genacesim.RateLimited(20 * time.Second)
	}
	e.sim.ScriptGET(job, limited...)
	for i := range limited {
		e.clk.Advance(next.Delay)
		if failed := e.observe(t, next); len(failed) != 0 {
			t.Fatalf("429 %d failed the message: %v", i+1, failed)
		}
		got := handlertest.Get(t, e.store, "op-busy")
		sent := e.out.Take()
		if got.Parked != nil || got.Counters.ReadFailures != 0 || len(sent) != 1 || sent[0].Delay < 20*time.Second || sent[0].Delay > 24*time.Second {
			t.Fatalf("after 429 %d: parked %+v, %d failures, sent %+v; want a retry after Retry-After (20 s) plus at most a fifth of it", i+1, got.Parked, got.Counters.ReadFailures, sent)
		}
		next = sent[0]
	}
	if last, _ := e.drain(t, next, 50); last.Env.Action != message.ActionDeliverArtifacts {
		t.Fatalf("after the 429s: %+v", last)
	}
}
