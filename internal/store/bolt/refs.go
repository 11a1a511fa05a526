package bolt

import (
	"context"
	"encoding/json"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/genjobs/genjobs/internal/store"
)

// JobRefs implements store.Store from the job index (bucketJobs), in one read
// transaction, so the answer is consistent and costs what the job's own
// references cost.
func (b *Store) JobRefs(ctx context.Context, jobID string) ([]store.JobRef, error) {
	if jobID == "" {
		return nil, fmt.Errorf("job refs: empty job id")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("job refs %s: %w", jobID, err)
	}
	var refs []store.JobRef
	err := b.read(func(tx *bbolt.Tx) error {
		of := tx.Bucket(bucketJobs).Bucket([]byte(jobID))
		if of == nil {
			return nil
		}
		return of.ForEach(func(k, _ []byte) error {
			var ref store.JobRef
			if err := json.Unmarshal(k, &ref); err != nil {
				return fmt.Errorf("index entry %q: %w", k, err)
			}
			refs = append(refs, ref)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("job refs %s: %w", jobID, err)
	}
	store.SortJobRefs(refs)
	return refs, nil
}

// indexJob files ref under its job in the caller's transaction.
func indexJob(tx *bbolt.Tx, ref store.JobRef) error {
	of, err := tx.Bucket(bucketJobs).CreateBucketIfNotExists([]byte(ref.JobID))
	if err != nil {
		return fmt.Errorf("index job %s: %w", ref.JobID, err)
	}
	k, err := json.Marshal(ref)
	if err != nil {
		return fmt.Errorf("index job %s: %w", ref.JobID, err)
	}
	if err := of.Put(k, nil); err != nil {
		return fmt.Errorf("index job %s: %w", ref.JobID, err)
	}
	return nil
}
