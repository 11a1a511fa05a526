package eventsource

import (
	"context"
	"sync"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
)

// withDeadline returns a context whose deadline is deadline on clk's time
// line and which is done when clk reaches it (timeout after now) or parent
// is done.
//
// On the wall clock that is context.WithDeadline. On any other clock it
// cannot be: the standard context measures deadlines against time.Now,
// and a virtual deadline may lie years before or after it, which would
// cancel the invocation at once or never. The handlers compare
// ctx.Deadline() with their own clock, so the deadline must be the
// virtual one, and expire when the virtual clock gets there.
func withDeadline(parent context.Context, clk clock.Clock, deadline time.Time, timeout time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := clk.(clock.Real); ok {
		return context.WithDeadline(parent, deadline)
	}
	c := &clockCtx{parent: parent, deadline: deadline, done: make(chan struct{})}
	// Registered before the handler starts, so the waiter's place among
	// the handler's own is the same on every run. It stays registered on
	// a manual clock after the invocation ends (the clock has no way to
	// drop it) and fires into the void when the clock gets there.
	timer := clk.After(timeout)
	go func() {
		select {
		case <-timer:
			c.finish(context.DeadlineExceeded)
		case <-parent.Done():
			c.finish(parent.Err())
		case <-c.done:
		}
	}()
	return c, func() { c.finish(context.Canceled) }
}

// clockCtx is a context with a deadline on a clock of its own. Its Done
// channel is its own, so contexts derived from it are cancelled through
// Done and take their error from Err (DeadlineExceeded on the virtual
// deadline), not from the parent's internals.
type clockCtx struct {
	parent   context.Context
	deadline time.Time
	done     chan struct{}
	once     sync.Once
	mu       sync.Mutex
	err      error
}

var _ context.Context = (*clockCtx)(nil)

func (c *clockCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *clockCtx) Done() <-chan struct{}       { return c.done }
func (c *clockCtx) Value(key any) any           { return c.parent.Value(key) }

func (c *clockCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// finish ends the context with err; only the first call counts.
func (c *clockCtx) finish(err error) {
	c.once.Do(func() {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.done)
	})
}
