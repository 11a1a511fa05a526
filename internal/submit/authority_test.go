package submit_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/eventsource"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/dev/localqueue"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/submit"
	"github.com/genjobs/genjobs/internal/worker"
)

// trail is the order in which renewals and POSTs happened.
type trail struct {
	mu     sync.Mutex
	events []string
}

func (tr *trail) add(ev string) { tr.mu.Lock(); tr.events = append(tr.events, ev); tr.mu.Unlock() }

func (tr *trail) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return strings.Join(tr.events, ", ")
}

// checkEveryPostRenewed fails unless each POST came right after a
// successful renewal of the visibility of the message it answered.
func (tr *trail) checkEveryPostRenewed(t *testing.T) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for i, ev := range tr.events {
		if ev == "POST" && (i == 0 || !strings.HasSuffix(tr.events[i-1], ": ok")) {
			t.Errorf("a POST without a renewal right before it: %s", strings.Join(tr.events, ", "))
		}
	}
}

// renewals records every ChangeMessageVisibility and its result.
type renewals struct {
	worker.Extender
	trail *trail
}

func (r renewals) ChangeVisibility(ctx context.Context, url, handle string, timeout time.Duration) error {
	err := r.Extender.ChangeVisibility(ctx, url, handle, timeout)
	result := "ok"
	if err != nil {
		result = "failed"
	}
	r.trail.add(fmt.Sprintf("renew %s: %s", handle, result))
	return err
}

// posts records every POST; inFlight runs while it is on its way.
type posts struct {
	inner    *genace.Client
	trail    *trail
	inFlight func()
}

func (p *posts) Submit(ctx context.Context, req genace.SubmitRequest, timeout time.Duration) genace.SubmitResult {
	p.trail.add("POST")
	if f := p.inFlight; f != nil {
		p.inFlight = nil
		f()
	}
	return p.inner.Submit(ctx, req, timeout)
}

// queued is the submit function behind the local event source mapping:
// real queue (30 s visibility), store, dispatcher and Genace simulator, on
// one manual clock.
type queued struct {
	clk      *clock.Manual
	broker   *localqueue.Broker
	dispatch string
	sim      *genacesim.Simulator
	store    store.Store
	trail    *trail
	genace   *posts
	h        *submit.Handler
}

const dispatchVisibility = 30 * time.Second

func newQueued(t *testing.T) *queued {
	t.Helper()
	q := &queued{clk: clock.NewManual(handlertest.Start), trail: &trail{}}
	q.broker = localqueue.New(q.clk)
	var err error
	if q.dispatch, err = q.broker.Create("dispatch", localqueue.Config{Visibility: dispatchVisibility}); err != nil {
		t.Fatal(err)
	}
	observe, err := q.broker.Create("observe", localqueue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	disp, err := schedule.NewDispatcher(schedule.Config{Queues: map[message.Action]schedule.Target{
		message.ActionSubmitGeneration: {URL: q.dispatch}, message.ActionObserveGeneration: {URL: observe},
	}}, q.broker, nil, q.clk)
	if err != nil {
		t.Fatal(err)
	}
	var client *genace.Client
	q.sim, client = handlertest.Sim(t, q.clk, genacesim.Config{})
	q.store = handlertest.OpenStore(t, "bolt")
	q.genace = &posts{inner: client, trail: q.trail}
	// POST 20 s + persist 5 s fit in the visibility with 5 s to spare.
	cfg := submit.Config{QueueURL: q.dispatch, Visibility: dispatchVisibility, SubmitTimeout: 20 * time.Second, PersistBudget: 5 * time.Second, Concurrency: 1}
	q.h = submit.New(submit.Deps{Store: q.store, Genace: q.genace, Extender: renewals{Extender: q.broker, trail: q.trail}, Sender: disp, Clock: q.clk, Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()}, cfg)
	rec := handlertest.Create(t, q.store, handlertest.Prepared("op"))
	body, err := handlertest.Dispatch(rec).Env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.broker.Send(context.Background(), q.dispatch, body, 0); err != nil {
		t.Fatal(err)
	}
	return q
}

// poller is one of the mapping's pollers; gap passes between its receive
// and its invocation.
func (q *queued) poller(gap time.Duration) *eventsource.Mapping {
	return &eventsource.Mapping{Broker: q.broker, Queue: q.dispatch, Handler: q.h.Handle, BatchSize: 1, Timeout: time.Minute, Clock: q.clk, Gap: gap}
}

// start polls m in the background; the returned channel reports how many
// records it handled once it is done.
func start(t *testing.T, m *eventsource.Mapping) <-chan int {
	t.Helper()
	done := make(chan int, 1)
	go func() {
		n, err := m.PollOnce(context.Background())
		if err != nil {
			t.Error(err)
		}
		done <- n
	}()
	return done
}

// waitUntil waits (in wall time) for cond, which another goroutine makes
// true.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	limit := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(limit) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// The brief's interleaving: received at t0 with 30 s visibility, the
// handler starts at t0+25 s, and another poller looks for the message at
// t0+31 s, while the POST is in flight. The POST goes out only after
// the visibility was renewed from the queue's side, so the other poller
// finds nothing.
func TestGapBeforeInvokeRenewalKeepsTheMessage(t *testing.T) {
	t.Parallel()
	q := newQueued(t)
	t0 := q.clk.Now()
	other := q.poller(0)
	othersTook := -1
	q.genace.inFlight = func() {
		q.clk.Set(t0.Add(31 * time.Second))
		n, err := other.PollOnce(context.Background())
		if err != nil {
			t.Error(err)
		}
		othersTook = n
	}
	done := start(t, q.poller(25*time.Second))
	waitUntil(t, "the first poller waits out its gap", func() bool {
		at, ok := q.clk.NextWaiter()
		return ok && at.Equal(t0.Add(25*time.Second))
	})
	q.clk.Set(t0.Add(25 * time.Second))
	<-done

	if othersTook != 0 {
		t.Errorf("another poller received the message while its POST was in flight (%d records)", othersTook)
	}
	q.trail.checkEveryPostRenewed(t)
	if n := q.sim.PostCount("op"); n != 1 {
		t.Errorf("%d POSTs", n)
	}
	if got := handlertest.Get(t, q.store, "op"); got.Phase != operation.PhaseAccepted {
		t.Errorf("phase %s, want accepted (%s)", got.Phase, q.trail)
	}
}

// The gap outlasts the visibility: another poller received the message
// at t0+30 s and sits in its own batching window when the first handler
// starts at t0+31 s. The first worker's renewal fails (the receipt handle
// is no longer the message's), so it does not POST and releases its
// claim; the other worker's message is stale by then, and the fresh
// dispatch makes the one POST.
func TestGapBeforeInvokeStaleReceiptNeverPosts(t *testing.T) {
	t.Parallel()
	q := newQueued(t)
	t0 := q.clk.Now()
	first := start(t, q.poller(31*time.Second))
	waitUntil(t, "the first poller waits out its gap", func() bool {
		at, ok := q.clk.NextWaiter()
		return ok && at.Equal(t0.Add(31*time.Second))
	})
	q.clk.Set(t0.Add(dispatchVisibility))
	second := start(t, q.poller(5*time.Second))
	waitUntil(t, "the second poller receives the message", func() bool { return q.broker.Depth(q.dispatch).Visible == 0 })
	q.clk.Set(t0.Add(31 * time.Second))
	<-first
	if n := q.sim.PostCount("op"); n != 0 {
		t.Errorf("the first worker POSTed %d times with a receipt handle that was no longer the message's (%s)", n, q.trail)
	}
	q.clk.Set(t0.Add(36 * time.Second))
	<-second
	// Whatever the two left behind, drained by a third poller.
	third := q.poller(0)
	for range 5 {
		if n, err := third.PollOnce(context.Background()); err != nil || n == 0 {
			break
		}
	}
	q.trail.checkEveryPostRenewed(t)
	if n := q.sim.PostCount("op"); n != 1 {
		t.Errorf("%d POSTs (%s)", n, q.trail)
	}
	if got := handlertest.Get(t, q.store, "op"); got.Phase != operation.PhaseAccepted || got.Posts != 1 {
		t.Errorf("record %s with %d POSTs counted, want accepted with 1 (%s)", got.Phase, got.Posts, q.trail)
	}
}

// The lease's own clock starts when the handler reaches the record, later
// than the receive; only the queue knows whether the message is still
// ours. So every POST is preceded by a renewal, however much of the
// visibility the lease believes is left, and a failed renewal means no
// POST.
func TestPOSTOnlyAfterVisibilityRenewed(t *testing.T) {
	t.Parallel()
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "renewed", true: "renewal fails"}[fail], func(t *testing.T) {
			t.Parallel()
			// The visibility (3 min by default) seems to cover POST and
			// persist (25 s) many times over.
			e, g := newEnv(t, "bolt", submit.Config{})
			e.ext.Fail = fail
			renewalsAtPost := -1
			g.before = func() { renewalsAtPost = e.ext.Calls }
			rec := handlertest.Create(t, e.store, handlertest.Prepared("op"))
			e.handle(t, handlertest.Dispatch(rec))
			got := handlertest.Get(t, e.store, "op")
			sent := e.out.Take()
			if !fail {
				if renewalsAtPost != 1 || e.sim.PostCount("op") != 1 || got.Phase != operation.PhaseAccepted {
					t.Fatalf("%d renewals before the POST, %d POSTs, %s; want the POST right after one renewal", renewalsAtPost, e.sim.PostCount("op"), got.Phase)
				}
				return
			}
			if n := e.sim.TotalPosts(); n != 0 || renewalsAtPost != -1 {
				t.Fatalf("POSTed %d times after a failed renewal", n)
			}
			if got.Phase != operation.PhasePrepared || got.Claim != nil || got.Posts != 0 {
				t.Fatalf("claim not released: %s claim=%v posts=%d", got.Phase, got.Claim, got.Posts)
			}
			if len(sent) != 1 || sent[0].Env.Action != message.ActionSubmitGeneration || sent[0].Env.ExpectedRevision != got.Revision {
				t.Fatalf("sent %+v, want a fresh dispatch at r%d", sent, got.Revision)
			}
		})
	}
}

// deadlineCtx carries a deadline on the handler's (manual) clock without
// ever being done, as the function's context does before its deadline.
type deadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// The function's deadline has not passed, but it comes before the POST
// and the write of its outcome could both finish: no POST, and the claim
// goes back with a fresh dispatch.
func TestDeadlineTooCloseForPOSTAndPersistReleases(t *testing.T) {
	t.Parallel()
	e, _ := newEnv(t, "bolt", submit.Config{SubmitTimeout: 20 * time.Second, PersistBudget: 5 * time.Second})
	rec := handlertest.Create(t, e.store, handlertest.Prepared("op"))
	ctx := deadlineCtx{Context: context.Background(), deadline: e.clk.Now().Add(24 * time.Second)}
	resp, err := e.h.Handle(ctx, handlertest.Event(t, e.clk.Now(), handlertest.Dispatch(rec)))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("%v, failures %v", err, handlertest.Failed(resp))
	}
	if n := e.sim.TotalPosts(); n != 0 {
		t.Fatalf("POSTed %d times with 24 s left for a 20 s POST and a 5 s write", n)
	}
	got := handlertest.Get(t, e.store, "op")
	if got.Phase != operation.PhasePrepared || got.Claim != nil || got.Posts != 0 {
		t.Fatalf("claim not released: %s claim=%v posts=%d", got.Phase, got.Claim, got.Posts)
	}
	if sent := e.out.Take(); len(sent) != 1 || sent[0].Env.Action != message.ActionSubmitGeneration || sent[0].Env.ExpectedRevision != got.Revision {
		t.Fatalf("sent %+v, want a fresh dispatch at r%d", sent, got.Revision)
	}
}
