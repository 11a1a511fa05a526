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
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/schedule"
)

// chainPolicies observe back to back (the deployed shape): every
// observation of a young job is due at once.
func chainPolicies() schedule.Policies {
	ps := testPolicies()
	ps.Default.LongPoll = 30 * time.Second
	ps.Default.Immediate = time.Hour
	return ps
}

// heldFor is a Genace whose every long poll is held for its whole window
// on the manual clock (the simulator then answers as of the window's end),
// so a chain's polls take the time they would.
type heldFor struct {
	*gen
	advance func(time.Duration)
	mu      sync.Mutex
	ends    []time.Time
	starts  []time.Time
	now     func() time.Time
}

func (h *heldFor) Get(ctx context.Context, jobID string, wait, timeout time.Duration) (*genace.Job, error) {
	h.mu.Lock()
	h.starts = append(h.starts, h.now())
	h.mu.Unlock()
	h.advance(wait)
	job, err := h.gen.Get(ctx, jobID, wait, timeout)
	h.mu.Lock()
	h.ends = append(h.ends, h.now())
	h.mu.Unlock()
	return job, err
}

func newChainEnv(t testing.TB, model genacesim.ModelConfig, cfg observe.Config) (*env, *heldFor) {
	t.Helper()
	e := newEnv(t, "bolt", genacesim.Config{DefaultModel: model}, cfg)
	e.delays.Policies = chainPolicies()
	h := &heldFor{gen: e.gen, advance: e.clk.Advance, now: e.clk.Now}
	e.obs = observe.New(observe.Deps{Store: e.store, Genace: h, Delays: e.delays, Extender: e.ext, Sender: e.out, Clock: e.clk,
		Log: slog.New(slog.NewJSONHandler(e.logs, nil)), Metrics: metrics.Discard()}, cfg)
	return e, h
}

// One message observes a render from queued to succeeded: full 30 s long
// polls back to back, a write only for each change of the job's state
// (queued→running, running→succeeded), the lease renewed as the chain
// outlasts it, and one follow-up, the delivery.
func TestOneMessageChainsFullLongPollsUntilTheJobChanges(t *testing.T) {
	t.Parallel()
	e, h := newChainEnv(t, genacesim.ModelConfig{Price: 5, QueueFor: 40 * time.Second, RunFor: 70 * time.Second},
		observe.Config{Visibility: time.Minute})
	m := e.accept(t, "op-chain")
	before := handlertest.Get(t, e.store, "op-chain")
	e.ext.Calls = 0
	if failed := e.observe(t, m); len(failed) != 0 {
		t.Fatalf("failures %v\n%s", failed, e.logs.String())
	}
	sent := e.out.Take()
	if len(sent) != 1 || sent[0].Env.Action != message.ActionDeliverArtifacts {
		t.Fatalf("one message sent %+v; want one delivery, the chain observed to the end", sent)
	}
	got := handlertest.Get(t, e.store, "op-chain")
	if got.Phase != operation.PhaseSucceeded || got.Revision != before.Revision+2 {
		t.Fatalf("phase %s, revision %d → %d; want succeeded in two writes (running, succeeded)", got.Phase, before.Revision, got.Revision)
	}
	for i, w := range e.gen.waits {
		if w != 30*time.Second {
			t.Fatalf("long poll %d waited %s; want the full 30 s (all %v)", i, w, e.gen.waits)
		}
	}
	for i := 1; i < len(h.starts); i++ {
		if gap := h.starts[i].Sub(h.ends[i-1]); gap != 0 {
			t.Fatalf("gap %s between poll %d and %d; want none", gap, i-1, i)
		}
	}
	if got.Counters.Observations != len(e.gen.waits) || len(e.gen.waits) != 4 {
		t.Fatalf("%d observations recorded, %d GETs; want 4 of each (110 s of render in 30 s windows)", got.Counters.Observations, len(e.gen.waits))
	}
	if e.ext.Calls == 0 {
		t.Fatal("a chain of 2 minutes on a 1 minute lease never renewed it")
	}
}

// dueStore notes the Schedule.Due and the last look of each write (under
// heldFor the clock has moved on by the next poll when a write lands).
type dueStore struct {
	observe.Store
	mu           sync.Mutex
	dues, looked []time.Time
}

func (s *dueStore) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	saved, err := s.Store.Update(ctx, rec, expected)
	if err == nil && saved.Schedule != nil && saved.Remote != nil {
		s.mu.Lock()
		s.dues, s.looked = append(s.dues, saved.Schedule.Due), append(s.looked, saved.Remote.ObservedAt)
		s.mu.Unlock()
	}
	return saved, err
}

// A job that does not change is written every Chain, with the chain going
// on with the same message, and handed over to a fresh message only when
// the invocation's time runs out (its deadline less Overhead and the
// linger's window, or Span): each write says when the job was last
// looked at and that the next observation is due now, so the sweep knows
// the chain is alive, and the next message's first GET is a long poll
// again.
func TestQuietChainRenewsEveryChainAndHandsOverAtTheEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		timeout time.Duration // the invocation's (0: no deadline)
		writes  int
		polls   int
	}{
		// 30 s windows from the start; a write at the look after which
		// the next would pass 3 minutes since the last: 3, 6, 9 and 12
		// minutes; the hand-over at 14 (Span, or the deadline less
		// 5 s + 30 s: 14m25s), its next look past the end.
		{"deadline far off", 15 * time.Minute, 5, 28},
		{"no deadline", 0, 5, 28},
		// The deadline less 35 s: 4m25s; the renewal at 3 minutes, the
		// hand-over at 4.
		{"deadline near", 5 * time.Minute, 2, 8},
		// No room for a second window: one look, handed over at once.
		{"deadline at hand", 40 * time.Second, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := observe.Config{Visibility: time.Minute, Chain: 3 * time.Minute, Spread: -1}
			e, h := newChainEnv(t, genacesim.ModelConfig{Price: 5, RunFor: time.Hour}, cfg)
			st := &dueStore{Store: e.store}
			e.obs = observe.New(observe.Deps{Store: st, Genace: h, Delays: e.delays, Extender: e.ext, Sender: e.out, Clock: e.clk,
				Log: slog.New(slog.NewJSONHandler(e.logs, nil)), Metrics: metrics.Discard()}, cfg)
			m := e.accept(t, "op-long")
			start := e.clk.Now()
			ctx := context.Background()
			if tc.timeout > 0 {
				ctx = deadlineCtx{ctx, start.Add(tc.timeout)}
			}
			resp, err := e.obs.Handle(ctx, handlertest.Event(t, start, m))
			if err != nil || len(handlertest.Failed(resp)) != 0 {
				t.Fatalf("failures %v, %v\n%s", resp, err, e.logs.String())
			}
			sent := e.out.Take()
			got := handlertest.Get(t, e.store, "op-long")
			if len(sent) != 1 || sent[0].Env.Action != message.ActionObserveGeneration || sent[0].Delay != 0 || sent[0].Env.ExpectedRevision != got.Revision {
				t.Fatalf("sent %+v; want one message, the next observation, at once, at r%d", sent, got.Revision)
			}
			if end := start.Add(observe.DefaultSpan); e.clk.Now().After(end) || tc.timeout > 0 && e.clk.Now().After(start.Add(tc.timeout-5*time.Second)) {
				t.Fatalf("the chain ran %s, past its span or its deadline less Overhead", e.clk.Now().Sub(start))
			}
			if len(h.starts) != tc.polls || got.Counters.Observations != tc.polls {
				t.Fatalf("%d polls, %d observations recorded; want %d of each", len(h.starts), got.Counters.Observations, tc.polls)
			}
			if got.Revision != m.Env.ExpectedRevision+int64(tc.writes) || len(st.dues) != tc.writes {
				t.Fatalf("revision %d → %d, %d writes; want %d: a write every Chain, the last the hand-over", m.Env.ExpectedRevision, got.Revision, len(st.dues), tc.writes)
			}
			from := start
			for i, due := range st.dues {
				if gap := due.Sub(from); gap > cfg.Chain || !st.looked[i].Equal(due) {
					t.Fatalf("write %d due +%s, %s after the one before, of the look at +%s; want within Chain (%s), due at its look",
						i+1, due.Sub(start), gap, st.looked[i].Sub(start), cfg.Chain)
				}
				from = due
			}
			if !got.Remote.ObservedAt.Equal(e.clk.Now()) {
				t.Fatalf("observed at %v; want the hand-over's look, now (%v)", got.Remote.ObservedAt, e.clk.Now())
			}
			// The next message starts with a long poll: the record is fresh.
			e.gen.waits = nil
			e.observe(t, sent[0])
			if len(e.gen.waits) == 0 || e.gen.waits[0] != 30*time.Second {
				t.Fatalf("next chain's polls %v; want a long poll first", e.gen.waits)
			}
		})
	}
}

// Every record of a batch is observed at once: a record waiting for a
// slot behind chains of minutes would wait out a whole chain.
func TestBatchRecordsChainConcurrently(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt", genacesim.Config{DefaultModel: genacesim.ModelConfig{Price: 5}}, observe.Config{})
	var msgs []handlertest.Sent
	for i := range 12 {
		msgs = append(msgs, e.accept(t, fmt.Sprintf("op-batch-%d", i)))
	}
	g := &gate{gen: e.gen, want: 12, all: make(chan struct{})}
	e.obs = observe.New(observe.Deps{Store: e.store, Genace: g, Delays: e.delays, Extender: e.ext, Sender: e.out, Clock: e.clk,
		Log: slog.New(slog.NewJSONHandler(e.logs, nil)), Metrics: metrics.Discard()}, observe.Config{})
	e.observe(t, msgs...)
	if g.peak != 12 {
		t.Fatalf("%d records observed at once; want all 12 of the batch", g.peak)
	}
}

// gate holds each GET until want of them are in flight (or a second
// passed), and records the peak.
type gate struct {
	*gen
	mu        sync.Mutex
	in, peak  int
	want      int
	all       chan struct{}
	closeOnce sync.Once
}

func (g *gate) Get(ctx context.Context, jobID string, wait, timeout time.Duration) (*genace.Job, error) {
	g.mu.Lock()
	g.in++
	g.peak = max(g.peak, g.in)
	if g.in == g.want {
		g.closeOnce.Do(func() { close(g.all) })
	}
	g.mu.Unlock()
	select {
	case <-g.all:
	case <-time.After(time.Second):
	}
	defer func() { g.mu.Lock(); g.in--; g.mu.Unlock() }()
	return g.gen.Get(ctx, jobID, wait, timeout)
}
