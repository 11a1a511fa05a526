// Package lease tracks a queue message's visibility as a lease on one
// short action. A worker checks the lease before each step that needs
// exclusive authority (above all, a POST) and renews it with
// ChangeMessageVisibility when the step would outlast it. A failed renewal
// means ownership may be lost: the worker must not POST afterwards and may
// only write conditionally.
package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
)

// ErrLost says the lease is gone or could not be renewed: another worker
// may hold the message now.
var ErrLost = errors.New("lease lost")

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

// New starts tracking a lease granted at grantedAt for visibility. The
// grant time should err early (the invocation's start minus the event
// source's batching window), never late.
func New(clk clock.Clock, ext Extender, queueURL, receiptHandle string, visibility time.Duration, grantedAt time.Time) *Lease {
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

// Ensure makes sure the lease runs for at least need more: it renews when
// the remaining time is shorter, to max(visibility, need) from now. It
// returns ErrLost when the lease already expired (another worker may have
// the message; renewing then would paper over that) or the renewal fails.
func (l *Lease) Ensure(ctx context.Context, need time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clk.Now()
	if l.lost {
		return ErrLost
	}
	if !now.Before(l.expires) {
		l.lost = true
		return fmt.Errorf("%w: expired %s ago", ErrLost, now.Sub(l.expires).Round(time.Millisecond))
	}
	if l.expires.Sub(now) >= need {
		return nil
	}
	extend := max(l.visibility, need)
	if l.ext == nil {
		l.lost = true
		return fmt.Errorf("%w: %s left, %s needed, and no way to renew", ErrLost, l.expires.Sub(now), need)
	}
	if err := l.ext.ChangeVisibility(ctx, l.queueURL, l.handle, extend); err != nil {
		l.lost = true
		if l.OnRenewalFailure != nil {
			l.OnRenewalFailure(err)
		}
		return fmt.Errorf("%w: renewal failed: %w", ErrLost, err)
	}
	l.renewals++
	l.expires = now.Add(extend)
	return nil
}
