// A Lease tracks a queue message's visibility as a lease on one
// short action. A worker checks the lease before each step that needs the
// message (Ensure), renewing it with ChangeMessageVisibility when the step
// would outlast it, and renews it unconditionally right before a step that
// needs exclusive authority, above all a POST (Renew). A failed renewal
// means ownership may be lost: the worker must not POST afterwards and may
// only write conditionally.

package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
)

// ErrLeaseLost says the lease is gone or could not be renewed: another worker
// may hold the message now.
var ErrLeaseLost = errors.New("lease lost")

// Extender renews a message's visibility (SQS ChangeMessageVisibility).
type Extender interface {
	ChangeVisibility(ctx context.Context, queueURL, receiptHandle string, timeout time.Duration) error
}

// Lease is one received message's visibility window.
type Lease struct {
	mu         sync.Mutex
	clk        clock.Clock
	ext        Extender
	queueURL   string
	handle     string
	visibility time.Duration
	expires    time.Time
	lost       bool
	renewals   int
	// OnRenewalFailure is called once per failed renewal (for metrics).
	OnRenewalFailure func(error)
}

// NewLease starts tracking a lease granted at grantedAt for visibility. The
// estimate is only safe when the grant time errs early (the receive, or
// the invocation's start minus the event source's batching window); a
// later one makes Ensure optimistic, which Renew does not depend on.
func NewLease(clk clock.Clock, ext Extender, queueURL, receiptHandle string, visibility time.Duration, grantedAt time.Time) *Lease {
	return &Lease{clk: clk, ext: ext, queueURL: queueURL, handle: receiptHandle, visibility: visibility, expires: grantedAt.Add(visibility)}
}

// Remaining is how long the lease still runs (≤ 0 when expired).
func (l *Lease) Remaining() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expires.Sub(l.clk.Now())
}

// Lost reports whether the lease expired or a renewal failed.
func (l *Lease) Lost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost || !l.clk.Now().Before(l.expires)
}

// Renewals counts successful renewals.
func (l *Lease) Renewals() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewals
}

// Ensure makes sure the lease runs for at least need more by its own
// estimate: it renews when the remaining time is shorter, to
// max(visibility, need) from now. It returns ErrLeaseLost when the lease already
// expired (another worker may have the message; renewing then would paper
// over that) or the renewal fails. The estimate is only as good as the
// grant time given to New; before a POST, use Renew.
func (l *Lease) Ensure(ctx context.Context, need time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clk.Now()
	if err := l.check(now); err != nil {
		return err
	}
	if l.expires.Sub(now) >= need {
		return nil
	}
	return l.renew(ctx, now, need)
}

// Renew extends the lease to max(visibility, need) from now through the
// queue, however much time the lease's own estimate has left. The estimate
// may start too late (the batching window, a cold start, throttled
// invocations and the records before this one in the batch all pass
// before a handler reaches it), and only the queue knows whether the
// message is still ours: ChangeMessageVisibility counts from the call and
// fails once another receive made the receipt handle stale or the
// visibility ran out. So Renew, called right before a POST, is the proof
// of authority for it; any error wraps ErrLeaseLost.
func (l *Lease) Renew(ctx context.Context, need time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clk.Now()
	if err := l.check(now); err != nil {
		return err
	}
	return l.renew(ctx, now, need)
}

// check fails when the lease is known lost: a renewal failed, or the
// estimate says it expired (an estimate that errs short only makes this
// cautious).
func (l *Lease) check(now time.Time) error {
	if l.lost {
		return ErrLeaseLost
	}
	if !now.Before(l.expires) {
		l.lost = true
		return fmt.Errorf("%w: expired %s ago", ErrLeaseLost, now.Sub(l.expires).Round(time.Millisecond))
	}
	return nil
}

// renew asks the queue for max(visibility, need) from now.
func (l *Lease) renew(ctx context.Context, now time.Time, need time.Duration) error {
	extend := max(l.visibility, need)
	if l.ext == nil {
		l.lost = true
		return fmt.Errorf("%w: %s left by estimate, %s needed, and no way to renew", ErrLeaseLost, l.expires.Sub(now), need)
	}
	if err := l.ext.ChangeVisibility(ctx, l.queueURL, l.handle, extend); err != nil {
		l.lost = true
		if l.OnRenewalFailure != nil {
			l.OnRenewalFailure(err)
		}
		return fmt.Errorf("%w: renewal failed: %w", ErrLeaseLost, err)
	}
	l.renewals++
	l.expires = now.Add(extend)
	return nil
}
