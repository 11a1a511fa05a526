package faultsim

import (
	"fmt"
	"math"

	"github.com/genjobs/genjobs/internal/operation"
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

// EvidenceAfterOperator says whether an uncertain episode that an
// operator closed was resolved by evidence all the same: claim is the
// message whose claim the episode was uncertain about, answered the
// message whose POST's definite answer (a job id, a rejection, a 429)
// reached its live handler, before or after the operator's write. The
// claimant applies that answer whatever the record now is, or finds it
// already there, so the episode never needed the operator: the operator
// raced the evidence, as when the same answer lands first. Counting it as
// left uncertain would charge the operator's race to the handlers. Any
// other message's answer (a new dispatch's after "confirmed not
// submitted") says nothing about the claim's POST, and what the operator
// writes is no evidence.
func EvidenceAfterOperator(claim, answered string) bool {
	return claim != "" && answered == claim
}

// SecondJobReview says whether an open review of a terminal operation rec
// names a second job Genace really created for it (jobOperation is the
// operation Genace created jobID for): a job the record does not hold,
// perhaps charged, which only an operator can settle. Such a review must
// stay open; it is not counted among the reviews of terminal operations
// (Result.SecondJobReviews).
func SecondJobReview(rec *operation.Record, jobID, jobOperation string) bool {
	return jobID != "" && jobID != rec.RemoteJobID && jobOperation == rec.OperationID
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
