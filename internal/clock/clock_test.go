package clock

import (
	"strings"
	"testing"
	"time"
)

// TestRealKeepsTheMonotonicReading: durations between two readings of the
// real clock must not follow wall-clock steps, which only Go's monotonic
// reading guarantees (t.UTC() would strip it).
func TestRealKeepsTheMonotonicReading(t *testing.T) {
	t.Parallel()
	now := Real{}.Now()
	if !strings.Contains(now.String(), " m=") {
		t.Fatalf("Real.Now() = %s: no monotonic reading", now)
	}
	if now.Location() != time.Local {
		t.Fatalf("Real.Now() is in %s, want the host's zone", now.Location())
	}
}

func TestManualFiresWaitersInOrder(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	c := NewManual(start)
	late := c.After(10 * time.Second)
	early := c.After(2 * time.Second)
	if next, ok := c.NextWaiter(); !ok || !next.Equal(start.Add(2*time.Second)) {
		t.Fatalf("NextWaiter = %v, %v; want start+2s", next, ok)
	}
	c.Advance(5 * time.Second)
	select {
	case got := <-early:
		if !got.Equal(start.Add(5 * time.Second)) {
			t.Fatalf("early fired at %v", got)
		}
	default:
		t.Fatal("early waiter did not fire after its deadline")
	}
	select {
	case <-late:
		t.Fatal("late waiter fired before its deadline")
	default:
	}
	c.Set(start) // never backwards
	if !c.Now().Equal(start.Add(5 * time.Second)) {
		t.Fatalf("Set moved the clock backwards to %v", c.Now())
	}
	c.Advance(5 * time.Second)
	if _, ok := <-late; !ok {
		t.Fatal("late waiter channel closed")
	}
}

func TestManualAfterNonPositiveFiresAtOnce(t *testing.T) {
	t.Parallel()
	c := NewManual(time.Unix(0, 0))
	select {
	case <-c.After(0):
	default:
		t.Fatal("After(0) did not fire at once")
	}
}
