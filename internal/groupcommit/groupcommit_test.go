package groupcommit_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/groupcommit"
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
