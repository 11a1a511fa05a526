// Package bolt is the store.Store in one embedded bbolt file, for local
// runs, tests and simulations. It is never deployed: the Lambdas use
// store/dynamo, and this package is what keeps bbolt out of their build.
package bolt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"
	bbolterrors "go.etcd.io/bbolt/errors"

	"github.com/genjobs/genjobs/internal/groupcommit"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

// Bucket layout of the bbolt file. Values are JSON; the two index buckets
// use the same sortable keys (<fixed-width UTC time>#<id>) as DynamoDB's
// status index, kept in step with the records in the same transaction.
var (
	// bucketOps: operation id → operation.Record.
	bucketOps = []byte("operations")
	// bucketAudit: operation id → nested bucket of zero-padded resulting
	// revision → review.AuditEntry.
	bucketAudit = []byte("audit")
	// bucketReviews: review id → review.Record.
	bucketReviews = []byte("reviews")
	// bucketOpenReviews: <created>#<id> → id, for open reviews only.
	bucketOpenReviews = []byte("open_reviews")
	// bucketDue: <due>#<id> → id, for records whose IndexDue says ok.
	bucketDue = []byte("due")
	// bucketOpReviews: operation id → nested bucket of review id → empty,
	// for every review that names an operation (OpenReviewsOf).
	bucketOpReviews = []byte("operation_reviews")
	// bucketJobs: job id → nested bucket of encoded JobRef → empty, for
	// every record, review and audit entry that names a job (JobRefs): the
	// embedded store's counterpart of DynamoDB's JobIndex. A job id never
	// leaves an item that names it, so entries are only ever added.
	bucketJobs = []byte("jobs")
)

// LockTimeout is how long Open waits for the file lock, which a running
// process holds for as long as it has the file open.
const LockTimeout = 3 * time.Second

// ErrLocked: another process has the store file open (bbolt's lock was
// not freed within LockTimeout). The command line tells the operator
// which genjobs process that usually is.
var ErrLocked = errors.New("another process has the store open")

// lockedError is the error for path whose lock stayed held for waited.
func lockedError(path string, waited time.Duration, err error) error {
	return fmt.Errorf("open store %s: %w (its lock stayed held for %s): %w", path, ErrLocked, waited, err)
}

// Store is the store.Store in one bbolt file, for local runs. It has the
// same semantics as the DynamoDB store, and every multi-item change
// (record and index, record and audit entry) is one bbolt transaction.
// Unlike DynamoDB's, its indexes are always consistent.
type Store struct {
	db *bbolt.DB
	// groups queues writes for the next commit (group.go).
	groups groupcommit.Group[func(*bbolt.Tx) error]
	// commits counts the write transactions begun (tests read it).
	commits atomic.Int64
	// syncs counts the fdatasyncs of committed transactions (Syncs).
	syncs atomic.Int64
}

// Syncs is how many fdatasyncs b's commits have issued: two per durable
// commit (bbolt flushes the pages, then the meta page), none with NoSync.
// The occasional sync of a file growth is not counted. `genjobs bench`
// divides operations by it.
func (b *Store) Syncs() int64 { return b.syncs.Load() }

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the store file at path. bbolt locks the
// file for one process at a time; if another process holds it, Open gives
// up after LockTimeout with an error that says so.
func Open(path string) (*Store, error) { return openTimeout(path, LockTimeout) }

// Options tunes OpenWith.
type Options struct {
	// NoSync skips the fsync after every committed transaction (and the
	// freelist's write, rebuilt on open). Only for simulations, whose file
	// is a throwaway: a crash of the machine (not of the process) can lose
	// or corrupt the last writes. The store's
	// semantics within one process are unchanged: revision checks, indexes
	// and transactions behave exactly as with Open. It is what lets the
	// fault-injection soak commit a million writes in minutes instead of
	// waiting on the disk for each one.
	NoSync bool
	// readOnly opens the file read-only (OpenExisting).
	readOnly bool
}

// OpenWith is Open with options; OpenWith(path, Options{}) is Open(path).
func OpenWith(path string, opts Options) (*Store, error) {
	return openWith(path, LockTimeout, opts)
}

func openTimeout(path string, lockTimeout time.Duration) (*Store, error) {
	return openWith(path, lockTimeout, Options{})
}

func openWith(path string, lockTimeout time.Duration, opts Options) (*Store, error) {
	o := &bbolt.Options{Timeout: lockTimeout, ReadOnly: opts.readOnly}
	if opts.NoSync {
		// A throwaway file: no fsync at all, no freelist written with
		// every commit (bbolt rebuilds it when the file is opened), and
		// the freelist kept in a hash map, whose allocations do not slow
		// down as a simulation's file grows.
		o.NoSync, o.NoGrowSync, o.NoFreelistSync, o.FreelistType = true, true, true, bbolt.FreelistMapType
	}
	db, err := bbolt.Open(path, 0o600, o)
	if errors.Is(err, bbolterrors.ErrTimeout) {
		return nil, lockedError(path, lockTimeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if opts.readOnly {
		return &Store{db: db}, nil // verify found every bucket
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		for _, name := range [][]byte{bucketOps, bucketAudit, bucketReviews, bucketOpenReviews, bucketDue, bucketOpReviews, bucketJobs} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("bucket %s: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close() // the setup error is the one worth reporting
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// Close implements store.Store.
func (b *Store) Close() error {
	if err := b.db.Close(); err != nil {
		return fmt.Errorf("close store %s: %w", b.db.Path(), err)
	}
	return nil
}

// getRecord reads one record inside tx; ok is false if there is none.
func getRecord(tx *bbolt.Tx, id string) (rec operation.Record, ok bool, err error) {
	raw := tx.Bucket(bucketOps).Get([]byte(id))
	if raw == nil {
		return rec, false, nil
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		return rec, false, fmt.Errorf("decode record: %w", err)
	}
	return rec, true, nil
}

// putRecord writes rec and moves its Due index entry from where old had it
// (nil: a new record) to where rec needs it, in the caller's transaction.
func putRecord(tx *bbolt.Tx, old *operation.Record, rec operation.Record) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode record: %w", err)
	}
	if err := tx.Bucket(bucketOps).Put([]byte(rec.OperationID), raw); err != nil {
		return fmt.Errorf("put record: %w", err)
	}
	if rec.RemoteJobID != "" && (old == nil || old.RemoteJobID != rec.RemoteJobID) {
		if err := indexJob(tx, store.JobRef{JobID: rec.RemoteJobID, OperationID: rec.OperationID, Kind: store.RefRecord}); err != nil {
			return err
		}
	}
	due := tx.Bucket(bucketDue)
	if old != nil {
		if at, ok := old.IndexDue(); ok {
			if err := due.Delete([]byte(store.IndexKey(at, old.OperationID))); err != nil {
				return fmt.Errorf("unindex record: %w", err)
			}
		}
	}
	if at, ok := rec.IndexDue(); ok {
		if err := due.Put([]byte(store.IndexKey(at, rec.OperationID)), []byte(rec.OperationID)); err != nil {
			return fmt.Errorf("index record: %w", err)
		}
	}
	return nil
}

// Create implements store.Store.
func (b *Store) Create(ctx context.Context, rec operation.Record) (operation.Record, error) {
	rec, err := store.PrepareCreate(ctx, rec)
	if err != nil {
		return operation.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return operation.Record{}, fmt.Errorf("create %s: %w", rec.OperationID, err)
	}
	err = b.write(func(tx *bbolt.Tx) error {
		if tx.Bucket(bucketOps).Get([]byte(rec.OperationID)) != nil {
			return decline(store.ErrExists)
		}
		return putRecord(tx, nil, rec)
	})
	if err != nil {
		return operation.Record{}, fmt.Errorf("create %s: %w", rec.OperationID, err)
	}
	return rec, nil
}

// Get implements store.Store.
func (b *Store) Get(ctx context.Context, operationID string) (operation.Record, error) {
	if err := ctx.Err(); err != nil {
		return operation.Record{}, fmt.Errorf("get %s: %w", operationID, err)
	}
	var rec operation.Record
	err := b.read(func(tx *bbolt.Tx) error {
		var ok bool
		var err error
		rec, ok, err = getRecord(tx, operationID)
		if err == nil && !ok {
			err = store.ErrNotFound
		}
		return err
	})
	if err != nil {
		return operation.Record{}, fmt.Errorf("get %s: %w", operationID, err)
	}
	return rec, nil
}

// update is the revision-guarded write; with an entry it also writes the
// audit entry, in the same transaction.
func (b *Store) update(ctx context.Context, rec operation.Record, expected int64, entry *review.AuditEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// A conflict is returned bare, like the DynamoDB store's: its message
	// names the operation.
	return b.write(func(tx *bbolt.Tx) error {
		cur, ok, err := getRecord(tx, rec.OperationID)
		if err != nil {
			return err
		}
		if !ok {
			return decline(&store.ConflictError{OperationID: rec.OperationID, Expected: expected})
		}
		if cur.Revision != expected || cur.Terminal() {
			return decline(&store.ConflictError{OperationID: rec.OperationID, Expected: expected, Current: &cur})
		}
		if entry != nil {
			audit, err := tx.Bucket(bucketAudit).CreateBucketIfNotExists([]byte(rec.OperationID))
			if err != nil {
				return fmt.Errorf("audit bucket: %w", err)
			}
			key := []byte(store.AuditKey(entry.Revision))
			if audit.Get(key) != nil {
				// The bucket was there already: nothing written yet.
				return decline(fmt.Errorf("an audit entry for revision %d already exists: %w", entry.Revision, store.ErrExists))
			}
			raw, err := json.Marshal(entry)
			if err != nil {
				return fmt.Errorf("encode audit entry: %w", err)
			}
			if err := audit.Put(key, raw); err != nil {
				return fmt.Errorf("put audit entry: %w", err)
			}
			if entry.RemoteJobID != "" {
				ref := store.JobRef{JobID: entry.RemoteJobID, OperationID: entry.OperationID, Kind: store.RefAudit, Key: strconv.FormatInt(entry.Revision, 10)}
				if err := indexJob(tx, ref); err != nil {
					return err
				}
			}
		}
		return putRecord(tx, &cur, rec)
	})
}

// Update implements store.Store.
func (b *Store) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	rec, err := store.PrepareUpdate(ctx, rec, expected)
	if err != nil {
		return operation.Record{}, err
	}
	if err := b.update(ctx, rec, expected, nil); err != nil {
		var conflict *store.ConflictError
		if errors.As(err, &conflict) {
			if own, _ := store.OwnWrite(ctx, rec, nil, err, b.Audit); own {
				return rec, nil
			}
			return operation.Record{}, err
		}
		return operation.Record{}, fmt.Errorf("update %s: %w", rec.OperationID, err)
	}
	return rec, nil
}

// UpdateWithAudit implements store.Store.
func (b *Store) UpdateWithAudit(ctx context.Context, rec operation.Record, expected int64, entry review.AuditEntry) (operation.Record, error) {
	rec, entry, err := store.PrepareAudit(ctx, rec, expected, entry)
	if err != nil {
		return operation.Record{}, err
	}
	if err := b.update(ctx, rec, expected, &entry); err != nil {
		var conflict *store.ConflictError
		if errors.As(err, &conflict) {
			own, oerr := store.OwnWrite(ctx, rec, &entry, err, b.Audit)
			switch {
			case oerr != nil:
				return operation.Record{}, oerr
			case own:
				return rec, nil
			}
			return operation.Record{}, err
		}
		return operation.Record{}, fmt.Errorf("update %s with audit: %w", rec.OperationID, err)
	}
	return rec, nil
}

// SetEvent implements store.Store: the check and the write are one
// transaction, which moves the record's index entry as its new event
// needs.
func (b *Store) SetEvent(ctx context.Context, rec operation.Record) (operation.Record, error) {
	rec, err := store.PrepareSetEvent(rec)
	if err != nil {
		return operation.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return operation.Record{}, fmt.Errorf("set event %s: %w", rec.OperationID, err)
	}
	var saved operation.Record
	err = b.write(func(tx *bbolt.Tx) error {
		cur, ok, err := getRecord(tx, rec.OperationID)
		if err != nil {
			return err
		}
		if !ok {
			return decline(&store.ConflictError{OperationID: rec.OperationID, Expected: rec.Revision})
		}
		if cur.Revision != rec.Revision || cur.Event == nil || cur.Event.Revision != rec.Event.Revision {
			return decline(&store.ConflictError{OperationID: rec.OperationID, Expected: rec.Revision, Current: &cur})
		}
		saved = cur.Clone()
		saved.Event = rec.Event
		return putRecord(tx, &cur, saved)
	})
	var conflict *store.ConflictError
	switch {
	case errors.As(err, &conflict):
		return operation.Record{}, err
	case err != nil:
		return operation.Record{}, fmt.Errorf("set event %s: %w", rec.OperationID, err)
	}
	return saved, nil
}

// AppendAudit implements store.Store: the entry and the check that the
// record stands at its revision are one bbolt transaction.
func (b *Store) AppendAudit(ctx context.Context, entry review.AuditEntry) error {
	entry, err := store.PrepareAppendAudit(entry)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("append audit %s: %w", entry.OperationID, err)
	}
	raw, err := json.Marshal(entry)
	if err != nil {
		return fmt.Errorf("append audit %s: encode entry: %w", entry.OperationID, err)
	}
	err = b.write(func(tx *bbolt.Tx) error {
		cur, ok, err := getRecord(tx, entry.OperationID)
		if err != nil {
			return err
		}
		if !ok {
			return decline(&store.ConflictError{OperationID: entry.OperationID, Expected: entry.Revision})
		}
		if cur.Revision != entry.Revision {
			return decline(&store.ConflictError{OperationID: entry.OperationID, Expected: entry.Revision, Current: &cur})
		}
		audit, err := tx.Bucket(bucketAudit).CreateBucketIfNotExists([]byte(entry.OperationID))
		if err != nil {
			return fmt.Errorf("audit bucket: %w", err)
		}
		key := []byte(store.AppendedAuditKey(entry.Revision, entry.At))
		if old := audit.Get(key); old != nil {
			if bytes.Equal(old, raw) {
				return decline(nil) // this entry, written before
			}
			return decline(fmt.Errorf("an audit entry for revision %d at %s already exists: %w", entry.Revision, entry.At.Format(time.RFC3339Nano), store.ErrExists))
		}
		return audit.Put(key, raw)
	})
	var conflict *store.ConflictError
	switch {
	case errors.As(err, &conflict):
		return err
	case err != nil:
		return fmt.Errorf("append audit %s: %w", entry.OperationID, err)
	}
	return nil
}

// Audit implements store.Store: the nested bucket's keys are zero-padded
// revisions (AppendAudit's with a time after), so cursor order is revision
// order.
func (b *Store) Audit(ctx context.Context, operationID string) ([]review.AuditEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("audit %s: %w", operationID, err)
	}
	var entries []review.AuditEntry
	err := b.read(func(tx *bbolt.Tx) error {
		audit := tx.Bucket(bucketAudit).Bucket([]byte(operationID))
		if audit == nil {
			return nil
		}
		return audit.ForEach(func(_, raw []byte) error {
			var e review.AuditEntry
			if err := json.Unmarshal(raw, &e); err != nil {
				return fmt.Errorf("decode audit entry: %w", err)
			}
			entries = append(entries, e)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("audit %s: %w", operationID, err)
	}
	return entries, nil
}

// PutReview implements store.Store.
func (b *Store) PutReview(ctx context.Context, r review.Record) (bool, error) {
	r = r.UTC()
	if r.ID == "" {
		return false, errors.New("put review: empty id")
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("put review %s: %w", r.ID, err)
	}
	wrote := false
	err := b.write(func(tx *bbolt.Tx) error {
		wrote = false // from this run only: write may run it again
		reviews := tx.Bucket(bucketReviews)
		if reviews.Get([]byte(r.ID)) != nil {
			return nil
		}
		raw, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		if err := reviews.Put([]byte(r.ID), raw); err != nil {
			return err
		}
		if r.Open {
			if err := tx.Bucket(bucketOpenReviews).Put([]byte(store.IndexKey(r.CreatedAt, r.ID)), []byte(r.ID)); err != nil {
				return fmt.Errorf("index: %w", err)
			}
		}
		if r.RemoteJobID != "" {
			if err := indexJob(tx, store.JobRef{JobID: r.RemoteJobID, OperationID: r.OperationID, Kind: store.RefReview, Key: r.ID}); err != nil {
				return err
			}
		}
		if r.OperationID != "" {
			of, err := tx.Bucket(bucketOpReviews).CreateBucketIfNotExists([]byte(r.OperationID))
			if err != nil {
				return fmt.Errorf("file under operation: %w", err)
			}
			if err := of.Put([]byte(r.ID), nil); err != nil {
				return fmt.Errorf("file under operation: %w", err)
			}
		}
		wrote = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("put review %s: %w", r.ID, err)
	}
	return wrote, nil
}

func getReview(tx *bbolt.Tx, id string) (review.Record, error) {
	raw := tx.Bucket(bucketReviews).Get([]byte(id))
	if raw == nil {
		return review.Record{}, store.ErrNotFound
	}
	// Strict: a corrupted review must not show an operator a wrong action.
	r, err := review.Decode(raw)
	if err != nil {
		return review.Record{}, fmt.Errorf("decode review %s: %w", id, err)
	}
	return r, nil
}

// GetReview implements store.Store.
func (b *Store) GetReview(ctx context.Context, id string) (review.Record, error) {
	if err := ctx.Err(); err != nil {
		return review.Record{}, fmt.Errorf("get review %s: %w", id, err)
	}
	var r review.Record
	err := b.read(func(tx *bbolt.Tx) error {
		var err error
		r, err = getReview(tx, id)
		return err
	})
	if err != nil {
		return review.Record{}, fmt.Errorf("get review %s: %w", id, err)
	}
	return r, nil
}

// OpenReviews implements store.Store, in index (creation time) order.
func (b *Store) OpenReviews(ctx context.Context) ([]review.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open reviews: %w", err)
	}
	var out []review.Record
	err := b.read(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketOpenReviews).ForEach(func(_, id []byte) error {
			r, err := getReview(tx, string(id))
			if err != nil {
				return fmt.Errorf("review %s: %w", id, err)
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("open reviews: %w", err)
	}
	return out, nil
}

// CloseReview implements store.Store; closing a closed review keeps the first
// closer and time.
func (b *Store) CloseReview(ctx context.Context, id, by string, at time.Time) error {
	return b.ResolveReview(ctx, id, by, "", at)
}

// OpenReviewsOf implements store.Store: OperationReviews, open ones only.
func (b *Store) OpenReviewsOf(ctx context.Context, operationID string) ([]review.Record, error) {
	rs, err := b.OperationReviews(ctx, operationID)
	return store.OpenOnly(rs), err
}

// OperationReviews implements store.Store from the operation's nested bucket,
// in creation order.
func (b *Store) OperationReviews(ctx context.Context, operationID string) ([]review.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("reviews of %s: %w", operationID, err)
	}
	var out []review.Record
	err := b.read(func(tx *bbolt.Tx) error {
		of := tx.Bucket(bucketOpReviews).Bucket([]byte(operationID))
		if of == nil {
			return nil
		}
		return of.ForEach(func(id, _ []byte) error {
			r, err := getReview(tx, string(id))
			if err != nil {
				return fmt.Errorf("review %s: %w", id, err)
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("reviews of %s: %w", operationID, err)
	}
	store.SortReviews(out)
	return out, nil
}

// ResolveReview implements store.Store; closing a closed review keeps the first
// closer, time and reason.
func (b *Store) ResolveReview(ctx context.Context, id, by, reason string, at time.Time) error {
	at = at.UTC()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("close review %s: %w", id, err)
	}
	err := b.write(func(tx *bbolt.Tx) error {
		r, err := getReview(tx, id)
		if err != nil {
			return decline(err)
		}
		if !r.Open {
			return nil
		}
		if err := tx.Bucket(bucketOpenReviews).Delete([]byte(store.IndexKey(r.CreatedAt, r.ID))); err != nil {
			return fmt.Errorf("unindex: %w", err)
		}
		r.Open, r.ClosedBy, r.ClosedAt, r.ClosedReason = false, by, at, reason
		raw, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		return tx.Bucket(bucketReviews).Put([]byte(id), raw)
	})
	if err != nil {
		return fmt.Errorf("close review %s: %w", id, err)
	}
	return nil
}

// Due implements store.Store by walking the due index up to t.
func (b *Store) Due(ctx context.Context, t time.Time, limit int) ([]operation.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("due %s: %w", store.SortableTime(t), err)
	}
	bound := []byte(store.IndexBound(t))
	var out []operation.Record
	err := b.read(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketDue).Cursor()
		for k, id := c.First(); k != nil && string(k) <= string(bound); k, id = c.Next() {
			if limit > 0 && len(out) == limit {
				break
			}
			rec, ok, err := getRecord(tx, string(id))
			if err != nil {
				return fmt.Errorf("record %s: %w", id, err)
			}
			if !ok {
				return fmt.Errorf("index names missing record %s", id)
			}
			out = append(out, rec)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("due %s: %w", store.SortableTime(t), err)
	}
	return out, nil
}
