package bolt

import (
	"context"
	"fmt"

	"go.etcd.io/bbolt"
)

// OperationIDs lists every operation the file holds, in id order: what a
// resumed local run drives again, read from the store itself, since
// nothing else a crashed run leaves names them all.
func (b *Store) OperationIDs(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("operation ids: %w", err)
	}
	var ids []string
	err := b.read(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketOps).ForEach(func(id, _ []byte) error {
			ids = append(ids, string(id))
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("operation ids: %w", err)
	}
	return ids, nil
}
