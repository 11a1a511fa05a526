package observe_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/schedule"
)

// deadlineCtx carries an invocation's deadline on the manual clock's
// time line; it is never cancelled for it (the handler keeps to it).
type deadlineCtx struct {
	context.Context
	at time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.at, true }

// relay is the queue between invocations: it records every message the
// handlers send, with the time, and hands an observation sent at once to
// pick (the next invocation).
type relay struct {
	clk  *clock.Manual
	log  *eventLog
	mu   sync.Mutex
	sent []handlertest.Sent
	at   []time.Time
	pick func(handlertest.Sent)
}

func (r *relay) Send(_ context.Context, env message.Envelope, delay time.Duration) (schedule.Route, error) {
	if err := env.Validate(); err != nil {
		return "", err
	}
	r.mu.Lock()
	m := handlertest.Sent{ID: fmt.Sprintf("relayed-%d", len(r.sent)+1), Env: env, Delay: delay}
	r.sent, r.at = append(r.sent, m), append(r.at, r.clk.Now())
	pick := r.pick
	r.mu.Unlock()
	r.log.add(fmt.Sprintf("send %s at +%s", env.Action, r.clk.Now().Sub(handlertest.Start)))
	if pick != nil && env.Action == message.ActionObserveGeneration {
		pick(m)
	}
	return schedule.RouteSQS, nil
}

// of lists the messages sent of action, and when.
func (r *relay) of(action message.Action) (ms []handlertest.Sent, at []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, m := range r.sent {
		if m.Env.Action == action {
			ms, at = append(ms, m), append(at, r.at[i])
		}
	}
	return ms, at
}

// relayOpts describes a relayRun.
type relayOpts struct {
	model genacesim.ModelConfig
	cfg   observe.Config
	// timeout is each invocation's deadline after its start (0: none).
	timeout time.Duration
	// pickup is how long after its send an observation message starts the
	// next invocation (the SQS hop and the Lambda start); hops is how many
	// are picked up (0: only the first message is handled).
	pickup time.Duration
	hops   int
	// store, if set, wraps the store the handler writes through; first is
	// the first message's id, handedOver whether it handed over yet.
	store func(s observe.Store, clk *clock.Manual, first string, handedOver func() bool) observe.Store
}

// relayRun is one render observed as the deployed function runs it, in
// virtual time: every invocation has its deadline, and the follow-up of a
// hand-over starts the next invocation pickup after it was sent, while
// the one that sent it may still run. Polls are answered by longPoller.
type relayRun struct {
	g        *longPoller
	log      *eventLog
	out      *relay
	rec      operation.Record
	finished time.Time // when the job reached its terminal state
	first    string    // the first message's id
	logs     string
}

func runRelay(t *testing.T, o relayOpts) relayRun {
	t.Helper()
	e := newEnv(t, "bolt", genacesim.Config{DefaultModel: o.model}, o.cfg)
	e.delays.Policies = chainPolicies()
	created := e.clk.Now()
	m := e.accept(t, "op-relay")
	run := relayRun{log: &eventLog{}, first: m.ID, finished: created.Add(o.model.QueueFor + o.model.RunFor)}
	changes := []time.Time{run.finished}
	if o.model.QueueFor > 0 {
		changes = []time.Time{created.Add(o.model.QueueFor), run.finished}
	}
	synctest.Test(t, func(t *testing.T) {
		c, err := genace.New("http://genace.test", handlertest.APIKey, &http.Client{Transport: inProcess{e.sim}})
		if err != nil {
			t.Fatal(err)
		}
		run.g = &longPoller{sim: c, clk: e.clk, changes: changes, log: run.log}
		run.out = &relay{clk: e.clk, log: run.log}
		var st observe.Store = slowStore{e.store, run.log, e.clk}
		if o.store != nil {
			st = o.store(st, e.clk, m.ID, func() bool { ms, _ := run.out.of(message.ActionObserveGeneration); return len(ms) > 0 })
		}
		h := observe.New(observe.Deps{Store: st, Genace: run.g, Delays: e.delays, Extender: e.ext, Sender: run.out, Clock: e.clk,
			Log: slog.New(slog.NewJSONHandler(e.logs, nil)), Metrics: metrics.Discard()}, o.cfg)
		var (
			mu     sync.Mutex
			active int
			failed []string
		)
		invoke := func(m handlertest.Sent, after time.Duration) {
			mu.Lock()
			active++
			mu.Unlock()
			go func() {
				defer func() { mu.Lock(); active--; mu.Unlock() }()
				<-e.clk.After(after)
				ctx := context.Background()
				if o.timeout > 0 {
					ctx = deadlineCtx{ctx, e.clk.Now().Add(o.timeout)}
				}
				resp, err := h.Handle(ctx, handlertest.Event(t, e.clk.Now(), m))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = append(failed, err.Error())
				}
				failed = append(failed, handlertest.Failed(resp)...)
				if dl, ok := ctx.Deadline(); ok && e.clk.Now().After(dl) {
					failed = append(failed, fmt.Sprintf("%s returned at +%s, past its deadline", m.ID, e.clk.Now().Sub(handlertest.Start)))
				}
			}()
		}
		hops := o.hops
		run.out.pick = func(m handlertest.Sent) {
			mu.Lock()
			pick := hops > 0
			hops--
			mu.Unlock()
			if pick {
				invoke(m, m.Delay+o.pickup) // SQS holds a delayed message back
			}
		}
		invoke(m, 0)
		// Move the clock only when every goroutine waits on it.
		for {
			synctest.Wait()
			mu.Lock()
			n := active
			mu.Unlock()
			if n == 0 {
				break
			}
			at, ok := e.clk.NextWaiter()
			if !ok {
				t.Fatal("the handlers wait on nothing the clock can move")
			}
			e.clk.Set(at)
		}
		if len(failed) != 0 {
			t.Fatalf("failures %v\n%s", failed, e.logs.String())
		}
		run.g.mu.Lock()
		defer run.g.mu.Unlock()
		if run.g.inFlight != 0 {
			t.Fatalf("%d GETs still in flight after the handlers returned", run.g.inFlight)
		}
		run.rec = handlertest.Get(t, e.store, "op-relay")
		run.logs = e.logs.String()
	})
	return run
}

// handoverAt is when the first chain of a job that never finishes hands
// over (its follow-up is sent), with the timeout and cfg given.
func handoverAt(t *testing.T, cfg observe.Config, timeout time.Duration) time.Duration {
	t.Helper()
	quiet := runRelay(t, relayOpts{model: genacesim.ModelConfig{Price: 5, RunFor: 24 * time.Hour}, cfg: cfg, timeout: timeout})
	_, at := quiet.out.of(message.ActionObserveGeneration)
	if len(at) != 1 {
		t.Fatalf("a quiet chain sent %d observations; want its one hand-over\n%v", len(at), quiet.log.all())
	}
	return at[0].Sub(handlertest.Start)
}

// A job that finishes right after a chain handed over, before the next
// message's first poll reaches Genace, is seen at once: the chain's last
// poll still waits at Genace (the linger) and answers with the finish.
// Before, no poll was held in that gap (the hand-over's write, the SQS
// hop, the Lambda start, the GET's trip): the next message's long poll
// arrived with the job already succeeded, and Genace held it for its
// whole window, a finish seen 30 s late. A finish after the next poll
// arrived is seen at once by both; either write wins, and one delivery
// follows.
func TestFinishJustAfterTheHandoverIsSeenAtOnce(t *testing.T) {
	t.Parallel()
	const timeout = 3 * time.Minute
	const pickup = time.Second
	cfg := observe.Config{Visibility: 6 * time.Minute}
	handover := handoverAt(t, cfg, timeout)
	for _, after := range []time.Duration{200 * time.Millisecond, 900 * time.Millisecond, 3 * time.Second} {
		t.Run(fmt.Sprint("finish ", after, " after the hand-over"), func(t *testing.T) {
			t.Parallel()
			run := runRelay(t, relayOpts{model: genacesim.ModelConfig{Price: 5, RunFor: handover + after},
				cfg: cfg, timeout: timeout, pickup: pickup, hops: 1})
			if run.g.terminal.IsZero() {
				t.Fatalf("no answer carried the finished job\n%v", run.log.all())
			}
			if late := run.g.terminal.Sub(run.finished); late > time.Second {
				t.Fatalf("finish at +%s detected %s after it happened; want under 1 s\n%v", run.finished.Sub(handlertest.Start), late, run.log.all())
			}
			deliveries, _ := run.out.of(message.ActionDeliverArtifacts)
			if run.rec.Phase != operation.PhaseSucceeded || len(deliveries) != 1 || deliveries[0].Env.ExpectedRevision != run.rec.Revision {
				t.Fatalf("record %s r%d, deliveries %+v; want succeeded and one delivery at its revision", run.rec.Phase, run.rec.Revision, deliveries)
			}
		})
	}
}

// A change seen by the hand-over's own look (the job starts running just
// before the chain ends) leaves no poll in flight to linger on: the chain
// sends one, so a finish just after that hand-over is still seen at once.
// Before, the chain stopped there, the next message's first poll arrived
// after the finish, and Genace held it a whole window.
func TestChangeAtTheHandoverStillLingers(t *testing.T) {
	t.Parallel()
	const timeout = 3 * time.Minute
	cfg := observe.Config{Visibility: 6 * time.Minute, Spread: -1}
	handover := handoverAt(t, cfg, timeout)
	for _, before := range []time.Duration{2 * time.Second, 5 * time.Second, 10 * time.Second} {
		t.Run(fmt.Sprint("running ", before, " before the hand-over"), func(t *testing.T) {
			t.Parallel()
			// The finish comes before the next message (a second's pickup)
			// could have a poll at Genace.
			run := runRelay(t, relayOpts{model: genacesim.ModelConfig{Price: 5, QueueFor: handover - before, RunFor: 500 * time.Millisecond},
				cfg: cfg, timeout: timeout, pickup: time.Second, hops: 1})
			if run.g.terminal.IsZero() {
				t.Fatalf("no answer carried the finished job\n%v", run.log.all())
			}
			if late := run.g.terminal.Sub(run.finished); late > time.Second {
				t.Fatalf("finish at +%s detected %s after it happened; want under 1 s\n%v", run.finished.Sub(handlertest.Start), late, run.log.all())
			}
		})
	}
}

// secondWins holds the first message's writes after its hand-over (its
// linger's) until another message's write landed (or a minute passed):
// the next message's chain writes first.
type secondWins struct {
	observe.Store
	clk        *clock.Manual
	first      string
	handedOver func() bool
	once       sync.Once
	landed     chan struct{}
}

func (s *secondWins) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	if rec.LastAppliedMessageID == s.first && s.handedOver() {
		select {
		case <-s.landed:
		case <-s.clk.After(time.Minute):
		}
		return s.Store.Update(ctx, rec, expected)
	}
	saved, err := s.Store.Update(ctx, rec, expected)
	if err == nil && rec.LastAppliedMessageID != s.first {
		s.once.Do(func() { close(s.landed) })
	}
	return saved, err
}

// A linger that sees a change the next message's chain wrote first loses
// the revision race and does nothing more: the newer state stands, and
// only the winner's follow-up leaves (a delivery for a finish; for a
// change the chain keeps observing, only the next chain's own hand-over).
func TestLingerThatLosesToTheNextChainDoesNothingMore(t *testing.T) {
	t.Parallel()
	const timeout = 3 * time.Minute
	cfg := observe.Config{Visibility: 6 * time.Minute}
	handover := handoverAt(t, cfg, timeout)
	// The change comes 3 s after the hand-over: the next message (started
	// 1 s after it) has its poll at Genace too.
	for _, tc := range []struct {
		name                     string
		model                    genacesim.ModelConfig
		phase                    operation.Phase
		deliveries, observations int
	}{
		{"finish", genacesim.ModelConfig{Price: 5, RunFor: handover + 3*time.Second}, operation.PhaseSucceeded, 1, 1},
		{"start running", genacesim.ModelConfig{Price: 5, QueueFor: handover + 3*time.Second, RunFor: time.Hour}, operation.PhaseAccepted, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			run := runRelay(t, relayOpts{model: tc.model, cfg: cfg, timeout: timeout, pickup: time.Second, hops: 1,
				store: func(s observe.Store, clk *clock.Manual, first string, handedOver func() bool) observe.Store {
					return &secondWins{Store: s, clk: clk, first: first, handedOver: handedOver, landed: make(chan struct{})}
				}})
			deliveries, _ := run.out.of(message.ActionDeliverArtifacts)
			observations, _ := run.out.of(message.ActionObserveGeneration)
			if run.rec.Phase != tc.phase || run.rec.LastAppliedMessageID != "relayed-1" {
				t.Fatalf("record %s, last written by %s; want %s by the next message, relayed-1", run.rec.Phase, run.rec.LastAppliedMessageID, tc.phase)
			}
			if len(deliveries) != tc.deliveries || len(observations) != tc.observations {
				t.Fatalf("sent %d deliveries, %d observations; want %d and %d (the hand-overs): the losing linger sent nothing\n%v",
					len(deliveries), len(observations), tc.deliveries, tc.observations, run.log.all())
			}
			if !strings.Contains(run.logs, `"lost the revision race`) || !strings.Contains(run.logs, `"lingers":true`) {
				t.Fatalf("no lingering hand-over lost its race:\n%s", run.logs)
			}
		})
	}
}

// A chain's GETs are the overlap's arithmetic: one per window less
// Overlap (29 s of a 30 s window) while a whole window still fits the
// chain, and, at the hand-over, the one more the overlap sends as if the
// chain went on: its linger. Renewals add none (their write leaves the
// poll in flight as it is), and every chain of a relay makes the same.
// Each linger is held to the end of its window: no poll is cancelled.
func TestChainGETsAreTheOverlapsArithmetic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		cfg     observe.Config
		hops    int
		gets    int
	}{
		// Span (14 min) ends the chain before the deadline less 35 s: 28
		// polls sent 29 s apart (the last answered at 13m33.2s), the 29th
		// the linger.
		// (Overlap 1 s: polls 29 s apart. Spread -1: the hand-over at the
		// deadline itself; stagger_test.go holds the staggered ones.)
		{"15 min invocation", 15 * time.Minute, observe.Config{Spread: -1, Overlap: time.Second}, 0, 29},
		{"15 min invocation, no renewal", 15 * time.Minute, observe.Config{Chain: observe.DefaultSpan, Spread: -1, Overlap: time.Second}, 0, 29},
		// The deadline less 35 s (4m25s) ends it: 9 polls and the linger.
		{"5 min invocation", 5 * time.Minute, observe.Config{Spread: -1, Overlap: time.Second}, 0, 10},
		// The old hand-over at 4 minutes: its 8 polls, and the linger.
		{"4 min span, no deadline", 0, observe.Config{Span: 4 * time.Minute, Overlap: time.Second}, 0, 9},
		// Two chains of 29, the next one's first poll taking over from the
		// first one's linger HandOverLead before its window runs out.
		{"relayed", 15 * time.Minute, observe.Config{Spread: -1, Overlap: time.Second}, 1, 58},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.cfg.Visibility = 30 * time.Minute
			run := runRelay(t, relayOpts{model: genacesim.ModelConfig{Price: 5, RunFor: 24 * time.Hour}, cfg: tc.cfg,
				timeout: tc.timeout, pickup: time.Second, hops: tc.hops})
			if n := len(run.g.sent); n != tc.gets || run.g.cancelled != 0 {
				t.Fatalf("%d GETs, %d cancelled; want %d, none cancelled\n%v", n, run.g.cancelled, tc.gets, run.log.all())
			}
			observations, _ := run.out.of(message.ActionObserveGeneration)
			if len(observations) != tc.hops+1 {
				t.Fatalf("%d hand-overs; want %d", len(observations), tc.hops+1)
			}
			// The linger was sent a second before the hand-over's look: its
			// window has 29 s left then, less the lead and the write's time.
			lead := observe.Config{}.Defaults().HandOverLead
			if d := observations[0].Delay; d > 29*time.Second-lead || d < 28*time.Second-lead {
				t.Errorf("hand-over sent with delay %v; want the linger's window less the lead, about %v", d, 29*time.Second-lead)
			}
		})
	}
}
