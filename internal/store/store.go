// Package store is the persistence contract for operation records, audit
// entries and review records, with revision-guarded writes: the Store
// interface, its errors, the writer identity, and the few rules and keys
// both backends share so they cannot drift. The backends live apart, so
// what links this package links neither: store/dynamo (DynamoDB, the
// deployed one) and store/bolt (an embedded bbolt file, for local runs and
// simulations). Both pass one conformance suite (store/storetest).
package store

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
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
	// returns a *ConflictError with the current record. It stamps rec
	// with ctx's writer (WithWriter) and returns the record as written.
	// A write whose record already stands at expected+1, field for field
	// and with the same writer, is reported as written: it is this write,
	// applied by an attempt whose answer was lost (see OwnWrite).
	Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error)
	// UpdateWithAudit is Update plus the audit entry (keyed by the
	// resulting revision) in one transaction: both or neither. It counts
	// as already written only if the stored entry is this one too.
	UpdateWithAudit(ctx context.Context, rec operation.Record, expected int64, entry review.AuditEntry) (operation.Record, error)
	// AppendAudit writes the audit entry of a decision that changes no
	// record (acknowledging a terminal one, which is never written
	// again): entry.Revision is the revision the decision was made on,
	// and the write happens only if the record still stands there
	// (terminal or not), else a *ConflictError with the current record.
	// It never touches the record. Entries of one revision are kept in
	// the order of their times, after the entry that produced that
	// revision; writing the same entry twice is a no-op, and another
	// entry with the same revision and time is ErrExists.
	AppendAudit(ctx context.Context, entry review.AuditEntry) error
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
	// OperationReviews lists an operation's reviews, open and closed,
	// oldest first: a closed review may still be the only place a job id
	// was kept.
	OperationReviews(ctx context.Context, operationID string) ([]review.Record, error)
	// JobRefs lists every operation record, review and audit entry that
	// names jobID, of any operation: who holds or claims that job.
	JobRefs(ctx context.Context, jobID string) ([]JobRef, error)
	// SetEvent stores rec.Event (sent, or due again later) on the record
	// that stands at rec.Revision and owes the event of rec.Event.Revision,
	// terminal or not, without a new revision: the record is otherwise
	// unchanged, and leaves the sweep's index when nothing else keeps it
	// there. rec is the record as read or written (the index is computed
	// from it). Otherwise it returns a *ConflictError with the current
	// record. It returns the record as stored.
	SetEvent(ctx context.Context, rec operation.Record) (operation.Record, error)
	// Due lists the records whose index time (operation.Record.IndexDue:
	// an active record's next action, an unsent completion event) is at
	// or before t, from the sparse index, at most limit (0 = no limit),
	// earliest first.
	Due(ctx context.Context, t time.Time, limit int) ([]operation.Record, error)
	// Close releases the store's resources.
	Close() error
}

type writerKey struct{}

// WithWriter names who writes with ctx: one worker's handling of one
// receive of a message, one sweep run. The name must differ between two
// writers that may write at the same time. Create, Update and
// UpdateWithAudit stamp it on the record (operation.Record.Writer), which
// is how a writer that sends a write again knows it as its own.
func WithWriter(ctx context.Context, writer string) context.Context {
	return context.WithValue(ctx, writerKey{}, writer)
}

func writerOf(ctx context.Context) string {
	w, _ := ctx.Value(writerKey{}).(string)
	return w
}

// OwnWrite decides, for a conditional write that err says lost (a
// *ConflictError), whether the record in its way is the write itself,
// applied by an earlier attempt whose answer was lost: DynamoDB applied
// the Put, the response never arrived, and the SDK's retry (or the
// caller, after a timeout) sent the same write again, whose condition
// then failed on it. Both stores rely on this one check, so no caller
// takes a write of its own for a lost race.
//
// Own means: the current record is rec at expected+1 (rec.Revision),
// equal in every field, the writer stamped from the context included.
// They are compared in one encoding, so that what a store's round trip
// changes (a time's zone object, a nil against an empty list) cannot
// tell them apart, while any field that differs, even by a nanosecond,
// can. With entry (UpdateWithAudit), the audit entry stored for that
// revision must equal it too. A write without a writer is never own: two
// workers that received one message at the same (simulated) instant can
// compute identical records, and taking the other's write for one's own
// would fork the chain or let two claimants POST. With writers, identical
// content from two writers cannot happen.
//
// audit reads the operation's audit entries; it is called only when the
// record matches and an entry must be checked. It is exported for the
// backends; a caller of a Store never needs it.
func OwnWrite(ctx context.Context, rec operation.Record, entry *review.AuditEntry, err error,
	audit func(context.Context, string) ([]review.AuditEntry, error)) (bool, error) {
	var ce *ConflictError
	if rec.Writer == "" || !errors.As(err, &ce) || ce.Current == nil || ce.Current.Revision != rec.Revision {
		return false, nil
	}
	cur := ce.Current.Clone()
	if cur.Event != nil && rec.Event != nil && cur.Event.Revision == rec.Event.Revision {
		// Its event sent (or deferred) since, by SetEvent: still this write.
		cur.Event = rec.Event
	}
	if !sameEncoding(rec, cur) {
		return false, nil
	}
	if entry == nil {
		return true, nil
	}
	entries, aerr := audit(ctx, rec.OperationID)
	if aerr != nil {
		return false, fmt.Errorf("update %s with audit: the record at revision %d is this write's, and reading its audit entry failed: %w",
			rec.OperationID, rec.Revision, aerr)
	}
	for _, e := range entries {
		if e.Revision == entry.Revision {
			return sameEncoding(*entry, e), nil
		}
	}
	return false, nil
}

// SameAuditEntry reports whether a and b are one audit entry, compared as
// OwnWrite compares (for a store that finds an entry where it would write
// one).
func SameAuditEntry(a, b review.AuditEntry) bool { return sameEncoding(a.UTC(), b.UTC()) }

// sameEncoding reports whether a and b encode to the same JSON: equal
// values, with times compared as the instants and offsets they denote.
func sameEncoding[T any](a, b T) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
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

// SortJobRefs orders refs by operation, kind and key, so both stores
// list them alike.
func SortJobRefs(refs []JobRef) {
	slices.SortFunc(refs, func(a, b JobRef) int {
		return cmp.Or(cmp.Compare(a.OperationID, b.OperationID), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Key, b.Key))
	})
}

// OpenOnly keeps the open reviews of rs, in order: OpenReviewsOf is
// OperationReviews filtered by it, in both stores.
func OpenOnly(rs []review.Record) []review.Record {
	var out []review.Record
	for _, r := range rs {
		if r.Open {
			out = append(out, r)
		}
	}
	return out
}
