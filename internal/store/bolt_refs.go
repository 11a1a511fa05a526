package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
)

// JobRefs implements Store by scanning records, reviews and audit
// entries in one read transaction, so the answer is consistent. Only
// items whose encoding contains the job id's encoding are decoded: both
// are encoding/json output, so the bytes match exactly.
func (b *Bolt) JobRefs(ctx context.Context, jobID string) ([]JobRef, error) {
	if jobID == "" {
		return nil, fmt.Errorf("job refs: empty job id")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("job refs %s: %w", jobID, err)
	}
	quoted, err := json.Marshal(jobID)
	if err != nil {
		return nil, fmt.Errorf("job refs %s: %w", jobID, err)
	}
	needle := append([]byte(`"remote_job_id":`), quoted...)
	var refs []JobRef
	err = b.db.View(func(tx *bolt.Tx) error {
		err := tx.Bucket(bucketOps).ForEach(func(id, raw []byte) error {
			if !bytes.Contains(raw, needle) {
				return nil
			}
			var rec operation.Record
			if err := json.Unmarshal(raw, &rec); err != nil {
				return fmt.Errorf("record %s: %w", id, err)
			}
			if rec.RemoteJobID == jobID {
				refs = append(refs, JobRef{JobID: jobID, OperationID: rec.OperationID, Kind: RefRecord})
			}
			return nil
		})
		if err != nil {
			return err
		}
		err = tx.Bucket(bucketReviews).ForEach(func(id, raw []byte) error {
			if !bytes.Contains(raw, needle) {
				return nil
			}
			r, err := review.Decode(raw)
			if err != nil {
				return fmt.Errorf("review %s: %w", id, err)
			}
			if r.RemoteJobID == jobID {
				refs = append(refs, JobRef{JobID: jobID, OperationID: r.OperationID, Kind: RefReview, Key: r.ID})
			}
			return nil
		})
		if err != nil {
			return err
		}
		// The audit bucket holds one nested bucket per operation.
		return tx.Bucket(bucketAudit).ForEachBucket(func(op []byte) error {
			return tx.Bucket(bucketAudit).Bucket(op).ForEach(func(_, raw []byte) error {
				if !bytes.Contains(raw, needle) {
					return nil
				}
				var e review.AuditEntry
				if err := json.Unmarshal(raw, &e); err != nil {
					return fmt.Errorf("audit entry of %s: %w", op, err)
				}
				if e.RemoteJobID == jobID {
					refs = append(refs, JobRef{JobID: jobID, OperationID: e.OperationID, Kind: RefAudit, Key: strconv.FormatInt(e.Revision, 10)})
				}
				return nil
			})
		})
	})
	if err != nil {
		return nil, fmt.Errorf("job refs %s: %w", jobID, err)
	}
	sortJobRefs(refs)
	return refs, nil
}
