package sweep

import (
	"context"
	"fmt"

	"github.com/genjobs/genjobs/internal/queue"
)

// Capacity is observe's queue and the event source mapping that invokes
// observe from it, as the sweep fits the mapping's concurrency to the
// queue's load (queue.Capacity on AWS; the local topology's otherwise).
type Capacity interface {
	// Depth counts the observe queue's messages: waiting, held by an
	// invocation's chain, and delayed (a later look).
	Depth(ctx context.Context) (queue.Depth, error)
	// MaxConcurrency is the mapping's ScalingConfig.MaximumConcurrency
	// now (0: none set).
	MaxConcurrency(ctx context.Context) (int, error)
	// SetMaxConcurrency changes it.
	SetMaxConcurrency(ctx context.Context, n int) error
}

// MinConcurrency is the least MaximumConcurrency Lambda accepts for an
// SQS event source mapping.
const MinConcurrency = 2

// Fit is how many observe invocations the queue's load needs: each
// invocation holds up to hold renders (OBSERVE_HOLD), and is planned at a
// quarter of that, so the load can grow fourfold between two sweeps
// before the running invocations' feeds are full, and an invocation's
// end hands over no more than a quarter of a hold at once (planned at
// half, 1,000 renders in flight ran on 2 invocations, whose hand-overs
// burst to 814 GETs a second against Genace's assumed 500: p99
// detection 18 s; at a quarter, 3 invocations, 74 a second, 0.34 s);
// at least MinConcurrency, at most
// ceiling (the template's MaximumConcurrency). Every message is a render
// being observed or about to be (one chain per operation), so the queue's
// depth is the load.
//
// Why: Lambda's pollers start an invocation whenever they receive while
// fewer than MaximumConcurrency run, and observe's invocations live up to
// 15 minutes: with the ceiling as the cap, a light load spreads over
// every allowed invocation and pays for all of them, though two would
// hold it.
func Fit(d queue.Depth, hold, ceiling int) int {
	ceiling = max(ceiling, MinConcurrency)
	per := max(hold/4, 1)
	want := (d.Total() + per - 1) / per
	return min(max(want, MinConcurrency), ceiling)
}

// Toward is the concurrency a sweep sets on its way from cur to want: up
// at once (a load that needs more waits in the queue meanwhile), down by
// at most half per run. Lowering the cap below the invocations running
// starts none until enough end, and each stops feeding near its end
// (observe.Config.FeedMargin): cut from 8 to 2 at once, the observation
// benchmark measured renders waiting up to two minutes for a receiver.
// Never above ceiling; a cur of 0 (no cap) or above ceiling counts as
// ceiling.
func Toward(cur, want, ceiling int) int {
	if cur <= 0 || cur > ceiling {
		// No cap, or one above the ceiling (set by hand, or a ceiling
		// lowered since): go down from the ceiling.
		cur = ceiling
	}
	if want >= cur {
		return min(want, ceiling)
	}
	return max(want, (cur+1)/2)
}

// fit sets observe's mapping's concurrency to Fit of its queue's load,
// and returns the concurrency it leaves (0 when the sweep has no
// Capacity). A failed read changes nothing: the mapping keeps what it
// has, which serves the load it served.
func (s *Sweeper) fit(ctx context.Context) (int, error) {
	if s.capacity == nil {
		return 0, nil
	}
	d, err := s.capacity.Depth(ctx)
	if err != nil {
		return 0, s.unfitted(ctx, fmt.Errorf("sweep: fit observe's concurrency: %w", err))
	}
	cur, err := s.capacity.MaxConcurrency(ctx)
	if err != nil {
		return 0, s.unfitted(ctx, fmt.Errorf("sweep: fit observe's concurrency: %w", err))
	}
	ceiling := max(s.cfg.MaxConcurrency, MinConcurrency)
	want := Toward(cur, Fit(d, s.cfg.Hold, ceiling), ceiling)
	if cur == want {
		return cur, nil
	}
	if err := s.capacity.SetMaxConcurrency(ctx, want); err != nil {
		return cur, s.unfitted(ctx, fmt.Errorf("sweep: set observe's concurrency %d → %d: %w", cur, want, err))
	}
	s.log.InfoContext(ctx, "observe concurrency fitted", "from", cur, "to", want,
		"visible", d.Visible, "in_flight", d.InFlight, "delayed", d.Delayed)
	return want, nil
}

// unfitted decides what a failed fit does to the run: a transient
// failure (a throttle, a mapping still applying a deploy's update: Lambda
// answers ResourceInUseException) is logged and left to the next run,
// five minutes later; any other (a missing grant, a mapping that is gone)
// fails the run, whose failure the stack alarms on.
func (s *Sweeper) unfitted(ctx context.Context, err error) error {
	if queue.Retryable(err) {
		s.log.WarnContext(ctx, "observe concurrency not fitted; the next run tries again", "error", err.Error())
		return nil
	}
	return err
}
