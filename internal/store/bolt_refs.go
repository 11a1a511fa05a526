package store

import (
	"context"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// JobRefs implements Store from the job index (bucketJobs), in one read
// transaction, so the answer is consistent and costs what the job's own
// references cost.
func (b *Bolt) JobRefs(ctx context.Context, jobID string) ([]JobRef, error) {
	if jobID == "" {
		return nil, fmt.Errorf("job refs: empty job id")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("job refs %s: %w", jobID, err)
	}
	var refs []JobRef
	err := b.db.View(func(tx *bolt.Tx) error {
		of := tx.Bucket(bucketJobs).Bucket([]byte(jobID))
		if of == nil {
			return nil
		}
		return of.ForEach(func(k, _ []byte) error {
			var ref JobRef
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
	sortJobRefs(refs)
	return refs, nil
}

// indexJob files ref under its job in the caller's transaction.
func indexJob(tx *bolt.Tx, ref JobRef) error {
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
