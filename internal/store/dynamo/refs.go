package dynamo

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genjobs/genjobs/internal/store"
)

// JobRefs implements store.Store with one Query of JobIndex (eventually
// consistent: an item written a moment ago may be missing). The keys
// alone say what each item is: OP#<id>/RECORD, OP#<id>/AUDIT#<revision>
// or REVIEW#<id>/REVIEW.
func (d *Store) JobRefs(ctx context.Context, jobID string) ([]store.JobRef, error) {
	if jobID == "" {
		return nil, fmt.Errorf("job refs: empty job id")
	}
	expr, err := expression.NewBuilder().WithKeyCondition(expression.Key(AttrRemoteJobID).Equal(expression.Value(jobID))).Build()
	if err != nil {
		return nil, fmt.Errorf("job refs %s: build key condition: %w", jobID, err)
	}
	pages := dynamodb.NewQueryPaginator(d.client, &dynamodb.QueryInput{
		TableName:                 aws.String(d.table),
		IndexName:                 aws.String(JobIndex),
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	})
	var refs []store.JobRef
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("job refs %s: %w", jobID, err)
		}
		for _, item := range page.Items {
			ref, err := jobRef(jobID, item)
			if err != nil {
				return nil, fmt.Errorf("job refs %s: %w", jobID, err)
			}
			refs = append(refs, ref)
		}
	}
	store.SortJobRefs(refs)
	return refs, nil
}

// jobRef reads one JobIndex item's keys.
func jobRef(jobID string, item map[string]types.AttributeValue) (store.JobRef, error) {
	pk, sk := sValue(item, AttrPK), sValue(item, AttrSK)
	ref := store.JobRef{JobID: jobID, OperationID: sValue(item, AttrOperationID)}
	switch {
	case strings.HasPrefix(pk, opKeyPrefix) && sk == recordSK:
		ref.Kind = store.RefRecord
	case strings.HasPrefix(pk, opKeyPrefix) && strings.HasPrefix(sk, auditSKPrefix):
		rev, err := strconv.ParseInt(strings.TrimPrefix(sk, auditSKPrefix), 10, 64)
		if err != nil {
			return store.JobRef{}, fmt.Errorf("audit item %s/%s: %w", pk, sk, err)
		}
		ref.Kind, ref.Key = store.RefAudit, strconv.FormatInt(rev, 10)
	case strings.HasPrefix(pk, reviewKeyPrefix) && sk == reviewSK:
		ref.Kind, ref.Key = store.RefReview, strings.TrimPrefix(pk, reviewKeyPrefix)
	default:
		return store.JobRef{}, fmt.Errorf("unexpected item %s/%s in %s", pk, sk, JobIndex)
	}
	return ref, nil
}
