package schedule

import (
	"math"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
)

// Observation adapts the policies to what the observe handler asks: the
// long poll, the next delay for a record, the accounting delay, the delay
// after a failed read, and the budgets that bound automation per model.
type Observation struct {
	Policies Policies
	// Budgets per model; a model without an entry uses DefaultBudgets.
	Budgets        map[string]operation.Budgets
	DefaultBudgets operation.Budgets
	// Reads paces retries after failed GETs.
	Reads Backoff
	// Rand supplies jitter; nil uses the global source.
	Rand func() float64
}

// NewObservation returns the adapter with default budgets and read retries.
func NewObservation(ps Policies) *Observation {
	return &Observation{
		Policies: ps, DefaultBudgets: operation.DefaultBudgets,
		Reads: Backoff{Base: 5 * time.Second, Cap: 5 * time.Minute, Multiplier: 2, Jitter: 0.2},
	}
}

// LongPoll is the model's long-poll window.
func (o *Observation) LongPoll(model string) time.Duration { return o.Policies.For(model).LongPoll }

// Next is the delay before the next observation of an active job. The
// backoff step is derived from the job's age past Immediate: with delays
// growing geometrically, a job that has been backing off for elapsed has
// had about log_m(elapsed·(m−1)/Base + 1) backed-off observations. That
// keeps the record free of yet another counter.
func (o *Observation) Next(rec *operation.Record, now time.Time) time.Duration {
	p := o.Policies.For(rec.Model)
	since := time.Duration(0)
	if rec.Timestamps.Accepted != nil {
		since = now.Sub(*rec.Timestamps.Accepted)
	}
	return p.Next(since, backoffStep(since-p.Immediate, p.Base, p.Multiplier), o.Rand)
}

// Accounting is the delay before re-reading a failed job's refund.
func (o *Observation) Accounting(rec *operation.Record, now time.Time) time.Duration {
	b := o.Policies.Accounting
	since := time.Duration(0)
	if rec.Timestamps.RemoteFailed != nil {
		since = now.Sub(*rec.Timestamps.RemoteFailed)
	}
	return b.Delay(backoffStep(since, b.Base, b.Multiplier), o.Rand)
}

// ReadRetry is the delay after the n-th consecutive failed read (n ≥ 1).
func (o *Observation) ReadRetry(n int) time.Duration { return o.Reads.Delay(n-1, o.Rand) }

// Throttled is the delay after a GET Genace answered 429 with
// Retry-After after: WaitOut, with the read retries' jitter, within
// Longest.
func (o *Observation) Throttled(after time.Duration) time.Duration {
	return WaitOut(after, o.Reads.Jitter, o.Longest(), o.Rand)
}

// Longest is the longest delay Next, Accounting or ReadRetry can return:
// the largest Cap among the policies (the default and every model's), the
// accounting backoff and the read retries. Every delay stays within its
// cap, jitter included, so this alone says whether an observation can
// need EventBridge Scheduler.
func (o *Observation) Longest() time.Duration {
	longest := max(o.Policies.Default.Cap, o.Policies.Accounting.Cap, o.Reads.Cap)
	for _, p := range o.Policies.Models {
		longest = max(longest, p.Cap)
	}
	return longest
}

// BudgetsFor returns the model's budgets.
func (o *Observation) BudgetsFor(model string) operation.Budgets {
	if b, ok := o.Budgets[model]; ok {
		return b
	}
	return o.DefaultBudgets
}

func backoffStep(elapsed, base time.Duration, m float64) int {
	if elapsed <= 0 || base <= 0 {
		return 0
	}
	if m <= 1 {
		return int(elapsed / base)
	}
	n := math.Log(float64(elapsed)*(m-1)/float64(base)+1) / math.Log(m)
	return int(math.Floor(n))
}
