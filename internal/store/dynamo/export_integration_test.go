//go:build integration

package dynamo

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// BatchGet exposes batchGet to the package's integration tests.
func (d *Store) BatchGet(ctx context.Context, keys []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	return d.batchGet(ctx, keys)
}
