package groupcommit_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/groupcommit"
)

// Items that arrive during a step share the next one, each caller hears
// its own item's result, and no two steps overlap.
func TestGroup(t *testing.T) {
	t.Parallel()
	var g groupcommit.Group[int]
	var steps, running atomic.Int32
	held, release := make(chan struct{}), make(chan struct{})
	step := func(items []int) []error {
		if running.Add(1) != 1 {
			t.Error("two steps at once")
		}
		defer running.Add(-1)
		if steps.Add(1) == 1 {
			close(held)
			<-release
		}
		errs := make([]error, len(items))
		for i, it := range items {
			if it%3 == 0 {
				errs[i] = fmt.Errorf("item %d", it)
			}
		}
		return errs
	}
	first := make(chan error, 1)
	go func() { first <- g.Do(0, step) }()
	<-held
	const n = 30
	var started, wg sync.WaitGroup
	errs := make([]error, n+1)
	for i := 1; i <= n; i++ {
		started.Add(1)
		wg.Go(func() {
			started.Done()
			errs[i] = g.Do(i, step)
		})
	}
	started.Wait()
	time.Sleep(100 * time.Millisecond) // for each to queue
	close(release)
	wg.Wait()
	errs[0] = <-first
	for i, err := range errs {
		want := i%3 == 0
		if (err != nil) != want || (want && err.Error() != fmt.Sprintf("item %d", i)) {
			t.Errorf("item %d: %v", i, err)
		}
	}
	if s := steps.Load(); s > 3 {
		t.Errorf("%d items took %d steps, want at most 3 (the held one, then the queue)", n+1, s)
	}
	if err := g.Do(99, func(items []int) []error { return []error{errors.New("alone")} }); err == nil || err.Error() != "alone" {
		t.Errorf("lone caller: %v", err)
	}
}

// With Spacing, no step starts less than Spacing after the one before,
// callers that arrive during the wait share one step, and a caller after
// a quiet spell does not wait at all.
func TestSpacing(t *testing.T) {
	t.Parallel()
	const spacing = 200 * time.Millisecond
	g := groupcommit.Group[int]{Spacing: spacing}
	var mu sync.Mutex
	var starts []time.Time
	var sizes []int
	step := func(items []int) []error {
		mu.Lock()
		starts, sizes = append(starts, time.Now()), append(sizes, len(items))
		mu.Unlock()
		return make([]error, len(items))
	}
	if err := g.Do(0, step); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 1; i <= 20; i++ {
		wg.Go(func() {
			if err := g.Do(i, step); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i := 1; i < len(starts); i++ {
		// Timed inside the step, a little after the group's own clock
		// reading: allow for that, not for a missing wait.
		if gap := starts[i].Sub(starts[i-1]); gap < spacing/2 {
			t.Errorf("step %d started %v after the one before, want ≥ %v", i, gap, spacing)
		}
	}
	if len(starts) > 3 {
		t.Errorf("21 items took %d steps (sizes %v): callers waiting out the spacing should share one", len(starts), sizes)
	}
	time.Sleep(2 * spacing)
	t0 := time.Now()
	if err := g.Do(99, step); err != nil {
		t.Fatal(err)
	}
	// Not waiting takes microseconds; only waiting would take the
	// spacing's 200 ms.
	if waited := time.Since(t0); waited >= spacing {
		t.Errorf("after a quiet spell a lone caller waited %v", waited)
	}
}
