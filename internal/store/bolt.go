package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
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
	// bucketDue: <due>#<id> → id, for records whose SweepDue says ok.
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

// BoltLockTimeout is how long OpenBolt waits for the file lock, which a
// running process holds for as long as it has the file open.
const BoltLockTimeout = 3 * time.Second

// Bolt is the Store in one bbolt file, for local runs. It has the same
// semantics as Dynamo, and every multi-item change (record and index,
// record and audit entry) is one bbolt transaction. Unlike Dynamo, its
// indexes are always consistent.
type Bolt struct {
	db *bolt.DB
}

var _ Store = (*Bolt)(nil)

// OpenBolt opens (creating if needed) the store file at path. bbolt locks
// the file for one process at a time; if another process holds it, OpenBolt
// gives up after BoltLockTimeout with an error that says so.
func OpenBolt(path string) (*Bolt, error) { return openBolt(path, BoltLockTimeout) }

// BoltOptions tunes OpenBoltWith.
type BoltOptions struct {
	// NoSync skips the fsync after every committed transaction (and the
	// freelist's write, rebuilt on open). Only for simulations, whose file
	// is a throwaway: a crash of the machine (not of the process) can lose
	// or corrupt the last writes. The store's
	// semantics within one process are unchanged: revision checks, indexes
	// and transactions behave exactly as with OpenBolt. It is what lets the
	// fault-injection soak commit a million writes in minutes instead of
	// waiting on the disk for each one.
	NoSync bool
}

// OpenBoltWith is OpenBolt with options; OpenBoltWith(path, BoltOptions{})
// is OpenBolt(path).
func OpenBoltWith(path string, opts BoltOptions) (*Bolt, error) {
	return openBoltWith(path, BoltLockTimeout, opts)
}

func openBolt(path string, lockTimeout time.Duration) (*Bolt, error) {
	return openBoltWith(path, lockTimeout, BoltOptions{})
}

func openBoltWith(path string, lockTimeout time.Duration, opts BoltOptions) (*Bolt, error) {
	o := &bolt.Options{Timeout: lockTimeout}
	if opts.NoSync {
		// A throwaway file: no fsync at all, no freelist written with
		// every commit (bbolt rebuilds it when the file is opened), and
		// the freelist kept in a hash map, whose allocations do not slow
		// down as a simulation's file grows.
		o.NoSync, o.NoGrowSync, o.NoFreelistSync, o.FreelistType = true, true, true, bolt.FreelistMapType
	}
	db, err := bolt.Open(path, 0o600, o)
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open store %s: another process holds its lock (waited %s; stop it or use another file): %w", path, lockTimeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
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
	return &Bolt{db: db}, nil
}

// Close implements Store.
func (b *Bolt) Close() error {
	if err := b.db.Close(); err != nil {
		return fmt.Errorf("close store %s: %w", b.db.Path(), err)
	}
	return nil
}

// getRecord reads one record inside tx; ok is false if there is none.
func getRecord(tx *bolt.Tx, id string) (rec operation.Record, ok bool, err error) {
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
func putRecord(tx *bolt.Tx, old *operation.Record, rec operation.Record) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode record: %w", err)
	}
	if err := tx.Bucket(bucketOps).Put([]byte(rec.OperationID), raw); err != nil {
		return fmt.Errorf("put record: %w", err)
	}
	if rec.RemoteJobID != "" && (old == nil || old.RemoteJobID != rec.RemoteJobID) {
		if err := indexJob(tx, JobRef{JobID: rec.RemoteJobID, OperationID: rec.OperationID, Kind: RefRecord}); err != nil {
			return err
		}
	}
	due := tx.Bucket(bucketDue)
	if old != nil {
		if at, ok := old.SweepDue(); ok {
			if err := due.Delete([]byte(indexKey(at, old.OperationID))); err != nil {
				return fmt.Errorf("unindex record: %w", err)
			}
		}
	}
	if at, ok := rec.SweepDue(); ok {
		if err := due.Put([]byte(indexKey(at, rec.OperationID)), []byte(rec.OperationID)); err != nil {
			return fmt.Errorf("index record: %w", err)
		}
	}
	return nil
}

// Create implements Store.
func (b *Bolt) Create(ctx context.Context, rec operation.Record) (operation.Record, error) {
	rec, err := checkCreate(ctx, rec)
	if err != nil {
		return operation.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return operation.Record{}, fmt.Errorf("create %s: %w", rec.OperationID, err)
	}
	err = b.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketOps).Get([]byte(rec.OperationID)) != nil {
			return ErrExists
		}
		return putRecord(tx, nil, rec)
	})
	if err != nil {
		return operation.Record{}, fmt.Errorf("create %s: %w", rec.OperationID, err)
	}
	return rec, nil
}

// Get implements Store.
func (b *Bolt) Get(ctx context.Context, operationID string) (operation.Record, error) {
	if err := ctx.Err(); err != nil {
		return operation.Record{}, fmt.Errorf("get %s: %w", operationID, err)
	}
	var rec operation.Record
	err := b.db.View(func(tx *bolt.Tx) error {
		var ok bool
		var err error
		rec, ok, err = getRecord(tx, operationID)
		if err == nil && !ok {
			err = ErrNotFound
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
func (b *Bolt) update(ctx context.Context, rec operation.Record, expected int64, entry *review.AuditEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var conflict *ConflictError
	err := b.db.Update(func(tx *bolt.Tx) error {
		cur, ok, err := getRecord(tx, rec.OperationID)
		if err != nil {
			return err
		}
		if !ok {
			conflict = &ConflictError{OperationID: rec.OperationID, Expected: expected}
			return conflict
		}
		if cur.Revision != expected || cur.Terminal() {
			conflict = &ConflictError{OperationID: rec.OperationID, Expected: expected, Current: &cur}
			return conflict
		}
		if entry != nil {
			audit, err := tx.Bucket(bucketAudit).CreateBucketIfNotExists([]byte(rec.OperationID))
			if err != nil {
				return fmt.Errorf("audit bucket: %w", err)
			}
			key := []byte(auditKey(entry.Revision))
			if audit.Get(key) != nil {
				return fmt.Errorf("an audit entry for revision %d already exists: %w", entry.Revision, ErrExists)
			}
			raw, err := json.Marshal(entry)
			if err != nil {
				return fmt.Errorf("encode audit entry: %w", err)
			}
			if err := audit.Put(key, raw); err != nil {
				return fmt.Errorf("put audit entry: %w", err)
			}
			if entry.RemoteJobID != "" {
				ref := JobRef{JobID: entry.RemoteJobID, OperationID: entry.OperationID, Kind: RefAudit, Key: strconv.FormatInt(entry.Revision, 10)}
				if err := indexJob(tx, ref); err != nil {
					return err
				}
			}
		}
		return putRecord(tx, &cur, rec)
	})
	if conflict != nil {
		// Returned bare, like Dynamo's: its message names the operation.
		return conflict
	}
	return err
}

// Update implements Store.
func (b *Bolt) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	rec, err := checkUpdate(ctx, rec, expected)
	if err != nil {
		return operation.Record{}, err
	}
	if err := b.update(ctx, rec, expected, nil); err != nil {
		var conflict *ConflictError
		if errors.As(err, &conflict) {
			if own, _ := ownWrite(ctx, rec, nil, err, b.Audit); own {
				return rec, nil
			}
			return operation.Record{}, err
		}
		return operation.Record{}, fmt.Errorf("update %s: %w", rec.OperationID, err)
	}
	return rec, nil
}

// UpdateWithAudit implements Store.
func (b *Bolt) UpdateWithAudit(ctx context.Context, rec operation.Record, expected int64, entry review.AuditEntry) (operation.Record, error) {
	rec, entry, err := checkAudit(ctx, rec, expected, entry)
	if err != nil {
		return operation.Record{}, err
	}
	if err := b.update(ctx, rec, expected, &entry); err != nil {
		var conflict *ConflictError
		if errors.As(err, &conflict) {
			own, oerr := ownWrite(ctx, rec, &entry, err, b.Audit)
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

// Audit implements Store: the nested bucket's keys are zero-padded
// revisions, so cursor order is revision order.
func (b *Bolt) Audit(ctx context.Context, operationID string) ([]review.AuditEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("audit %s: %w", operationID, err)
	}
	var entries []review.AuditEntry
	err := b.db.View(func(tx *bolt.Tx) error {
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

// PutReview implements Store.
func (b *Bolt) PutReview(ctx context.Context, r review.Record) (bool, error) {
	r = r.UTC()
	if r.ID == "" {
		return false, errors.New("put review: empty id")
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("put review %s: %w", r.ID, err)
	}
	wrote := false
	err := b.db.Update(func(tx *bolt.Tx) error {
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
			if err := tx.Bucket(bucketOpenReviews).Put([]byte(indexKey(r.CreatedAt, r.ID)), []byte(r.ID)); err != nil {
				return fmt.Errorf("index: %w", err)
			}
		}
		if r.RemoteJobID != "" {
			if err := indexJob(tx, JobRef{JobID: r.RemoteJobID, OperationID: r.OperationID, Kind: RefReview, Key: r.ID}); err != nil {
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

func getReview(tx *bolt.Tx, id string) (review.Record, error) {
	raw := tx.Bucket(bucketReviews).Get([]byte(id))
	if raw == nil {
		return review.Record{}, ErrNotFound
	}
	// Strict: a corrupted review must not show an operator a wrong action.
	r, err := review.Decode(raw)
	if err != nil {
		return review.Record{}, fmt.Errorf("decode review %s: %w", id, err)
	}
	return r, nil
}

// GetReview implements Store.
func (b *Bolt) GetReview(ctx context.Context, id string) (review.Record, error) {
	if err := ctx.Err(); err != nil {
		return review.Record{}, fmt.Errorf("get review %s: %w", id, err)
	}
	var r review.Record
	err := b.db.View(func(tx *bolt.Tx) error {
		var err error
		r, err = getReview(tx, id)
		return err
	})
	if err != nil {
		return review.Record{}, fmt.Errorf("get review %s: %w", id, err)
	}
	return r, nil
}

// OpenReviews implements Store, in index (creation time) order.
func (b *Bolt) OpenReviews(ctx context.Context) ([]review.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open reviews: %w", err)
	}
	var out []review.Record
	err := b.db.View(func(tx *bolt.Tx) error {
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

// CloseReview implements Store; closing a closed review keeps the first
// closer and time.
func (b *Bolt) CloseReview(ctx context.Context, id, by string, at time.Time) error {
	return b.ResolveReview(ctx, id, by, "", at)
}

// OpenReviewsOf implements Store: OperationReviews, open ones only.
func (b *Bolt) OpenReviewsOf(ctx context.Context, operationID string) ([]review.Record, error) {
	rs, err := b.OperationReviews(ctx, operationID)
	return openOnly(rs), err
}

// OperationReviews implements Store from the operation's nested bucket,
// in creation order.
func (b *Bolt) OperationReviews(ctx context.Context, operationID string) ([]review.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("reviews of %s: %w", operationID, err)
	}
	var out []review.Record
	err := b.db.View(func(tx *bolt.Tx) error {
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
	sortReviews(out)
	return out, nil
}

// ResolveReview implements Store; closing a closed review keeps the first
// closer, time and reason.
func (b *Bolt) ResolveReview(ctx context.Context, id, by, reason string, at time.Time) error {
	at = at.UTC()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("close review %s: %w", id, err)
	}
	err := b.db.Update(func(tx *bolt.Tx) error {
		r, err := getReview(tx, id)
		if err != nil || !r.Open {
			return err
		}
		if err := tx.Bucket(bucketOpenReviews).Delete([]byte(indexKey(r.CreatedAt, r.ID))); err != nil {
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

// Due implements Store by walking the due index up to t.
func (b *Bolt) Due(ctx context.Context, t time.Time, limit int) ([]operation.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("due %s: %w", sortableTime(t), err)
	}
	bound := []byte(indexBound(t))
	var out []operation.Record
	err := b.db.View(func(tx *bolt.Tx) error {
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
		return nil, fmt.Errorf("due %s: %w", sortableTime(t), err)
	}
	return out, nil
}
