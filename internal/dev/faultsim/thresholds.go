package faultsim

import (
	"fmt"
	"math"

	"github.com/genjobs/genjobs/internal/operation"
)

// Operators are asked only when they must be: besides its invariants, a
// run keeps two figures at or under these bounds (Result.Thresholds).
const (
	// MaxUncertainPerUnknown bounds Result.LeftUncertain per
	// Result.UnknownSubmissions: only a genuinely unknown submission may
	// leave its operation uncertain.
	MaxUncertainPerUnknown = 1.00
	// MaxReviewsOfTerminal bounds the reviews left open on operations that
	// ended terminal.
	MaxReviewsOfTerminal = 0
)

// EvidenceAfterOperator says whether an uncertain episode an operator
// closed was resolved by evidence all the same: the definite answer to
// the POST of the claiming message (claim) reached its live handler
// (answered), before or after the operator's write. The operator then
// only raced the evidence, which is not the handlers' doing.
func EvidenceAfterOperator(claim, answered string) bool {
	return claim != "" && answered == claim
}

// SecondJobReview says whether an open review of a terminal operation rec
// names a second job Genace really created for it (jobOperation: the
// operation Genace created jobID for), which only an operator can
// settle: such a review must stay open.
func SecondJobReview(rec *operation.Record, jobID, jobOperation string) bool {
	return jobID != "" && jobID != rec.RemoteJobID && jobOperation == rec.OperationID
}

// UncertainPerUnknown is LeftUncertain per UnknownSubmissions (0 when
// neither, +Inf when only the first).
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
