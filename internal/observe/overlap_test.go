package observe_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operation"
)

// oneWay is the modelled one-way latency to Genace: a 200 ms round trip.
const oneWay = 100 * time.Millisecond

// writeTakes is the modelled time of a record write.
const writeTakes = 50 * time.Millisecond

// longPoller is Genace as its contract states it, in virtual time: a poll
// that arrives at a (one way after it was sent) with wait w is answered
// at min(a+w, the first change of the job after a), and the answer takes
// one way back. The job is read from the simulator at the answer's time,
// so its state is the one Genace would send. It logs each GET sent,
// counts polls cancelled and the GETs in flight.
type longPoller struct {
	sim     *genace.Client
	clk     *clock.Manual
	changes []time.Time // when the job's state changes, ascending
	log     *eventLog

	mu        sync.Mutex
	sent      []time.Time
	inFlight  int
	cancelled int
	terminal  time.Time // when the first answer with a terminal state arrived
}

func (g *longPoller) Get(ctx context.Context, jobID string, wait, timeout time.Duration) (*genace.Job, error) {
	g.mu.Lock()
	now := g.clk.Now()
	g.sent = append(g.sent, now)
	g.inFlight++
	n := len(g.sent)
	g.mu.Unlock()
	g.log.add(fmt.Sprintf("GET %d at +%s", n, now.Sub(handlertest.Start)))
	defer func() { g.mu.Lock(); g.inFlight--; g.mu.Unlock() }()

	arrive := now.Add(oneWay)
	answer := arrive.Add(wait)
	for _, c := range g.changes {
		if c.After(arrive) {
			if c.Before(answer) {
				answer = c
			}
			break
		}
	}
	if err := g.until(ctx, answer); err != nil {
		return nil, err
	}
	job, err := g.sim.Get(context.Background(), jobID, 0, 5*time.Second)
	if err := g.until(ctx, answer.Add(oneWay)); err != nil {
		return nil, err
	}
	if err == nil && job.State.IsTerminal() {
		g.mu.Lock()
		if g.terminal.IsZero() {
			g.terminal = g.clk.Now()
		}
		g.mu.Unlock()
	}
	return job, err
}

// until waits on the manual clock for t, or for the caller to give up.
func (g *longPoller) until(ctx context.Context, t time.Time) error {
	select {
	case <-g.clk.After(t.Sub(g.clk.Now())):
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		g.cancelled++
		g.mu.Unlock()
		return ctx.Err()
	}
}

// eventLog orders GETs and record writes as the handler made them.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(e string) { l.mu.Lock(); l.events = append(l.events, e); l.mu.Unlock() }

func (l *eventLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

// slowStore logs each record write, which takes writeTakes of virtual
// time.
type slowStore struct {
	observe.Store
	log *eventLog
	clk *clock.Manual
}

func (s slowStore) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	s.log.add(fmt.Sprintf("write at +%s", s.clk.Now().Sub(handlertest.Start)))
	<-s.clk.After(writeTakes)
	return s.Store.Update(ctx, rec, expected)
}

// inProcess serves the simulator without a network, so that a synctest
// bubble holds no connection goroutines.
type inProcess struct{ h http.Handler }

func (p inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	p.h.ServeHTTP(w, r)
	return w.Result(), nil
}

// overlapRun observes one accepted render whose job runs as model says
// (from the clock's start), with polls answered by longPoller; it returns
// the fake, the record after the handler returned and the event log.
type overlapRun struct {
	g   *longPoller
	rec operation.Record
	log *eventLog
	// finished is when the job reached its terminal state.
	finished time.Time
	logs     string // the handler's log
}

func runOverlap(t *testing.T, model genacesim.ModelConfig, cfg observe.Config) overlapRun {
	t.Helper()
	e := newEnv(t, "bolt", genacesim.Config{DefaultModel: model}, cfg)
	e.delays.Policies = chainPolicies()
	created := e.clk.Now()
	m := e.accept(t, "op-overlap")
	var run overlapRun
	run.finished = created.Add(model.QueueFor + model.RunFor)
	changes := []time.Time{run.finished}
	if model.QueueFor > 0 {
		changes = []time.Time{created.Add(model.QueueFor), run.finished}
	}
	synctest.Test(t, func(t *testing.T) {
		c, err := genace.New("http://genace.test", handlertest.APIKey, &http.Client{Transport: inProcess{e.sim}})
		if err != nil {
			t.Fatal(err)
		}
		run.log = &eventLog{}
		run.g = &longPoller{sim: c, clk: e.clk, changes: changes, log: run.log}
		h := observe.New(observe.Deps{Store: slowStore{e.store, run.log, e.clk}, Genace: run.g, Delays: e.delays, Extender: e.ext, Sender: e.out, Clock: e.clk,
			Log: slog.New(slog.NewJSONHandler(e.logs, nil)), Metrics: metrics.Discard()}, cfg)
		ev := handlertest.Event(t, e.clk.Now(), m)
		var resp events.SQSEventResponse
		done := make(chan struct{})
		go func() {
			defer close(done)
			resp, _ = h.Handle(context.Background(), ev)
		}()
		// Move the clock only when every goroutine waits on it: each
		// poll and timer then acts at exactly its virtual time.
		for {
			synctest.Wait()
			select {
			case <-done:
				if failed := handlertest.Failed(resp); len(failed) != 0 {
					t.Fatalf("failures %v\n%s", failed, e.logs.String())
				}
				run.g.mu.Lock()
				defer run.g.mu.Unlock()
				if run.g.inFlight != 0 {
					t.Fatalf("%d GETs still in flight after the handler returned", run.g.inFlight)
				}
				run.rec = handlertest.Get(t, e.store, "op-overlap")
				run.logs = e.logs.String()
				return
			default:
			}
			at, ok := e.clk.NextWaiter()
			if !ok {
				t.Fatal("the handler waits on nothing the clock can move")
			}
			e.clk.Set(at)
		}
	})
	return run
}

// A job that finishes right after a 30 s window ran out at Genace, in the
// gap before the next chained poll arrives, is seen at once: a poll is
// already waiting at Genace. Without the overlap that poll arrives after
// the finish and is held for its whole window: detection 30 s late.
func TestFinishBetweenWindowsIsSeenAtOnce(t *testing.T) {
	t.Parallel()
	// The first GET, sent at 0 with a 30 s wait, is held at Genace from
	// 0.1 s until 30.1 s and answered at 30.2 s; the next one sent then
	// would arrive at 30.3 s. The job finishes at 30.15 s.
	run := runOverlap(t, genacesim.ModelConfig{Price: 5, RunFor: 30*time.Second + oneWay + 50*time.Millisecond},
		observe.Config{Visibility: 6 * time.Minute})
	if run.g.terminal.IsZero() {
		t.Fatalf("no answer carried the finished job")
	}
	if late := run.g.terminal.Sub(run.finished); late > time.Second {
		t.Fatalf("finish detected %s after it happened; want under 1 s (GETs sent at %v)", late, run.g.sent)
	}
	if run.rec.Phase != operation.PhaseSucceeded || run.rec.Remote.ObservedAt.Sub(run.finished) > time.Second {
		t.Fatalf("record %s observed at +%s after the finish; want succeeded within 1 s", run.rec.Phase, run.rec.Remote.ObservedAt.Sub(run.finished))
	}
}

// On a change the chain goes on, and its next GET leaves before the write
// of the change, so the write does not widen the gap between polls.
func TestNextPollLeavesBeforeTheWrite(t *testing.T) {
	t.Parallel()
	run := runOverlap(t, genacesim.ModelConfig{Price: 5, QueueFor: 10 * time.Second, RunFor: time.Hour},
		observe.Config{Visibility: 6 * time.Minute, Span: time.Minute, Overlap: time.Second})
	// The first GET is answered at the change to running (10.1 s), whose
	// write takes 50 ms; the next is held past the chain's minute, which
	// ends the chain: its overlapping GET (39.1 s) is the linger, held
	// while the hand-over is written (40.3 s).
	want := []string{"GET 1 at +0s", "GET 2 at +10.1s", "GET 3 at +39.1s", "write at +10.1s", "write at +40.3s"}
	got := run.log.all()
	// The GET and the write leave at the same virtual time from two
	// goroutines: their order in the log is not the order they left in.
	sort.Strings(got)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events %v; want %v (each change's write after the next GET left) sent %v\n%s", got, want, run.g.sent, run.logs)
	}
}

// When the chain ends with a poll still at Genace (here the job finished
// just before the overlapping poll arrived, so it would be held for its
// whole window), that poll is cancelled and the handler returns without
// it: no goroutine outlives Handle.
func TestChainEndCancelsTheOutstandingPoll(t *testing.T) {
	t.Parallel()
	// The first GET is sent at 0 with a 30 s wait; the overlapping one
	// leaves at 29 s and arrives at 29.1 s, after the finish at 29.05 s,
	// when the first is answered.
	run := runOverlap(t, genacesim.ModelConfig{Price: 5, RunFor: 29050 * time.Millisecond},
		observe.Config{Visibility: 6 * time.Minute, Overlap: time.Second})
	if run.rec.Phase != operation.PhaseSucceeded {
		t.Fatalf("phase %s; want succeeded", run.rec.Phase)
	}
	if len(run.g.sent) != 2 || run.g.cancelled != 1 {
		t.Fatalf("%d GETs sent at %v, %d cancelled; want 2, the overlapping one cancelled when the chain ended", len(run.g.sent), run.g.sent, run.g.cancelled)
	}
}
