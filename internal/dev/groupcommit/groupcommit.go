// Package groupcommit lets concurrent callers share one expensive durable
// step (a transaction's fsync, a pack's fsync): the first caller to find
// none under way runs it for itself, on its own goroutine; callers that
// arrive meanwhile queue, and one of them runs the next step for all of
// the queue. Without Spacing a lone caller waits for nothing extra; under
// load the step's cost is shared by as many callers as arrived during one
// step.
package groupcommit

import (
	"sync"
	"time"
)

// Group queues items of type T for the next step. The zero value is ready.
type Group[T any] struct {
	// Spacing, when set, is the least time between the starts of two
	// steps: a caller that would start a step less than Spacing after the
	// last one started waits out the rest, and its step then carries
	// everything that queued meanwhile. Under load that caps steps at
	// 1/Spacing per second, each shared by more callers; after a quiet
	// spell a caller starts at once. It suits a step whose cost is mostly
	// fixed (a flush to the disk) for callers to whom a few milliseconds
	// are small next to their own work. Set it before the first Do.
	Spacing time.Duration

	mu sync.Mutex
	// queue waits for the next step, in arrival order.
	queue []*waiter[T]
	// leading is true while some caller runs a step.
	leading bool
	// lastStart is when the last step started.
	lastStart time.Time
}

type waiter[T any] struct {
	item T
	done chan outcome // buffered: the leader never blocks on it
}

// outcome is what a queued caller hears: its item's result, or that it
// runs the next step (its own item is in it).
type outcome struct {
	err  error
	lead bool
}

// Do runs step over item and whatever items queued with it, and returns
// item's result: step returns one error per item, in order. Items are
// given to step in the order their callers arrived; step runs on one
// caller's goroutine at a time, never two at once.
func (g *Group[T]) Do(item T, step func([]T) []error) error {
	w := &waiter[T]{item: item, done: make(chan outcome, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, w)
	if g.leading {
		g.mu.Unlock()
		if o := <-w.done; !o.lead {
			return o.err
		}
		g.mu.Lock()
	}
	g.leading = true
	if g.Spacing > 0 {
		if wait := time.Until(g.lastStart.Add(g.Spacing)); wait > 0 {
			g.mu.Unlock()
			time.Sleep(wait)
			g.mu.Lock()
		}
	}
	batch := g.queue
	g.queue = nil
	g.lastStart = time.Now()
	g.mu.Unlock()

	items := make([]T, len(batch))
	for i, b := range batch {
		items[i] = b.item
	}
	errs := step(items)

	// Hand the next step over before answering, so it starts without
	// waiting for the answers (Spacing permitting).
	g.mu.Lock()
	if len(g.queue) > 0 {
		g.queue[0].done <- outcome{lead: true}
	} else {
		g.leading = false
	}
	g.mu.Unlock()
	for i, b := range batch {
		b.done <- outcome{err: errs[i]}
	}
	return (<-w.done).err
}
