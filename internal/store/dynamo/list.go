package dynamo

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// OperationIDs lists every operation record in the table, in id order,
// skipping expired ones: what a resumed local run on a table of its own
// drives again. It scans the whole table (consistently), so it is for
// local runs, never for a handler.
func (d *Store) OperationIDs(ctx context.Context) ([]string, error) {
	filter := expression.Name(AttrSK).Equal(expression.Value(recordSK)).
		And(expression.Name(AttrPK).BeginsWith(opKeyPrefix))
	expr, err := expression.NewBuilder().WithFilter(filter).
		WithProjection(expression.NamesList(expression.Name(AttrPK), expression.Name(AttrExpiresAt))).Build()
	if err != nil {
		return nil, fmt.Errorf("operation ids: %w", err)
	}
	in := &dynamodb.ScanInput{TableName: aws.String(d.table), ConsistentRead: aws.Bool(true),
		FilterExpression: expr.Filter(), ProjectionExpression: expr.Projection(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()}
	var ids []string
	for p := dynamodb.NewScanPaginator(d.client, in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("operation ids: %w", err)
		}
		for _, item := range page.Items {
			if !d.expired(item) {
				ids = append(ids, strings.TrimPrefix(sValue(item, AttrPK), opKeyPrefix))
			}
		}
	}
	sort.Strings(ids)
	return ids, nil
}
