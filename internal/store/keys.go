package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
)

// What both backends must agree on, in one place: the sort keys of their
// indexes, and the checks and stamps every write gets before it is sent.
// Exported for store/dynamo and store/bolt; callers of a Store need none
// of it.

// sortableTimeLayout is RFC 3339 in UTC with all nine fractional digits
// kept, so every formatted time has the same width and byte order equals
// time order (time.RFC3339Nano trims trailing zeros and would not).
const sortableTimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// SortableTime formats t for use in a sort key.
func SortableTime(t time.Time) string { return t.UTC().Format(sortableTimeLayout) }

// IndexKey is the sort key of the Due and open-review indexes: the time,
// then the id, so equal times still give distinct, stable keys.
func IndexKey(t time.Time, id string) string { return SortableTime(t) + "#" + id }

// IndexBound is the greatest index key of anything at or before t: U+FFFF
// sorts (as UTF-8 bytes) after every character an id is made of.
func IndexBound(t time.Time) string { return SortableTime(t) + "#\uffff" }

// AuditKey is the zero-padded resulting revision: 20 digits hold any
// int64, so byte order equals numeric order (revision 10 after 9).
func AuditKey(revision int64) string { return fmt.Sprintf("%020d", revision) }

// AppendedAuditKey keys an entry AppendAudit writes: after AuditKey of
// the revision it is about (the entry that produced that revision sorts
// first), before the next revision's, in the order of its time.
func AppendedAuditKey(revision int64, at time.Time) string {
	return AuditKey(revision) + "#" + SortableTime(at)
}

// PrepareAppendAudit validates an AppendAudit entry and returns it in UTC:
// it names an operation and a revision, records no change of phase or
// revision, and attaches no job (only a record update can).
func PrepareAppendAudit(entry review.AuditEntry) (review.AuditEntry, error) {
	entry = entry.UTC()
	switch {
	case entry.OperationID == "":
		return entry, errors.New("append audit: empty operation id")
	case entry.Revision < 1:
		return entry, fmt.Errorf("append audit %s: revision %d: revisions start at 1", entry.OperationID, entry.Revision)
	case entry.FromRevision != entry.Revision || entry.FromPhase != entry.ToPhase:
		return entry, fmt.Errorf("append audit %s: the entry records a change (r%d %s → r%d %s); a change is written with UpdateWithAudit",
			entry.OperationID, entry.FromRevision, entry.FromPhase, entry.Revision, entry.ToPhase)
	case entry.RemoteJobID != "":
		return entry, fmt.Errorf("append audit %s: the entry attaches job %s; only UpdateWithAudit can", entry.OperationID, entry.RemoteJobID)
	case entry.At.IsZero():
		return entry, fmt.Errorf("append audit %s: the entry has no time", entry.OperationID)
	}
	return entry, nil
}

// PrepareCreate validates a record for Create and returns it at revision
// 1, stamped with ctx's writer, its times in UTC (whatever the clock's
// zone, a record is persisted in one).
func PrepareCreate(ctx context.Context, rec operation.Record) (operation.Record, error) {
	rec = rec.UTC()
	rec.Writer = writerOf(ctx)
	if rec.OperationID == "" {
		return rec, errors.New("create: empty operation id")
	}
	if rec.Revision != 0 && rec.Revision != 1 {
		return rec, fmt.Errorf("create %s: revision %d: a new record starts at revision 1", rec.OperationID, rec.Revision)
	}
	rec.Revision = 1
	rec.Event = operation.OwedEvent(rec)
	return rec, nil
}

// PrepareUpdate validates an Update and returns rec at revision
// expected+1, stamped with ctx's writer, its times in UTC, with the
// completion event the write owes (operation.OwedEvent): every write of
// every writer passes here, so the event is recorded with the transition
// that causes it. It is before the write, so the record an own write is
// recognised by (OwnWrite) is the one stored.
func PrepareUpdate(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	rec = rec.UTC()
	rec.Writer = writerOf(ctx)
	if rec.OperationID == "" {
		return rec, errors.New("update: empty operation id")
	}
	if expected < 1 {
		return rec, fmt.Errorf("update %s: expected revision %d: revisions start at 1", rec.OperationID, expected)
	}
	rec.Revision = expected + 1
	rec.Event = operation.OwedEvent(rec)
	return rec, nil
}

// PrepareSetEvent validates a SetEvent and returns rec in UTC: it names an
// operation and a revision, and carries the event to store.
func PrepareSetEvent(rec operation.Record) (operation.Record, error) {
	rec = rec.UTC()
	switch {
	case rec.OperationID == "":
		return rec, errors.New("set event: empty operation id")
	case rec.Revision < 1:
		return rec, fmt.Errorf("set event %s: revision %d: revisions start at 1", rec.OperationID, rec.Revision)
	case rec.Event == nil:
		return rec, fmt.Errorf("set event %s: the record owes no event", rec.OperationID)
	}
	return rec, nil
}

// PrepareAudit validates an UpdateWithAudit as PrepareUpdate does, and
// the entry: it must belong to the same operation and be keyed by the
// revision the update produces, since that key is what makes a second
// entry for one revision impossible. Empty fields are filled in.
func PrepareAudit(ctx context.Context, rec operation.Record, expected int64, entry review.AuditEntry) (operation.Record, review.AuditEntry, error) {
	rec, err := PrepareUpdate(ctx, rec, expected)
	if err != nil {
		return rec, entry, err
	}
	entry = entry.UTC()
	switch entry.OperationID {
	case "":
		entry.OperationID = rec.OperationID
	case rec.OperationID:
	default:
		return rec, entry, fmt.Errorf("update %s with audit: entry is for operation %s", rec.OperationID, entry.OperationID)
	}
	switch entry.Revision {
	case 0:
		entry.Revision = rec.Revision
	case rec.Revision:
	default:
		return rec, entry, fmt.Errorf("update %s with audit: entry revision %d, but the update produces revision %d",
			rec.OperationID, entry.Revision, rec.Revision)
	}
	return rec, entry, nil
}

// SortReviews orders reviews as the open-review index does: oldest first,
// then by id.
func SortReviews(rs []review.Record) {
	slices.SortFunc(rs, func(a, b review.Record) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}
