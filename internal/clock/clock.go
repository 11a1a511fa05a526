// Package clock gives the code one injectable notion of time, so handlers,
// the simulator and the fault-injection run can share a virtual clock.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells the time and waits. Real code uses Real; tests use Manual.
type Clock interface {
	Now() time.Time
	// After delivers the time once d has passed on this clock.
	After(d time.Duration) <-chan time.Time
}

// Real is the wall clock.
type Real struct{}

var _ Clock = Real{}

// Now returns the wall-clock time in the host's zone, with Go's monotonic
// reading kept, so durations measured between two readings (a lease, a
// deadline, an action's duration) are immune to wall-clock steps. Times
// are put in UTC where they are persisted or serialised (the stores, the
// schedule expression), not here.
func (Real) Now() time.Time { return time.Now() }

// After waits on the wall clock.
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Manual is a clock that moves only when told to. It is safe for
// concurrent use; waiters fire in deadline order as time is advanced.
type Manual struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

var _ Clock = (*Manual)(nil)

// NewManual returns a manual clock set to start.
func NewManual(start time.Time) *Manual { return &Manual{now: start.UTC()} }

// Now returns the clock's current time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// After returns a channel that receives once the clock is advanced past d.
func (m *Manual) After(d time.Duration) <-chan time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := make(chan time.Time, 1)
	at := m.now.Add(d)
	if d <= 0 {
		ch <- m.now
		return ch
	}
	m.waiters = append(m.waiters, waiter{at: at, ch: ch})
	return ch
}

// Advance moves the clock forward by d and fires every waiter now due.
func (m *Manual) Advance(d time.Duration) { m.Set(m.Now().Add(d)) }

// Set moves the clock to t (never backwards) and fires the waiters due.
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	if t.After(m.now) {
		m.now = t.UTC()
	}
	now := m.now
	sort.Slice(m.waiters, func(i, j int) bool { return m.waiters[i].at.Before(m.waiters[j].at) })
	keep := m.waiters[:0]
	var due []waiter
	for _, w := range m.waiters {
		if !w.at.After(now) {
			due = append(due, w)
		} else {
			keep = append(keep, w)
		}
	}
	m.waiters = keep
	m.mu.Unlock()
	for _, w := range due {
		w.ch <- now
	}
}

// NextWaiter reports the earliest pending deadline, if any, so a driver
// of virtual time can jump straight to it.
func (m *Manual) NextWaiter() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.waiters) == 0 {
		return time.Time{}, false
	}
	min := m.waiters[0].at
	for _, w := range m.waiters[1:] {
		if w.at.Before(min) {
			min = w.at
		}
	}
	return min, true
}
