// Package store persists operation records, audit entries and review
// records with revision-guarded writes. Two implementations, DynamoDB and
// an embedded bbolt file, pass one conformance suite (storetest).
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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
	// OperationReviews lists an operation's reviews, open and closed,
	// oldest first: a closed review may still be the only place a job id
	// was kept.
	OperationReviews(ctx context.Context, operationID string) ([]review.Record, error)
	// JobRefs lists every operation record, review and audit entry that
	// names jobID, of any operation: who holds or claims that job.
	JobRefs(ctx context.Context, jobID string) ([]JobRef, error)
	// Due lists active records whose DueAt is at or before t, from the
	// sparse index, at most limit (0 = no limit), earliest first.
	Due(ctx context.Context, t time.Time, limit int) ([]operation.Record, error)
	// Close releases the store's resources.
	Close() error
}

// RefKind says what kind of item a JobRef found.
type RefKind string

// Kinds of items that name a job.
const (
	// RefRecord: the operation record holds the job (remote_job_id).
	RefRecord RefKind = "record"
	// RefReview: a review, open or closed, names the job.
	RefReview RefKind = "review"
	// RefAudit: an operator's audit entry attached the job.
	RefAudit RefKind = "audit"
)

// JobRef is one stored item that names a Genace job, and the operation it
// belongs to.
type JobRef struct {
	JobID       string  `json:"job_id"`
	OperationID string  `json:"operation_id"`
	Kind        RefKind `json:"kind"`
	// Key names the item within its kind: the review's id, or the audit
	// entry's resulting revision; empty for the record.
	Key string `json:"key,omitempty"`
}

// sortJobRefs orders refs by operation, kind and key, so both stores
// list them alike.
func sortJobRefs(refs []JobRef) {
	slices.SortFunc(refs, func(a, b JobRef) int {
		return cmp.Or(cmp.Compare(a.OperationID, b.OperationID), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Key, b.Key))
	})
}

// sortReviews orders reviews oldest first (then by id), as OpenReviews
// lists them.
func sortReviews(rs []review.Record) {
	slices.SortFunc(rs, func(a, b review.Record) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
}
