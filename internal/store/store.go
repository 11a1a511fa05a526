// Package store persists operation records, audit entries and review
// records with revision-guarded writes. Two implementations, DynamoDB and
// an embedded bbolt file, pass one conformance suite (storetest).
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
)

// Sentinels callers branch on.
var (
	// ErrNotFound: no such operation or review.
	ErrNotFound = errors.New("not found")
	// ErrExists: Create found the operation already there.
	ErrExists = errors.New("already exists")
	// ErrConflict: the write's expected revision is not the current one,
	// or the record is terminal. A *ConflictError carries the current item.
	ErrConflict = errors.New("revision conflict")
)

// ConflictError is returned by conditional writes that lost; Current is the
// item as it stands, read atomically with the failed condition.
type ConflictError struct {
	OperationID string
	Expected    int64
	Current     *operation.Record
}

func (e *ConflictError) Error() string {
	if e.Current == nil {
		return fmt.Sprintf("operation %s: expected revision %d: %v (item missing)", e.OperationID, e.Expected, ErrConflict)
	}
	if e.Current.Terminal() {
		return fmt.Sprintf("operation %s: expected revision %d, current %d is terminal (%s): %v",
			e.OperationID, e.Expected, e.Current.Revision, e.Current.Phase, ErrConflict)
	}
	return fmt.Sprintf("operation %s: expected revision %d, current %d: %v", e.OperationID, e.Expected, e.Current.Revision, ErrConflict)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Store is the full persistence contract. Handlers declare the narrower
// interfaces they use.
type Store interface {
	// Create writes a new record at revision 1, if absent (else ErrExists).
	Create(ctx context.Context, rec operation.Record) (operation.Record, error)
	// Get reads the current record (ErrNotFound if absent).
	Get(ctx context.Context, operationID string) (operation.Record, error)
	// Update writes rec as revision expected+1 only if the stored revision
	// is expected and the stored record is not terminal; otherwise it
	// returns a *ConflictError with the current record. It returns the
	// record as written.
	Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error)
	// UpdateWithAudit is Update plus the audit entry (keyed by the
	// resulting revision) in one transaction: both or neither.
	UpdateWithAudit(ctx context.Context, rec operation.Record, expected int64, entry review.AuditEntry) (operation.Record, error)
	// Audit lists an operation's audit entries, oldest first.
	Audit(ctx context.Context, operationID string) ([]review.AuditEntry, error)
	// PutReview writes a review if none has its ID; it reports whether it
	// wrote. Writing the same review twice is a no-op.
	PutReview(ctx context.Context, r review.Record) (bool, error)
	// GetReview reads one review (ErrNotFound if absent).
	GetReview(ctx context.Context, id string) (review.Record, error)
	// OpenReviews lists open reviews, oldest first.
	OpenReviews(ctx context.Context) ([]review.Record, error)
	// CloseReview marks a review closed by an operator; closing a closed
	// review is a no-op.
	CloseReview(ctx context.Context, id, by string, at time.Time) error
	// ResolveReview is CloseReview with the reason recorded: the evidence
	// that settled what the review was about. Closing a closed review is a
	// no-op that keeps the first closer, time and reason.
	ResolveReview(ctx context.Context, id, by, reason string, at time.Time) error
	// OpenReviewsOf lists one operation's open reviews, oldest first. It
	// reads what PutReview filed under the operation, consistently (not
	// the open-review index), so a review written before the call is
	// seen; its cost follows the operation's own reviews, not all of them.
	OpenReviewsOf(ctx context.Context, operationID string) ([]review.Record, error)
	// Due lists active records whose DueAt is at or before t, from the
	// sparse index, at most limit (0 = no limit), earliest first.
	Due(ctx context.Context, t time.Time, limit int) ([]operation.Record, error)
	// Close releases the store's resources.
	Close() error
}
