package operation

import (
	"fmt"
	"time"
)

// Follow is what must happen after a transition is persisted.
type Follow string

const (
	// FollowNone: nothing more; the record is terminal.
	FollowNone Follow = "none"
	// FollowObserve: schedule the next observation.
	FollowObserve Follow = "observe"
	// FollowDeliver: send a deliver_artifacts message.
	FollowDeliver Follow = "deliver"
	// FollowReview: automation stops here; write a review record.
	FollowReview Follow = "review"
)

// Budgets bound how long automation keeps reading one job.
type Budgets struct {
	// MaxObservations caps observations while the remote job is active.
	MaxObservations int
	// Polling caps the time from acceptance while the job is active.
	Polling time.Duration
	// Accounting caps the time spent waiting for a refund to settle.
	Accounting time.Duration
}

// DefaultBudgets suit renders of seconds to hours: an active job is
// long-polled for up to 6 hours (schedule.DefaultPolicies), one
// observation per 30 s window and about 1 % more for the polls sent
// before a window runs out (observe's Overlap) and the hand-overs, so
// MaxObservations leaves room for 6 hours of them; past either budget the job is parked for
// review (PhaseStalled), never observed ever more slowly.
var DefaultBudgets = Budgets{MaxObservations: 800, Polling: 6 * time.Hour, Accounting: 24 * time.Hour}

// Observe applies a remote snapshot to the record and says what follows.
// It is the pure core of the observe function.
func Observe(r Record, snap Snapshot, now time.Time, b Budgets) (Record, Follow, error) {
	if r.RemoteJobID == "" {
		return Record{}, FollowNone, &TransitionError{Op: "observe", From: r.Phase, To: r.Phase, Why: "no job id to observe"}
	}
	switch r.Phase {
	case PhaseFailed:
		return observeFailed(r, snap, now, b)
	case PhaseAccepted, PhaseStalled:
	default:
		return Record{}, FollowNone, &TransitionError{Op: "observe", From: r.Phase, To: r.Phase, Why: "nothing to observe in this phase"}
	}
	switch {
	case snap.State.Active():
		c, err := move("observe", r, PhaseAccepted, now)
		if err != nil {
			return Record{}, FollowNone, err
		}
		c.apply(snap)
		since := now
		if c.Timestamps.Accepted != nil {
			since = *c.Timestamps.Accepted
		}
		if (b.MaxObservations > 0 && c.Counters.WindowObservations >= b.MaxObservations) ||
			(b.Polling > 0 && now.Sub(since) >= b.Polling) {
			c.Phase = PhaseStalled
			reason := fmt.Sprintf("polling budget spent after %d observations; remote still %s", c.Counters.WindowObservations, snap.State)
			c.Parked = &ParkedState{Reason: reason, At: now}
			c.LastError = "polling_budget_spent"
			c.Schedule = nil
			return c, FollowReview, nil
		}
		return c, FollowObserve, nil
	case snap.State == RemoteSucceeded:
		c, err := move("observe", r, PhaseSucceeded, now)
		if err != nil {
			return Record{}, FollowNone, err
		}
		c.apply(snap)
		c.Parked = nil
		return c, FollowDeliver, nil
	case snap.State == RemoteFailed || snap.State == RemoteCanceled:
		c, err := move("observe", r, PhaseFailed, now)
		if err != nil {
			return Record{}, FollowNone, err
		}
		c.Timestamps.RemoteFailed = &now
		c.Parked = nil
		return observeFailed(c, snap, now, b)
	}
	return Record{}, FollowNone, &TransitionError{Op: "observe", From: r.Phase, To: r.Phase, Why: fmt.Sprintf("unknown remote state %q", snap.State)}
}

// observeFailed settles a failed operation when the refund is settled or
// nothing was charged; otherwise it keeps observing within the accounting
// budget, then parks the record for an accounting review. A failed state
// alone never settles it (reconcile-jobs --fail charges without refund).
func observeFailed(r Record, snap Snapshot, now time.Time, b Budgets) (Record, Follow, error) {
	c, err := move("observe", r, PhaseFailed, now)
	if err != nil {
		return Record{}, FollowNone, err
	}
	c.apply(snap)
	if snap.State.Active() || snap.State == RemoteSucceeded {
		// Genace said failed once (a 5xx envelope); a later read cannot
		// revive the job. Keep the record failed and flag it.
		c.LastError = "remote_state_contradicts_failure"
	}
	if snap.Credits.Charged == 0 && snap.Credits.Reserved == 0 || snap.Credits.RefundState == RefundSettled {
		c.Settlement = SettlementSettled
		c.Schedule = nil
		c.Parked = nil
		return c, FollowNone, nil
	}
	c.Settlement = SettlementUnresolved
	since := now
	if c.Timestamps.RemoteFailed != nil {
		since = *c.Timestamps.RemoteFailed
	}
	if b.Accounting > 0 && now.Sub(since) >= b.Accounting {
		reason := fmt.Sprintf("refund_state %s with %d charged after the accounting budget", snap.Credits.RefundState, snap.Credits.Charged)
		c.Parked = &ParkedState{Reason: reason, At: now}
		c.LastError = CategoryRefundUnresolved
		c.Schedule = nil
		return c, FollowReview, nil
	}
	return c, FollowObserve, nil
}

// CategoryRefundUnresolved is the LastError of a failed operation parked
// because Genace did not settle its refund within the accounting budget:
// only that park is closed by a settlement outside Genace.
const CategoryRefundUnresolved = "refund_unresolved"

func (c *Record) apply(snap Snapshot) {
	s := snap
	c.Remote = &s
	c.Counters.ReadFailures = 0
	c.Counters.Observations++
	c.Counters.WindowObservations++
}

// ResumeObservation is an operator's replay of a stalled or parked
// operation whose job id is known: observe it again with a fresh budget.
func ResumeObservation(r Record, now time.Time) (Record, error) {
	if r.RemoteJobID == "" {
		return Record{}, &TransitionError{Op: "resume", From: r.Phase, To: r.Phase, Why: "no job id"}
	}
	to := r.Phase
	if r.Phase == PhaseStalled {
		to = PhaseAccepted
	}
	if to != PhaseAccepted && to != PhaseFailed {
		return Record{}, &TransitionError{Op: "resume", From: r.Phase, To: to}
	}
	c, err := move("resume", r, to, now)
	if err != nil {
		return Record{}, err
	}
	c.Parked = nil
	c.Counters.WindowObservations = 0
	// A resumed observation starts a fresh failure budget: the operator
	// replays once the cause has cleared, and one more failed read must
	// not park it again at once.
	c.Counters.ReadFailures = 0
	if to == PhaseAccepted {
		c.Timestamps.Accepted = &now
	} else {
		c.Timestamps.RemoteFailed = &now
	}
	return c, nil
}

// RecordDelivery notes one stored output. Storing the same output again
// (same index and checksum) is a no-op; a different checksum is refused.
func RecordDelivery(r Record, d Delivery, now time.Time) (Record, bool, error) {
	if prev, ok := r.Delivered(d.Index); ok {
		if prev.SHA256 == d.SHA256 && prev.Key == d.Key {
			return r, false, nil
		}
		return Record{}, false, &TransitionError{Op: "deliver", From: r.Phase, To: r.Phase,
			Why: fmt.Sprintf("output %d already delivered with another checksum", d.Index)}
	}
	c, err := move("deliver", r, PhaseSucceeded, now)
	if err != nil {
		return Record{}, false, err
	}
	c.Deliveries = append(c.Deliveries, d)
	return c, true, nil
}

// CompleteDelivery moves a succeeded operation whose outputs are all
// stored to delivered.
func CompleteDelivery(r Record, now time.Time) (Record, error) {
	want := 0
	if r.Remote != nil {
		want = len(r.Remote.Outputs)
	}
	for i := 0; i < want; i++ {
		if _, ok := r.Delivered(i); !ok {
			return Record{}, &TransitionError{Op: "complete", From: r.Phase, To: PhaseDelivered, Why: fmt.Sprintf("output %d of %d not stored", i, want)}
		}
	}
	c, err := move("complete", r, PhaseDelivered, now)
	if err != nil {
		return Record{}, err
	}
	c.Schedule = nil
	c.Parked = nil
	return c, nil
}

// ReadThrottled records a step Genace rate-limited (429): the phase, the
// failure count and the last error stay, and the caller schedules the
// next attempt after Retry-After with the write, so the sweep does not
// re-arm the operation early. A rate limit is not the job's failure.
func ReadThrottled(r Record, now time.Time) (Record, error) {
	if r.RemoteJobID == "" {
		return Record{}, &TransitionError{Op: "read-throttled", From: r.Phase, To: r.Phase, Why: "no job id"}
	}
	return move("read-throttled", r, r.Phase, now)
}

// ReadFailed records a failed GET of the job (a transient Genace error):
// the phase stays, the failure is counted, and the caller schedules the
// next attempt with the write, so the chain survives the outage.
func ReadFailed(r Record, category string, now time.Time) (Record, error) {
	if r.RemoteJobID == "" {
		return Record{}, &TransitionError{Op: "read-failed", From: r.Phase, To: r.Phase, Why: "no job id"}
	}
	c, err := move("read-failed", r, r.Phase, now)
	if err != nil {
		return Record{}, err
	}
	c.Counters.ReadFailures++
	c.LastError = category
	return c, nil
}
