package eventsource

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/localqueue"
)

// blocking is a handler that runs until released (one invocation per
// token on release) and records how many invocations run at once.
type blocking struct {
	release                               chan struct{}
	running, peak, started, finished, cut atomic.Int64
}

func (b *blocking) handle(ctx context.Context, _ events.SQSEvent) (events.SQSEventResponse, error) {
	b.started.Add(1)
	n := b.running.Add(1)
	for p := b.peak.Load(); n > p && !b.peak.CompareAndSwap(p, n); p = b.peak.Load() {
	}
	defer b.finished.Add(1)
	defer b.running.Add(-1)
	select {
	case <-b.release:
		return events.SQSEventResponse{}, nil
	case <-ctx.Done():
		b.cut.Add(1)
		return events.SQSEventResponse{}, ctx.Err()
	}
}

// TestMaxConcurrency: Run's pollers honour a cap changed while they run,
// as Lambda's MaximumConcurrency: never more invocations at once than the
// cap; raising it lets more run; lowering it cancels none in flight, and
// none starts until fewer than the cap run.
//
// The clock is manual and never moves, so no visibility timeout, deadline
// or idle wait runs out: each step waits for a state where the handlers
// running and the pollers inside a poll both number want, with want at or
// above the cap in force. There no poller can start a poll (that needs
// fewer active than the cap) and none ends one (the handlers block), so
// the counts read there are final, not a guess after a sleep.
func TestMaxConcurrency(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(t0)
	b := localqueue.New(clk)
	url, err := b.Create("capped", localqueue.Config{Visibility: vis})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := b.Send(context.Background(), url, []byte(strconv.Itoa(i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	h := &blocking{release: make(chan struct{})}
	m := &Mapping{Broker: b, Queue: url, Clock: clk, Workers: 4, BatchSize: 1, Handler: h.handle}
	// Set before Run, as a deployed mapping's ScalingConfig is.
	m.SetMaxConcurrency(1)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- m.Run(ctx, time.Second) }()
	defer func() {
		cancel()
		close(h.release) // Run waits for the invocations in flight
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
		if n := h.cut.Load(); n != 0 {
			t.Errorf("%d invocations were cancelled; changing the cap must cancel none", n)
		}
	}()

	for i, step := range []struct {
		name    string
		cap     int // 0: leave it
		release int // invocations to let finish, one at a time
		// running is how many run at the end, started how many ever
		// started, peak the most at once during the step.
		running, started, peak int64
	}{
		{name: "capped at 1 from the start", running: 1, started: 1, peak: 1},
		{name: "one ends, one starts, never two", release: 1, running: 1, started: 2, peak: 1},
		{name: "and again", release: 1, running: 1, started: 3, peak: 1},
		{name: "raised to 3, 3 run", cap: 3, running: 3, started: 5, peak: 3},
		{name: "lowered to 2, the 3 keep running", cap: 2, running: 3, started: 5, peak: 3},
		{name: "one ends: 2 run, none starts", release: 1, running: 2, started: 5, peak: 3},
		{name: "one more ends: one starts", release: 1, running: 2, started: 6, peak: 2},
		{name: "raised past Workers, Workers run", cap: 10, running: 4, started: 8, peak: 4},
	} {
		if i > 0 {
			// Settled: no handler starts now, so resetting is safe.
			h.peak.Store(h.running.Load())
		}
		if step.cap != 0 {
			m.SetMaxConcurrency(step.cap)
		}
		// Each token ends one invocation running; the send waits for one.
		finished := h.finished.Load()
		for range step.release {
			h.release <- struct{}{}
		}
		settle(t, step.name, m, h, func(r, a int64) bool {
			return h.finished.Load() == finished+int64(step.release) && r == step.running && a == step.running
		})
		if got := h.started.Load(); got != step.started {
			t.Errorf("%s: %d invocations started, want %d", step.name, got, step.started)
		}
		if got := h.peak.Load(); got != step.peak {
			t.Errorf("%s: at most %d ran at once, want %d", step.name, got, step.peak)
		}
		if step.cap != 0 && m.MaxConcurrency() != step.cap {
			t.Errorf("%s: MaxConcurrency() = %d, want %d as set", step.name, m.MaxConcurrency(), step.cap)
		}
	}
}

// settle waits until ok holds for the handlers running and the pollers
// inside a poll.
func settle(t *testing.T, step string, m *Mapping, h *blocking, ok func(running, active int64) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, a := h.running.Load(), m.active.Load()
		if ok(r, a) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d running, %d pollers in a poll (cap %d, started %d): not settled", step, r, a, m.limit(), h.started.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestMaxConcurrencyValue: the cap reads back as set, and unset or ≤ 0
// reads as Workers (at least 1); PollOnce ignores it.
func TestMaxConcurrencyValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		workers, set int
		want         int
		limit        int64
	}{
		{"unset is Workers", 4, 0, 4, 4},
		{"no Workers is 1", 0, 0, 1, 1},
		{"below Workers", 4, 2, 2, 2},
		{"above Workers, stored as set", 4, 10, 10, 4},
		{"negative is none", 4, -3, 4, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := &Mapping{Workers: tc.workers}
			if tc.set != 0 {
				m.SetMaxConcurrency(5)
				m.SetMaxConcurrency(tc.set)
			}
			if got := m.MaxConcurrency(); got != tc.want {
				t.Errorf("MaxConcurrency() = %d, want %d", got, tc.want)
			}
			if got := m.limit(); got != tc.limit {
				t.Errorf("cap in force %d, want %d", got, tc.limit)
			}
		})
	}
	t.Run("PollOnce ignores it", func(t *testing.T) {
		t.Parallel()
		b := localqueue.New(nil)
		url, err := b.Create("once", localqueue.Config{})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := b.Send(context.Background(), url, []byte("x"), 0); err != nil {
				t.Fatal(err)
			}
		}
		// Both invocations must run at once to return.
		var both atomic.Int64
		arrived := make(chan struct{})
		m := &Mapping{Broker: b, Queue: url, BatchSize: 1, Workers: 2, Timeout: time.Minute,
			Handler: func(ctx context.Context, _ events.SQSEvent) (events.SQSEventResponse, error) {
				if both.Add(1) == 2 {
					close(arrived)
				}
				select {
				case <-arrived:
					return events.SQSEventResponse{}, nil
				case <-ctx.Done():
					return events.SQSEventResponse{}, errors.New("alone until the deadline")
				}
			}}
		m.SetMaxConcurrency(1)
		errs := make(chan error, 2)
		for range 2 {
			go func() { _, err := m.PollOnce(context.Background()); errs <- err }()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("PollOnce: %v", err)
			}
		}
	})
}
