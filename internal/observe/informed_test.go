package observe_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/sweep"
)

// swept is a Genace whose long polls are held for their whole window on
// the manual clock, with the sweep run at every tick of its deployed
// cadence the window crosses, as it runs beside a chain.
type swept struct {
	observe.Genace
	advance func(time.Time)
	now     func() time.Time
	every   time.Duration
	mu      sync.Mutex
	next    time.Time // the next tick
	sweep   func(at time.Time)
}

func (s *swept) Get(ctx context.Context, jobID string, wait, timeout time.Duration) (*genace.Job, error) {
	s.pass(wait)
	return s.Genace.Get(ctx, jobID, wait, timeout)
}

// pass moves the clock on by d, running the sweep at each tick on the way.
func (s *swept) pass(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	end := s.now().Add(d)
	for !s.next.After(end) {
		s.advance(s.next)
		s.sweep(s.next)
		s.next = s.next.Add(s.every)
	}
	s.advance(end)
}

// chainEnvOn is newChainEnv on a store of the kind.
func chainEnvOn(t testing.TB, kind string, model genacesim.ModelConfig, cfg observe.Config) *env {
	t.Helper()
	e := newEnv(t, kind, genacesim.Config{DefaultModel: model}, cfg)
	e.delays.Policies = chainPolicies()
	return e
}

// A hand-over that waited 90 s in the queue starts a quiet chain of
// observe's full Span, renewing every Chain: the record's Schedule.Due is
// the hand-over's, so the chain's first renewal would land past the
// sweep's overdue threshold. The sweep, on
// the stack's cadence and threshold, must not re-arm it, at whatever
// phase its ticks fall: the chain keeps it informed. On every store (the
// sweep reads DynamoDB's sparse index, which lags the table).
func TestSweepNeverRearmsALiveChainWhoseHandoverWaited(t *testing.T) {
	t.Parallel()
	sf, ok := topology.Stack.Function(topology.Sweep)
	every, cadenced := sf.Cadence()
	if !ok || !cadenced {
		t.Fatalf("sweep function %+v has no cadence", sf)
	}
	const waited = 90 * time.Second
	for _, kind := range handlertest.StoreKinds() {
		for phase := time.Duration(0); phase < every; phase += 20 * time.Second {
			t.Run(fmt.Sprint(kind, "/phase ", phase), func(t *testing.T) {
				t.Parallel()
				sweptChains(t, kind, every, phase, waited)
			})
		}
	}
}

// sweptChains runs one phase of TestSweepNeverRearmsALiveChainWhoseHandoverWaited.
func sweptChains(t *testing.T, kind string, every, phase, waited time.Duration) {
	of, _ := topology.Stack.Function(topology.Observe)
	q, _ := topology.Stack.Queue(of.Mappings[0].Queue)
	cfg := observe.Config{Visibility: q.Visibility, Overlap: -1, OverdueAfter: topology.Stack.Sweep.OverdueAfter}
	e := chainEnvOn(t, kind, genacesim.ModelConfig{Price: 5, QueueFor: time.Second, RunFor: 24 * time.Hour}, cfg)
	sweepOut := &handlertest.Outbox{}
	sw := sweep.New(sweep.Deps{Store: e.store, Sender: sweepOut, Clock: e.clk, Log: slog.New(slog.NewJSONHandler(e.logs, nil)), Metrics: metrics.Discard()},
		topology.Stack.Sweep)
	rearmed := 0
	g := &swept{Genace: e.gen, advance: e.clk.Set, now: e.clk.Now, every: every, next: e.clk.Now().Add(phase),
		sweep: func(time.Time) {
			res, err := sw.Sweep(context.Background())
			if err != nil {
				t.Errorf("sweep: %v", err)
			}
			rearmed += res.Rearmed
		}}
	e.obs = observe.New(observe.Deps{Store: e.store, Genace: g, Delays: e.delays, Extender: e.ext, Sender: e.out, Clock: e.clk,
		Log: slog.New(slog.NewJSONHandler(e.logs, nil)), Metrics: metrics.Discard()}, cfg)

	// The first chain sees the job start running and hands over.
	m := e.accept(t, "op-quiet")
	if failed := e.observe(t, m); len(failed) != 0 {
		t.Fatalf("failures %v", failed)
	}
	sent := e.out.Take()
	if len(sent) != 1 || sent[0].Env.Action != message.ActionObserveGeneration {
		t.Fatalf("first chain sent %+v; want its hand-over", sent)
	}
	for range 3 {
		// The hand-over waits in the queue, then a quiet chain of
		// the whole Chain runs.
		g.pass(waited)
		start := e.clk.Now()
		if failed := e.observe(t, sent[0]); len(failed) != 0 {
			t.Fatalf("failures %v", failed)
		}
		if ran := e.clk.Now().Sub(start); ran < observe.DefaultSpan-time.Minute {
			t.Fatalf("the chain ran %s; want a quiet chain of about %s", ran, observe.DefaultSpan)
		}
		if rearmed > 0 || sweepOut.Len() > 0 {
			t.Fatalf("the sweep re-armed a live chain %d times (sent %+v)\n%s", rearmed, sweepOut.Take(), e.logs.String())
		}
		sent = e.out.Take()
		rec := handlertest.Get(t, e.store, "op-quiet")
		if len(sent) != 1 || sent[0].Env.Action != message.ActionObserveGeneration || sent[0].Env.ExpectedRevision != rec.Revision {
			t.Fatalf("chain sent %+v; want its hand-over at r%d", sent, rec.Revision)
		}
	}
}

// Only a chain that would look overdue before its first write writes to
// keep the sweep informed: one that starts on time writes its renewals
// and its hand-over alone (a quiet chain of 30 s windows over Span: at 4,
// 8 and 12 minutes, and at 14).
func TestOnlyALateChainRefreshesItsDueTime(t *testing.T) {
	t.Parallel()
	overdue := topology.Stack.Sweep.OverdueAfter
	slack := overdue - observe.DefaultChain - observe.Config{}.Defaults().Overhead
	for _, tc := range []struct {
		waited time.Duration
		writes int64
	}{{0, 4}, {slack - time.Second, 4}, {slack, 5}, {90 * time.Second, 5}, {10 * time.Minute, 5}} {
		t.Run(fmt.Sprint("waited ", tc.waited), func(t *testing.T) {
			t.Parallel()
			cfg := observe.Config{Visibility: time.Hour, Overlap: -1, OverdueAfter: overdue}
			e, _ := newChainEnv(t, genacesim.ModelConfig{Price: 5, QueueFor: time.Second, RunFor: 24 * time.Hour}, cfg)
			m := e.accept(t, "op-late")
			e.observe(t, m)
			sent := e.out.Take()
			before := handlertest.Get(t, e.store, "op-late")
			e.clk.Advance(tc.waited)
			if failed := e.observe(t, sent[0]); len(failed) != 0 {
				t.Fatalf("failures %v", failed)
			}
			after := handlertest.Get(t, e.store, "op-late")
			if got := after.Revision - before.Revision; got != tc.writes {
				t.Fatalf("a quiet chain %s late wrote %d times; want %d", tc.waited, got, tc.writes)
			}
		})
	}
}

// crashing reads nothing: its GET finds the invocation ended, as a crash
// right after the chain's first write would leave things.
type crashing struct{ cancel context.CancelFunc }

func (c crashing) Get(ctx context.Context, _ string, _, _ time.Duration) (*genace.Job, error) {
	c.cancel()
	return nil, ctx.Err()
}

// A late chain that dies after refreshing its due time is still re-armed
// by the sweep on its cadence, within OverdueAfter plus one cadence of
// that write.
func TestSweepRearmsALateChainThatDied(t *testing.T) {
	t.Parallel()
	sf, _ := topology.Stack.Function(topology.Sweep)
	every, _ := sf.Cadence()
	cfg := observe.Config{Visibility: time.Hour, Overlap: -1, OverdueAfter: topology.Stack.Sweep.OverdueAfter}
	e, _ := newChainEnv(t, genacesim.ModelConfig{Price: 5, QueueFor: time.Second, RunFor: 24 * time.Hour}, cfg)
	m := e.accept(t, "op-dies")
	e.observe(t, m)
	sent := e.out.Take()
	e.clk.Advance(90 * time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	e.obs = observe.New(observe.Deps{Store: e.store, Genace: crashing{cancel}, Delays: e.delays, Extender: e.ext, Sender: e.out, Clock: e.clk,
		Log: slog.New(slog.NewJSONHandler(e.logs, nil)), Metrics: metrics.Discard()}, cfg)
	if _, err := e.obs.Handle(ctx, handlertest.Event(t, e.clk.Now(), sent[0])); err != nil {
		t.Fatal(err)
	}
	died := handlertest.Get(t, e.store, "op-dies")
	if !died.Schedule.Due.Equal(e.clk.Now()) || e.out.Len() != 0 {
		t.Fatalf("schedule %+v, %d sent; want the due time refreshed and nothing sent before the crash", died.Schedule, e.out.Len())
	}
	sweepOut := &handlertest.Outbox{}
	sw := sweep.New(sweep.Deps{Store: e.store, Sender: sweepOut, Clock: e.clk, Log: slog.New(slog.NewJSONHandler(e.logs, nil)), Metrics: metrics.Discard()},
		topology.Stack.Sweep)
	bound := died.Schedule.Due.Add(cfg.OverdueAfter + every)
	for sweepOut.Len() == 0 && !e.clk.Now().After(bound) {
		e.clk.Advance(every)
		if _, err := sw.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if sweepOut.Len() != 1 {
		t.Fatalf("the sweep sent %d messages by %v; want the dead chain re-armed within %v", sweepOut.Len(), bound, cfg.OverdueAfter+every)
	}
}

// BenchmarkQuietChainsUnderBacklog runs an hour of a job that never
// changes, each hand-over waiting in the queue, the sweep on the stack's
// cadence and threshold at every phase (10 s steps), and reports per hour
// the sweep's re-arms, the record's writes and the GETs, with the chains
// keeping the sweep informed (refresh) and without (as before):
//
//	go test -run '^$' -bench QuietChainsUnderBacklog -benchtime 1x ./internal/observe/
func BenchmarkQuietChainsUnderBacklog(b *testing.B) {
	sf, _ := topology.Stack.Function(topology.Sweep)
	every, _ := sf.Cadence()
	for _, refresh := range []bool{false, true} {
		for _, waited := range []time.Duration{30 * time.Second, time.Minute, 90 * time.Second, 3 * time.Minute} {
			b.Run(fmt.Sprintf("refresh=%t/waited=%s", refresh, waited), func(b *testing.B) {
				for b.Loop() {
					var rearms, writes, gets, phases float64
					for phase := time.Duration(0); phase < every; phase += 10 * time.Second {
						phases++
						r, w, g := quietHour(b, every, phase, waited, refresh)
						rearms, writes, gets = rearms+r, writes+w, gets+g
					}
					b.ReportMetric(rearms/phases, "rearms/h")
					b.ReportMetric(writes/phases, "writes/h")
					b.ReportMetric(gets/phases, "GETs/h")
				}
			})
		}
	}
}

// quietHour is one phase of BenchmarkQuietChainsUnderBacklog: every
// message sent (the chains' and the sweep's) is handled after waiting.
func quietHour(b *testing.B, every, phase, waited time.Duration, refresh bool) (rearms, writes, gets float64) {
	cfg := observe.Config{Visibility: time.Hour, Overlap: -1}
	if refresh {
		cfg.OverdueAfter = topology.Stack.Sweep.OverdueAfter
	}
	e, _ := newChainEnv(b, genacesim.ModelConfig{Price: 5, QueueFor: time.Second, RunFor: 24 * time.Hour}, cfg)
	sweepOut := &handlertest.Outbox{}
	log := slog.New(slog.DiscardHandler)
	sw := sweep.New(sweep.Deps{Store: e.store, Sender: sweepOut, Clock: e.clk, Log: log, Metrics: metrics.Discard()}, topology.Stack.Sweep)
	g := &swept{Genace: e.gen, advance: e.clk.Set, now: e.clk.Now, every: every, next: e.clk.Now().Add(phase),
		sweep: func(time.Time) {
			res, err := sw.Sweep(context.Background())
			if err != nil {
				b.Error(err)
			}
			rearms += float64(res.Rearmed)
		}}
	e.obs = observe.New(observe.Deps{Store: e.store, Genace: g, Delays: e.delays, Extender: e.ext, Sender: e.out, Clock: e.clk, Log: log, Metrics: metrics.Discard()}, cfg)
	queue := []handlertest.Sent{e.acceptB(b, "op")}
	r0, g0 := handlertest.Get(b, e.store, "op").Revision, 0
	first := true
	for end := e.clk.Now().Add(time.Hour); len(queue) > 0 && e.clk.Now().Before(end); {
		if !first {
			g.pass(waited)
		}
		if _, err := e.obs.Handle(context.Background(), handlertest.Event(b, e.clk.Now(), queue[0])); err != nil {
			b.Fatal(err)
		}
		if first {
			// The first chain saw the job start running: count from here.
			first, r0, g0 = false, handlertest.Get(b, e.store, "op").Revision, len(e.gen.waits)
		}
		queue = append(append(queue[1:], e.out.Take()...), sweepOut.Take()...)
	}
	return rearms, float64(handlertest.Get(b, e.store, "op").Revision - r0), float64(len(e.gen.waits) - g0)
}
