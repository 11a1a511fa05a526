package faultsim

import (
	"fmt"
	"math"
)

// Operators are asked only when they must be. A run keeps two figures at
// or under these bounds besides its invariants; `genjobs soak` and
// TestSimulation fail when it does not (Result.Thresholds).
const (
	// MaxUncertainPerUnknown bounds the operations left uncertain
	// (Result.LeftUncertain: made uncertain by automation and resolved by
	// no later evidence, before or after an operator's reconciliation,
	// see EvidenceAfterOperator, so an operator must reconcile them) per
	// submission whose outcome was genuinely
	// unknown (Result.UnknownSubmissions): each such submission may
	// rightly leave its operation uncertain, nothing else may (a definite
	// answer that arrives after a duplicate marked the claim uncertain,
	// a write of our own taken for someone else's, say).
	MaxUncertainPerUnknown = 1.00
	// MaxReviewsOfTerminal bounds the reviews left open on operations that
	// ended terminal: late evidence that resolves an operation closes its
	// review.
	MaxReviewsOfTerminal = 0
)

// EvidenceAfterOperator says whether a write resolves, as late evidence,
// an uncertain episode that an operator closed before the evidence came:
// claim is the message whose claim the episode was uncertain about,
// written the message the write applied. The claim's own message writes
// after an operator's reconciliation only to apply its POST's definite
// answer (the outcome of the only POST, applied whatever the record now
// is), so such a write is the evidence the episode waited for: the
// operator raced it and was not needed, as when the same answer lands
// first. Counting that episode as left uncertain would charge the
// operator's race to the handlers. Writes of any other message (the
// observation chain the operator's reconciliation started, a new
// dispatch after "confirmed not submitted") are no evidence about it;
// nor is anything the operator writes.
func EvidenceAfterOperator(claim, written string, byOperator bool) bool {
	return !byOperator && claim != "" && written == claim
}

// UncertainPerUnknown is the number of operations left uncertain per
// submission whose outcome was genuinely unknown: 0 when there are
// neither, +Inf when operations were left uncertain without any.
func (r *Result) UncertainPerUnknown() float64 {
	n := r.LeftUncertain
	switch {
	case n == 0:
		return 0
	case r.UnknownSubmissions == 0:
		return math.Inf(1)
	}
	return float64(n) / float64(r.UnknownSubmissions)
}

// Thresholds returns one line for each figure above its bound (none: the
// run asked operators only what it had to).
func (r *Result) Thresholds() []string {
	var out []string
	if q := r.UncertainPerUnknown(); q > MaxUncertainPerUnknown {
		out = append(out, fmt.Sprintf("%d operations left uncertain per %d submissions of genuinely unknown outcome: %.2f, above %.2f",
			r.LeftUncertain, r.UnknownSubmissions, q, float64(MaxUncertainPerUnknown)))
	}
	if r.ReviewsOfTerminal > MaxReviewsOfTerminal {
		out = append(out, fmt.Sprintf("%d reviews left open on operations that ended terminal, above %d", r.ReviewsOfTerminal, MaxReviewsOfTerminal))
	}
	return out
}
