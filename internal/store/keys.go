package store

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
)

// sortableTimeLayout is RFC 3339 in UTC with all nine fractional digits
// kept, so every formatted time has the same width and byte order equals
// time order (time.RFC3339Nano trims trailing zeros and would not).
const sortableTimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// sortableTime formats t for use in a sort key.
func sortableTime(t time.Time) string { return t.UTC().Format(sortableTimeLayout) }

// indexKey is the sort key of the Due and open-review indexes: the time,
// then the id, so equal times still give distinct, stable keys.
func indexKey(t time.Time, id string) string { return sortableTime(t) + "#" + id }

// indexBound is the greatest index key of anything at or before t: U+FFFF
// sorts (as UTF-8 bytes) after every character an id is made of.
func indexBound(t time.Time) string { return sortableTime(t) + "#\uffff" }

// statusShard spreads active operations over StatusShards index partitions
// (FNV-1a of the id) so a busy table has no single hot index key.
func statusShard(operationID string) int {
	h := fnv.New32a()
	h.Write([]byte(operationID)) // hash.Hash.Write never fails
	return int(h.Sum32() % StatusShards)
}

// auditKey is the zero-padded resulting revision: 20 digits hold any
// int64, so byte order equals numeric order (revision 10 after 9).
func auditKey(revision int64) string { return fmt.Sprintf("%020d", revision) }

// checkCreate validates a record for Create and returns it at revision 1,
// stamped with ctx's writer, its times in UTC (whatever the clock's zone,
// a record is persisted in one).
func checkCreate(ctx context.Context, rec operation.Record) (operation.Record, error) {
	rec = rec.UTC()
	rec.Writer = writerOf(ctx)
	if rec.OperationID == "" {
		return rec, errors.New("create: empty operation id")
	}
	if rec.Revision != 0 && rec.Revision != 1 {
		return rec, fmt.Errorf("create %s: revision %d: a new record starts at revision 1", rec.OperationID, rec.Revision)
	}
	rec.Revision = 1
	return rec, nil
}

// checkUpdate validates an Update and returns rec at revision expected+1,
// stamped with ctx's writer, its times in UTC. It is before the write, so
// the record an own write is recognised by (ownWrite) is the one stored.
func checkUpdate(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	rec = rec.UTC()
	rec.Writer = writerOf(ctx)
	if rec.OperationID == "" {
		return rec, errors.New("update: empty operation id")
	}
	if expected < 1 {
		return rec, fmt.Errorf("update %s: expected revision %d: revisions start at 1", rec.OperationID, expected)
	}
	rec.Revision = expected + 1
	return rec, nil
}

// checkAudit validates an UpdateWithAudit: the entry must belong to the
// same operation and be keyed by the revision the update produces, since
// that key is what makes a second entry for one revision impossible.
func checkAudit(ctx context.Context, rec operation.Record, expected int64, entry review.AuditEntry) (operation.Record, review.AuditEntry, error) {
	rec, err := checkUpdate(ctx, rec, expected)
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

// sortReviews orders reviews as the open-review index does: oldest first,
// then by id.
func sortReviews(rs []review.Record) {
	slices.SortFunc(rs, func(a, b review.Record) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}
