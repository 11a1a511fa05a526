// Package dynamo is the store.Store on one DynamoDB table: the store the
// deployed Lambdas use. It also owns the table's definition (keys,
// indexes, expiry attribute), which the template check and the local
// stack take from here.
package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

// Single-table design. Every item has the key (AttrPK, AttrSK); the
// record's own attributes sit beside it in the compact form item.go
// describes (short names, times as numbers, no zero values).
//
//	item          pk              sk                         status_pk              status_sk
//	operation     OP#<id>         RECORD                     ACTIVE#<0..7>          <due>#<id>      (index attrs only while IndexDue says ok)
//	audit entry   OP#<id>         AUDIT#<revision, 20 digits>
//	review ref    OP#<id>         REVIEW#<review id>                                          (for each review that names the operation)
//	review        REVIEW#<id>     REVIEW                     REVIEW#OPEN      <created>#<id>  (index attrs only while open)
//
// An operation's audit entries share its partition, so one Query reads
// them in revision order; so do the references to its reviews, so one
// consistent Query finds them without reading anyone else's. The GSI StatusIndex is sparse: only items that
// carry AttrStatusPK are in it, so the sweep and the review list read
// exactly the items they need instead of scanning the table. It holds
// keys only; Due and OpenReviews read the items it lists (BatchGetItem). Times in
// status_sk are fixed-width UTC RFC 3339 with nanoseconds, so byte order
// is time order.
//
// The GSI JobIndex (keys only) is keyed on the items' own remote_job_id
// and operation_id attributes: every record, review and audit entry that
// names a job is in it, so "who holds job X" is one Query.
const (
	// AttrPK is the table's partition key (S).
	AttrPK = "pk"
	// AttrSK is the table's sort key (S).
	AttrSK = "sk"
	// AttrTerminal (BOOL) is operation.Record.Terminal() as of the last
	// write; conditional writes test it because a condition expression
	// cannot call Go.
	AttrTerminal = "terminal"
	// AttrStatusPK (S) is StatusIndex's partition key: ACTIVE#<shard> for
	// an operation the sweep must look at, REVIEW#OPEN for an open review.
	AttrStatusPK = "status_pk"
	// AttrStatusSK (S) is StatusIndex's sort key: <fixed-width time>#<id>.
	AttrStatusSK = "status_sk"
	// StatusIndex is the sparse GSI (projection KEYS_ONLY) over
	// AttrStatusPK and AttrStatusSK: its queries want keys, and the
	// readers then read the few items they list, so a base write that
	// leaves the two attributes alone writes nothing to the index, and
	// one that moves them writes a tiny index item, not a copy of the
	// record. (It replaced the index "status", projection ALL; DynamoDB
	// cannot change an index's projection in place.)
	StatusIndex = "status-keys"
	// AttrRemoteJobID (S) is JobIndex's partition key: the job id a
	// record, review or audit entry names (absent when none).
	AttrRemoteJobID = "remote_job_id"
	// AttrOperationID (S) is JobIndex's sort key: the operation the item
	// belongs to.
	AttrOperationID = "operation_id"
	// JobIndex is the sparse GSI (projection KEYS_ONLY) over
	// AttrRemoteJobID and AttrOperationID. Its keys never change once an
	// item names a job (a job id is never replaced), so rewrites of a
	// record leave it alone.
	JobIndex = "job"
	// AttrExpiresAt (N) is when a finished item expires, in epoch
	// seconds: the table's TTL attribute (template.yaml's
	// TimeToLiveSpecification). Only terminal records, closed reviews and
	// audit entries carry it, and only with a Retention.
	AttrExpiresAt = "expires_at"
	// StatusShards is how many ACTIVE#<n> partitions the sweep index is
	// spread over (shard = FNV-1a(operation_id) mod StatusShards), so a
	// busy table has no single hot index partition; Due queries them all.
	StatusShards = 8
)

// Key values and attribute names of the design above.
const (
	opKeyPrefix        = "OP#"
	recordSK           = "RECORD"
	auditSKPrefix      = "AUDIT#"
	reviewKeyPrefix    = "REVIEW#"
	reviewSK           = "REVIEW"
	reviewRefSKPrefix  = "REVIEW#"
	activeStatusPrefix = "ACTIVE#"
	openReviewStatus   = "REVIEW#OPEN"

	attrRevision     = "revision"
	attrOpen         = "open"
	attrClosedBy     = "closed_by"
	attrClosedAt     = "closed_at"
	attrClosedReason = "closed_reason"
)

// txConflictAttempts bounds retries of a write that DynamoDB refused only
// because another transaction was touching the same item at that moment:
// that says nothing about revisions, so the write is simply tried again.
const txConflictAttempts = 10

// Store is the store.Store on one DynamoDB table (see the design above).
//
// Due reads a GSI, which DynamoDB updates asynchronously: it may list a
// record that has just moved on, or miss one that just became due. Callers
// re-read each listed record (Get) before acting on it, and the revision
// condition on every write stops a stale action anyway.
type Store struct {
	client    *dynamodb.Client
	table     string
	retention Retention
	now       func() time.Time
}

// Retention is how long finished items are kept. DynamoDB's TTL deletes
// an item some time after its AttrExpiresAt (typically within a few days,
// never at once); until then the readers here skip it, so what a reader
// sees does not depend on when the deletion ran. A zero duration keeps
// those items forever.
type Retention struct {
	// Records counts from a terminal record's last update (a terminal
	// record is never written again) and from a review's closing.
	Records time.Duration
	// Audit counts from an audit entry's time. Audit entries are kept
	// longest: they are the operators' decisions, and the job ids they
	// attached keep JobRefs answering after the record is gone.
	Audit time.Duration
}

// WithRetention returns d writing expiries per r and skipping expired
// items; now is the clock readers compare with (nil: time.Now).
func (d *Store) WithRetention(r Retention, now func() time.Time) *Store {
	c := *d
	c.retention = r
	if now != nil {
		c.now = now
	}
	return &c
}

// expiry is the AttrExpiresAt of an item finished at t and kept for keep;
// false when it never expires (no retention, or no time to count from:
// never an expiry in the past by accident).
func expiry(t time.Time, keep time.Duration) (int64, bool) {
	if keep <= 0 || t.IsZero() {
		return 0, false
	}
	return t.Add(keep).Unix(), true
}

func number(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// expired reports whether the item's expiry has come: DynamoDB deletes it
// later, and until then it is read as gone.
func (d *Store) expired(item map[string]types.AttributeValue) bool {
	n, ok := item[AttrExpiresAt].(*types.AttributeValueMemberN)
	if !ok {
		return false
	}
	at, err := strconv.ParseInt(n.Value, 10, 64)
	return err == nil && d.now().Unix() >= at
}

var _ store.Store = (*Store)(nil)

// New returns a Store on table, which must exist (see EnsureTable).
// Items never expire unless WithRetention says so; expired ones (written
// by any store with a retention) are skipped all the same.
func New(client *dynamodb.Client, table string) *Store {
	return &Store{client: client, table: table, now: time.Now}
}

// NewClient loads the default AWS configuration (optFns adjust it,
// e.g. static credentials in tests) and returns a DynamoDB client. The SDK
// itself honours AWS_ENDPOINT_URL_DYNAMODB. When that variable is set the
// endpoint is a local one (DynamoDB Local), which omits x-amz-crc32 on
// error replies; response checksum validation is then turned off so every
// conditional-check failure does not log a checksum warning. An endpoint
// on loopback never makes the SDK reach for instance metadata
// (loopbackOptions).
func NewClient(ctx context.Context, optFns ...func(*config.LoadOptions) error) (*dynamodb.Client, error) {
	endpoint := os.Getenv("AWS_ENDPOINT_URL_DYNAMODB")
	local := endpoint != ""
	cfg, err := config.LoadDefaultConfig(ctx, append(loopbackOptions(endpoint, os.Getenv), optFns...)...)
	if err != nil {
		return nil, fmt.Errorf("load aws config: %w", err)
	}
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if local {
			o.DisableValidateResponseChecksum = true
		}
	}), nil
}

// loopbackOptions keep a client of an endpoint on this machine (DynamoDB
// Local) on this machine: the credential chain never probes the EC2
// instance metadata address (traffic off the machine, then a failure),
// and with no credentials or region in the environment it gets static
// local ones, which DynamoDB Local accepts. Other endpoints get none.
func loopbackOptions(endpoint string, getenv func(string) string) []func(*config.LoadOptions) error {
	u, err := url.Parse(endpoint)
	if endpoint == "" || err != nil {
		return nil
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil
	}
	opts := []func(*config.LoadOptions) error{config.WithEC2IMDSClientEnableState(imds.ClientDisabled)}
	if getenv("AWS_ACCESS_KEY_ID") == "" && getenv("AWS_PROFILE") == "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	}
	if getenv("AWS_REGION") == "" && getenv("AWS_DEFAULT_REGION") == "" {
		opts = append(opts, config.WithRegion("us-east-1"))
	}
	return opts
}

// TableDefinition is the table's schema: the single source of truth for
// tests, the local stack and the template check.
func TableDefinition(name string) *dynamodb.CreateTableInput {
	str := func(n string) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(n), AttributeType: types.ScalarAttributeTypeS}
	}
	key := func(n string, t types.KeyType) types.KeySchemaElement {
		return types.KeySchemaElement{AttributeName: aws.String(n), KeyType: t}
	}
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			str(AttrPK), str(AttrSK), str(AttrStatusPK), str(AttrStatusSK), str(AttrRemoteJobID), str(AttrOperationID),
		},
		KeySchema: []types.KeySchemaElement{key(AttrPK, types.KeyTypeHash), key(AttrSK, types.KeyTypeRange)},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName:  aws.String(StatusIndex),
			KeySchema:  []types.KeySchemaElement{key(AttrStatusPK, types.KeyTypeHash), key(AttrStatusSK, types.KeyTypeRange)},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly},
		}, {
			IndexName:  aws.String(JobIndex),
			KeySchema:  []types.KeySchemaElement{key(AttrRemoteJobID, types.KeyTypeHash), key(AttrOperationID, types.KeyTypeRange)},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly},
		}},
	}
}

// EnsureTable creates the table from TableDefinition if it is missing and
// waits until it and its index are ACTIVE. It is idempotent, also when
// two callers race to create the table.
func EnsureTable(ctx context.Context, client *dynamodb.Client, name string) error {
	_, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	var notFound *types.ResourceNotFoundException
	switch {
	case err == nil:
	case errors.As(err, &notFound):
		_, err = client.CreateTable(ctx, TableDefinition(name))
		var inUse *types.ResourceInUseException
		if err != nil && !errors.As(err, &inUse) {
			return fmt.Errorf("create table %s: %w", name, err)
		}
	default:
		return fmt.Errorf("describe table %s: %w", name, err)
	}
	return waitActive(ctx, client, name)
}

// waitActive polls until the table and every GSI are ACTIVE: the SDK's
// TableExists waiter ignores index status, and a query on a GSI that is
// still CREATING fails.
func waitActive(ctx context.Context, client *dynamodb.Client, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for {
		out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("wait for table %s: %w", name, err)
		}
		if tableActive(out.Table) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for table %s to become active: %w", name, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func tableActive(t *types.TableDescription) bool {
	if t == nil || t.TableStatus != types.TableStatusActive {
		return false
	}
	for _, g := range t.GlobalSecondaryIndexes {
		if g.IndexStatus != types.IndexStatusActive {
			return false
		}
	}
	return true
}

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func opKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: str(opKeyPrefix + id), AttrSK: str(recordSK)}
}

func reviewKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: str(reviewKeyPrefix + id), AttrSK: str(reviewSK)}
}

// RecordItem is the item Store writes for rec (without an expiry): what
// a write of rec costs is ItemSize of it.
func RecordItem(rec operation.Record) (map[string]types.AttributeValue, error) {
	return recordItem(rec, 0)
}

// recordItem is the full operation item. Writes replace the whole item, so
// leaving the index attributes out of an item that is no longer due is
// what takes it out of the sparse index. A terminal record is never
// written again, so its expiry counts from this write's Updated time.
func recordItem(rec operation.Record, keep time.Duration) (map[string]types.AttributeValue, error) {
	item, err := marshalRecord(rec)
	if err != nil {
		return nil, fmt.Errorf("marshal record: %w", err)
	}
	for k, v := range opKey(rec.OperationID) {
		item[k] = v
	}
	if rec.Terminal() {
		// Absent counts as false in updateCondition.
		item[AttrTerminal] = &types.AttributeValueMemberBOOL{Value: true}
	}
	if exp, ok := expiry(rec.Timestamps.Updated, keep); ok && rec.Terminal() {
		item[AttrExpiresAt] = number(exp)
	}
	if due, ok := rec.IndexDue(); ok {
		item[AttrStatusPK] = str(activeStatusPrefix + strconv.Itoa(statusShard(rec.OperationID)))
		item[AttrStatusSK] = str(store.IndexKey(due, rec.OperationID))
	}
	return item, nil
}

// updateCondition is what makes only the current revision write, and
// never over a terminal record: the item exists, is at expected, and is
// not terminal (items written before AttrTerminal existed count as not).
func updateCondition(expected int64) (expression.Expression, error) {
	cond := expression.Name(AttrPK).AttributeExists().
		And(expression.Name(attrRevision).Equal(expression.Value(expected))).
		And(expression.Or(
			expression.Name(AttrTerminal).AttributeNotExists(),
			expression.Name(AttrTerminal).Equal(expression.Value(false)),
		))
	return expression.NewBuilder().WithCondition(cond).Build()
}

// absentCondition makes a Put create-only.
func absentCondition() (expression.Expression, error) {
	return expression.NewBuilder().WithCondition(expression.Name(AttrPK).AttributeNotExists()).Build()
}

// Create implements store.Store.
func (d *Store) Create(ctx context.Context, rec operation.Record) (operation.Record, error) {
	rec, err := store.PrepareCreate(ctx, rec)
	if err != nil {
		return operation.Record{}, err
	}
	item, err := recordItem(rec, d.retention.Records)
	if err != nil {
		return operation.Record{}, fmt.Errorf("create %s: %w", rec.OperationID, err)
	}
	expr, err := absentCondition()
	if err != nil {
		return operation.Record{}, fmt.Errorf("create %s: build condition: %w", rec.OperationID, err)
	}
	err = retryTxConflict(ctx, func() error {
		_, err := d.client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                 aws.String(d.table),
			Item:                      item,
			ConditionExpression:       expr.Condition(),
			ExpressionAttributeNames:  expr.Names(),
			ExpressionAttributeValues: expr.Values(),
		})
		return err
	})
	var failed *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &failed):
		return operation.Record{}, fmt.Errorf("create %s: %w", rec.OperationID, store.ErrExists)
	case err != nil:
		return operation.Record{}, fmt.Errorf("create %s: %w", rec.OperationID, err)
	}
	return rec, nil
}

// Get implements store.Store with a strongly consistent read.
func (d *Store) Get(ctx context.Context, operationID string) (operation.Record, error) {
	out, err := d.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(d.table),
		Key:            opKey(operationID),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return operation.Record{}, fmt.Errorf("get %s: %w", operationID, err)
	}
	if len(out.Item) == 0 || d.expired(out.Item) {
		return operation.Record{}, fmt.Errorf("get %s: %w", operationID, store.ErrNotFound)
	}
	rec, err := decodeRecord(out.Item)
	if err != nil {
		return operation.Record{}, fmt.Errorf("get %s: %w", operationID, err)
	}
	return rec, nil
}

// conditionalPut is the revision-guarded Put shared by Update and
// UpdateWithAudit.
func conditionalPut(table string, rec operation.Record, expected int64, keep time.Duration) (*types.Put, error) {
	item, err := recordItem(rec, keep)
	if err != nil {
		return nil, err
	}
	expr, err := updateCondition(expected)
	if err != nil {
		return nil, fmt.Errorf("build condition: %w", err)
	}
	return &types.Put{
		TableName:                           aws.String(table),
		Item:                                item,
		ConditionExpression:                 expr.Condition(),
		ExpressionAttributeNames:            expr.Names(),
		ExpressionAttributeValues:           expr.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, nil
}

// Update implements store.Store.
func (d *Store) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	rec, err := store.PrepareUpdate(ctx, rec, expected)
	if err != nil {
		return operation.Record{}, err
	}
	put, err := conditionalPut(d.table, rec, expected, d.retention.Records)
	if err != nil {
		return operation.Record{}, fmt.Errorf("update %s: %w", rec.OperationID, err)
	}
	err = retryTxConflict(ctx, func() error {
		_, err := d.client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                           put.TableName,
			Item:                                put.Item,
			ConditionExpression:                 put.ConditionExpression,
			ExpressionAttributeNames:            put.ExpressionAttributeNames,
			ExpressionAttributeValues:           put.ExpressionAttributeValues,
			ReturnValuesOnConditionCheckFailure: put.ReturnValuesOnConditionCheckFailure,
		})
		return err
	})
	var failed *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &failed):
		// Often this write itself: applied, its answer lost, and the
		// SDK's retry failed on it (store.OwnWrite).
		cerr := d.conflict(ctx, rec.OperationID, expected, failed.Item)
		if own, _ := store.OwnWrite(ctx, rec, nil, cerr, d.Audit); own {
			return rec, nil
		}
		return operation.Record{}, cerr
	case err != nil:
		return operation.Record{}, fmt.Errorf("update %s: %w", rec.OperationID, err)
	}
	return rec, nil
}

// SetEvent implements store.Store with a Put of the whole item (the index
// attributes follow the new event), conditioned on the revision and the
// event's revision but not on terminal: a terminal record's event is sent
// after its last write. Its expiry still counts from that write.
// Applied twice, it is the same item.
func (d *Store) SetEvent(ctx context.Context, rec operation.Record) (operation.Record, error) {
	rec, err := store.PrepareSetEvent(rec)
	if err != nil {
		return operation.Record{}, err
	}
	item, err := recordItem(rec, d.retention.Records)
	if err != nil {
		return operation.Record{}, fmt.Errorf("set event %s: %w", rec.OperationID, err)
	}
	evRevision := recordNames["event"] + "." + recordNames["event_revision"]
	expr, err := expression.NewBuilder().WithCondition(expression.Name(AttrPK).AttributeExists().
		And(expression.Name(attrRevision).Equal(expression.Value(rec.Revision))).
		And(expression.Name(evRevision).Equal(expression.Value(rec.Event.Revision)))).Build()
	if err != nil {
		return operation.Record{}, fmt.Errorf("set event %s: build condition: %w", rec.OperationID, err)
	}
	err = retryTxConflict(ctx, func() error {
		_, err := d.client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                           aws.String(d.table),
			Item:                                item,
			ConditionExpression:                 expr.Condition(),
			ExpressionAttributeNames:            expr.Names(),
			ExpressionAttributeValues:           expr.Values(),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		return err
	})
	var failed *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &failed):
		return operation.Record{}, d.conflict(ctx, rec.OperationID, rec.Revision, failed.Item)
	case err != nil:
		return operation.Record{}, fmt.Errorf("set event %s: %w", rec.OperationID, err)
	}
	return rec, nil
}

// conflict builds the *store.ConflictError from the item DynamoDB returned with
// the failed condition (read atomically with it). Should an endpoint not
// return it, a consistent Get stands in: later than the failure, but the
// current state all the same.
func (d *Store) conflict(ctx context.Context, id string, expected int64, item map[string]types.AttributeValue) error {
	ce := &store.ConflictError{OperationID: id, Expected: expected}
	if len(item) > 0 {
		cur, err := decodeRecord(item)
		if err != nil {
			return fmt.Errorf("update %s: conflict: %w", id, err)
		}
		ce.Current = &cur
		return ce
	}
	cur, err := d.Get(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return ce
	case err != nil:
		return fmt.Errorf("update %s: conflict, and reading the current record failed: %w", id, err)
	}
	ce.Current = &cur
	return ce
}

// UpdateWithAudit implements store.Store with one TransactWriteItems: the
// revision-guarded record Put and a create-only Put of the audit entry.
func (d *Store) UpdateWithAudit(ctx context.Context, rec operation.Record, expected int64, entry review.AuditEntry) (operation.Record, error) {
	rec, entry, err := store.PrepareAudit(ctx, rec, expected, entry)
	if err != nil {
		return operation.Record{}, err
	}
	id := rec.OperationID
	put, err := conditionalPut(d.table, rec, expected, d.retention.Records)
	if err != nil {
		return operation.Record{}, fmt.Errorf("update %s with audit: %w", id, err)
	}
	auditItem, err := attributevalue.MarshalMap(entry)
	if err != nil {
		return operation.Record{}, fmt.Errorf("update %s with audit: marshal entry: %w", id, err)
	}
	auditItem[AttrPK] = str(opKeyPrefix + id)
	auditItem[AttrSK] = str(auditSKPrefix + store.AuditKey(entry.Revision))
	if exp, ok := expiry(entry.At, d.retention.Audit); ok {
		auditItem[AttrExpiresAt] = number(exp)
	}
	absent, err := absentCondition()
	if err != nil {
		return operation.Record{}, fmt.Errorf("update %s with audit: build condition: %w", id, err)
	}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: put},
		{Put: &types.Put{
			TableName:                 aws.String(d.table),
			Item:                      auditItem,
			ConditionExpression:       absent.Condition(),
			ExpressionAttributeNames:  absent.Names(),
			ExpressionAttributeValues: absent.Values(),
		}},
	}}
	err = retryTxConflict(ctx, func() error {
		_, err := d.client.TransactWriteItems(ctx, in)
		return err
	})
	var canceled *types.TransactionCanceledException
	switch {
	case err == nil:
		return rec, nil
	case errors.As(err, &canceled):
		reasons := canceled.CancellationReasons
		if len(reasons) > 0 && aws.ToString(reasons[0].Code) == "ConditionalCheckFailed" {
			// The SDK's retries carry the same ClientRequestToken, which
			// DynamoDB answers as the applied transaction; a caller's
			// re-send after a timeout does not, and meets it here.
			cerr := d.conflict(ctx, id, expected, reasons[0].Item)
			own, oerr := store.OwnWrite(ctx, rec, &entry, cerr, d.Audit)
			switch {
			case oerr != nil:
				return operation.Record{}, oerr
			case own:
				return rec, nil
			}
			return operation.Record{}, cerr
		}
		if len(reasons) > 1 && aws.ToString(reasons[1].Code) == "ConditionalCheckFailed" {
			// The record was at expected, yet an entry for the revision
			// it would produce exists: the data is inconsistent, and the
			// entry, not the record, is what refused.
			return operation.Record{}, fmt.Errorf("update %s with audit: an audit entry for revision %d already exists: %w", id, entry.Revision, store.ErrExists)
		}
		return operation.Record{}, fmt.Errorf("update %s with audit: %w", id, err)
	default:
		return operation.Record{}, fmt.Errorf("update %s with audit: %w", id, err)
	}
}

// AppendAudit implements store.Store with one TransactWriteItems: a
// ConditionCheck that the record stands at the entry's revision (terminal
// or not: the record is not written) and a create-only Put of the entry.
func (d *Store) AppendAudit(ctx context.Context, entry review.AuditEntry) error {
	entry, err := store.PrepareAppendAudit(entry)
	if err != nil {
		return err
	}
	id := entry.OperationID
	item, err := attributevalue.MarshalMap(entry)
	if err != nil {
		return fmt.Errorf("append audit %s: marshal entry: %w", id, err)
	}
	item[AttrPK] = str(opKeyPrefix + id)
	item[AttrSK] = str(auditSKPrefix + store.AppendedAuditKey(entry.Revision, entry.At))
	if exp, ok := expiry(entry.At, d.retention.Audit); ok {
		item[AttrExpiresAt] = number(exp)
	}
	at, err := expression.NewBuilder().WithCondition(expression.Name(AttrPK).AttributeExists().
		And(expression.Name(attrRevision).Equal(expression.Value(entry.Revision)))).Build()
	if err != nil {
		return fmt.Errorf("append audit %s: build condition: %w", id, err)
	}
	absent, err := absentCondition()
	if err != nil {
		return fmt.Errorf("append audit %s: build condition: %w", id, err)
	}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{ConditionCheck: &types.ConditionCheck{
			TableName:                           aws.String(d.table),
			Key:                                 opKey(id),
			ConditionExpression:                 at.Condition(),
			ExpressionAttributeNames:            at.Names(),
			ExpressionAttributeValues:           at.Values(),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}},
		{Put: &types.Put{
			TableName:                           aws.String(d.table),
			Item:                                item,
			ConditionExpression:                 absent.Condition(),
			ExpressionAttributeNames:            absent.Names(),
			ExpressionAttributeValues:           absent.Values(),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}},
	}}
	err = retryTxConflict(ctx, func() error {
		_, err := d.client.TransactWriteItems(ctx, in)
		return err
	})
	var canceled *types.TransactionCanceledException
	switch {
	case err == nil:
		return nil
	case errors.As(err, &canceled):
		reasons := canceled.CancellationReasons
		if len(reasons) > 0 && aws.ToString(reasons[0].Code) == "ConditionalCheckFailed" {
			return d.conflict(ctx, id, entry.Revision, reasons[0].Item)
		}
		if len(reasons) > 1 && aws.ToString(reasons[1].Code) == "ConditionalCheckFailed" {
			// An entry has this key: this one, written by an attempt
			// whose answer was lost, or another at the same instant.
			var old review.AuditEntry
			if len(reasons[1].Item) > 0 && attributevalue.UnmarshalMap(reasons[1].Item, &old) == nil && store.SameAuditEntry(old, entry) {
				return nil
			}
			return fmt.Errorf("append audit %s: an audit entry for revision %d at %s already exists: %w", id, entry.Revision, entry.At.Format(time.RFC3339Nano), store.ErrExists)
		}
		return fmt.Errorf("append audit %s: %w", id, err)
	default:
		return fmt.Errorf("append audit %s: %w", id, err)
	}
}

// retryTxConflict runs write again, with jittered backoff, while DynamoDB
// refuses it only because a concurrent transaction held the item. The SDK
// does not retry these; they are no verdict on the revision condition, so
// a retry is safe and reaches a real verdict.
func retryTxConflict(ctx context.Context, write func() error) error {
	delay := 5 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := write()
		if err == nil || !isTxConflict(err) || attempt == txConflictAttempts {
			return err
		}
		if delay = pause(ctx, delay); ctx.Err() != nil {
			return err
		}
	}
}

// pause waits a jittered delay (half to one and a half times delay), or
// until ctx ends, and returns the next delay: doubled, at most 500 ms.
func pause(ctx context.Context, delay time.Duration) time.Duration {
	select {
	case <-ctx.Done():
	case <-time.After(delay/2 + rand.N(delay)):
	}
	return min(2*delay, 500*time.Millisecond)
}

func isTxConflict(err error) bool {
	var conflict *types.TransactionConflictException
	if errors.As(err, &conflict) {
		return true
	}
	var canceled *types.TransactionCanceledException
	if !errors.As(err, &canceled) {
		return false
	}
	txConflict := false
	for _, r := range canceled.CancellationReasons {
		switch aws.ToString(r.Code) {
		case "TransactionConflict":
			txConflict = true
		case "None", "":
		default:
			// A condition or validation failure is a verdict: no retry.
			return false
		}
	}
	return txConflict
}

// Audit implements store.Store: the entries sort by zero-padded revision inside
// the operation's partition, so a consistent Query returns them in order.
func (d *Store) Audit(ctx context.Context, operationID string) ([]review.AuditEntry, error) {
	var entries []review.AuditEntry
	err := d.eachInOperation(ctx, operationID, auditSKPrefix, func(item map[string]types.AttributeValue) error {
		var e review.AuditEntry
		if err := attributevalue.UnmarshalMap(item, &e); err != nil {
			return fmt.Errorf("unmarshal entry: %w", err)
		}
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit %s: %w", operationID, err)
	}
	return entries, nil
}

// eachInOperation calls fn for each item of the operation's partition
// whose sort key starts with prefix, in sort-key order, from consistent
// Query pages.
func (d *Store) eachInOperation(ctx context.Context, operationID, prefix string, fn func(map[string]types.AttributeValue) error) error {
	key := expression.Key(AttrPK).Equal(expression.Value(opKeyPrefix + operationID)).
		And(expression.Key(AttrSK).BeginsWith(prefix))
	expr, err := expression.NewBuilder().WithKeyCondition(key).Build()
	if err != nil {
		return fmt.Errorf("build key condition: %w", err)
	}
	pages := dynamodb.NewQueryPaginator(d.client, &dynamodb.QueryInput{
		TableName:                 aws.String(d.table),
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
		ConsistentRead:            aws.Bool(true),
	})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, item := range page.Items {
			if d.expired(item) {
				continue // past its retention: gone, whenever TTL deletes it
			}
			if err := fn(item); err != nil {
				return err
			}
		}
	}
	return nil
}

// PutReview implements store.Store with a create-only Put, so a redelivered DLQ
// message cannot reopen or rewrite a review an operator already handled.
// A review that names an operation is first filed under it (a plain Put,
// idempotent): a reference left by a review Put that then failed points
// at nothing and is skipped, while the other order could leave a review
// that OpenReviewsOf never finds.
func (d *Store) PutReview(ctx context.Context, r review.Record) (bool, error) {
	r = r.UTC()
	if r.ID == "" {
		return false, errors.New("put review: empty id")
	}
	if r.OperationID != "" {
		_, err := d.client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(d.table),
			Item:      map[string]types.AttributeValue{AttrPK: str(opKeyPrefix + r.OperationID), AttrSK: str(reviewRefSKPrefix + r.ID)},
		})
		if err != nil {
			return false, fmt.Errorf("put review %s: file under operation %s: %w", r.ID, r.OperationID, err)
		}
	}
	item, err := attributevalue.MarshalMap(r)
	if err != nil {
		return false, fmt.Errorf("put review %s: marshal: %w", r.ID, err)
	}
	for k, v := range reviewKey(r.ID) {
		item[k] = v
	}
	if r.Open {
		item[AttrStatusPK] = str(openReviewStatus)
		item[AttrStatusSK] = str(store.IndexKey(r.CreatedAt, r.ID))
	} else if exp, ok := expiry(r.ClosedAt, d.retention.Records); ok {
		item[AttrExpiresAt] = number(exp)
	}
	expr, err := absentCondition()
	if err != nil {
		return false, fmt.Errorf("put review %s: build condition: %w", r.ID, err)
	}
	_, err = d.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                 aws.String(d.table),
		Item:                      item,
		ConditionExpression:       expr.Condition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	})
	var failed *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &failed):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("put review %s: %w", r.ID, err)
	}
	return true, nil
}

// GetReview implements store.Store with a strongly consistent read.
func (d *Store) GetReview(ctx context.Context, id string) (review.Record, error) {
	out, err := d.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(d.table),
		Key:            reviewKey(id),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return review.Record{}, fmt.Errorf("get review %s: %w", id, err)
	}
	if len(out.Item) == 0 || d.expired(out.Item) {
		return review.Record{}, fmt.Errorf("get review %s: %w", id, store.ErrNotFound)
	}
	var r review.Record
	if err := attributevalue.UnmarshalMap(out.Item, &r); err != nil {
		return review.Record{}, fmt.Errorf("get review %s: unmarshal: %w", id, err)
	}
	return r, nil
}

// OpenReviews implements store.Store: the open reviews' keys from the
// sparse index (eventually consistent: a just-written review may lag),
// then the reviews themselves with consistent BatchGetItem, leaving out
// those closed since.
func (d *Store) OpenReviews(ctx context.Context) ([]review.Record, error) {
	keys, err := d.queryStatus(ctx, openReviewStatus, expression.Key(AttrStatusPK).Equal(expression.Value(openReviewStatus)), 0)
	if err != nil {
		return nil, fmt.Errorf("open reviews: %w", err)
	}
	items, err := d.batchGet(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("open reviews: %w", err)
	}
	out := make([]review.Record, 0, len(items))
	for _, item := range items {
		var r review.Record
		if err := attributevalue.UnmarshalMap(item, &r); err != nil {
			return nil, fmt.Errorf("open reviews: unmarshal: %w", err)
		}
		if r.Open {
			out = append(out, r)
		}
	}
	return out, nil
}

// CloseReview implements store.Store. It reads the review first, since where
// it moves in StatusIndex depends on its operation. The condition open =
// true makes a second close a no-op that keeps the first closer and time.
func (d *Store) CloseReview(ctx context.Context, id, by string, at time.Time) error {
	return d.ResolveReview(ctx, id, by, "", at)
}

// OpenReviewsOf implements store.Store: OperationReviews, open ones only.
func (d *Store) OpenReviewsOf(ctx context.Context, operationID string) ([]review.Record, error) {
	rs, err := d.OperationReviews(ctx, operationID)
	return store.OpenOnly(rs), err
}

// OperationReviews implements store.Store: one consistent Query of the
// references in the operation's partition, then a consistent read of
// each review.
func (d *Store) OperationReviews(ctx context.Context, operationID string) ([]review.Record, error) {
	var out []review.Record
	err := d.eachInOperation(ctx, operationID, reviewRefSKPrefix, func(item map[string]types.AttributeValue) error {
		sk, _ := item[AttrSK].(*types.AttributeValueMemberS)
		if sk == nil {
			return fmt.Errorf("reference without %s", AttrSK)
		}
		r, err := d.GetReview(ctx, strings.TrimPrefix(sk.Value, reviewRefSKPrefix))
		if errors.Is(err, store.ErrNotFound) {
			return nil // its review Put failed after the reference
		}
		if err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reviews of %s: %w", operationID, err)
	}
	store.SortReviews(out)
	return out, nil
}

// ResolveReview implements store.Store. The condition open = true makes a
// second close a no-op that keeps the first closer, time and reason.
func (d *Store) ResolveReview(ctx context.Context, id, by, reason string, at time.Time) error {
	at = at.UTC()
	upd := expression.Set(expression.Name(attrOpen), expression.Value(false)).
		Set(expression.Name(attrClosedBy), expression.Value(by)).
		Set(expression.Name(attrClosedAt), expression.Value(at)).
		Remove(expression.Name(AttrStatusPK)).
		Remove(expression.Name(AttrStatusSK))
	if reason != "" {
		upd = upd.Set(expression.Name(attrClosedReason), expression.Value(reason))
	}
	if exp, ok := expiry(at, d.retention.Records); ok {
		upd = upd.Set(expression.Name(AttrExpiresAt), expression.Value(exp))
	}
	cond := expression.Name(AttrPK).AttributeExists().And(expression.Name(attrOpen).Equal(expression.Value(true)))
	expr, err := expression.NewBuilder().WithUpdate(upd).WithCondition(cond).Build()
	if err != nil {
		return fmt.Errorf("close review %s: build expression: %w", id, err)
	}
	_, err = d.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(d.table),
		Key:                                 reviewKey(id),
		UpdateExpression:                    expr.Update(),
		ConditionExpression:                 expr.Condition(),
		ExpressionAttributeNames:            expr.Names(),
		ExpressionAttributeValues:           expr.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var failed *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &failed):
		if len(failed.Item) > 0 {
			return nil // already closed
		}
		// No item came back: absent, or an endpoint that does not
		// return it; a read tells which.
		if _, err := d.GetReview(ctx, id); err != nil {
			return fmt.Errorf("close review %s: %w", id, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("close review %s: %w", id, err)
	}
	return nil
}

// Due implements store.Store: it queries every ACTIVE shard of the sparse
// index for keys at or before t, in parallel, merges them by key (due
// time, then id), and reads the records the first limit keys name with
// consistent BatchGetItem: the index holds keys only. A record that has
// since left the index, or is no longer due at t, is left out. The keys
// are eventually consistent; see Store.
func (d *Store) Due(ctx context.Context, t time.Time, limit int) ([]operation.Record, error) {
	bound := store.IndexBound(t)
	type result struct {
		items []map[string]types.AttributeValue
		err   error
	}
	results := make([]result, StatusShards)
	var wg sync.WaitGroup
	for shard := range StatusShards {
		wg.Go(func() {
			pk := activeStatusPrefix + strconv.Itoa(shard)
			key := expression.Key(AttrStatusPK).Equal(expression.Value(pk)).
				And(expression.Key(AttrStatusSK).LessThanEqual(expression.Value(bound)))
			items, err := d.queryStatus(ctx, pk, key, limit)
			results[shard] = result{items, err}
		})
	}
	wg.Wait()
	var keys []map[string]types.AttributeValue
	for _, r := range results {
		if r.err != nil {
			return nil, fmt.Errorf("due %s: %w", store.SortableTime(t), r.err)
		}
		keys = append(keys, r.items...)
	}
	slices.SortFunc(keys, func(a, b map[string]types.AttributeValue) int {
		return strings.Compare(sValue(a, AttrStatusSK), sValue(b, AttrStatusSK))
	})
	if limit > 0 && len(keys) > limit {
		keys = keys[:limit]
	}
	items, err := d.batchGet(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("due %s: %w", store.SortableTime(t), err)
	}
	out := make([]operation.Record, 0, len(items))
	for _, item := range items {
		rec, err := decodeRecord(item)
		if err != nil {
			return nil, fmt.Errorf("due %s: %w", store.SortableTime(t), err)
		}
		if at, ok := rec.IndexDue(); ok && !at.After(t) {
			out = append(out, rec)
		}
	}
	return out, nil
}

// sValue is item's string attribute name, or "" when it has none.
func sValue(item map[string]types.AttributeValue, name string) string {
	v, _ := item[name].(*types.AttributeValueMemberS)
	if v == nil {
		return ""
	}
	return v.Value
}

// batchGetMax is the most keys one BatchGetItem may name.
const batchGetMax = 100

// batchGet reads the items keys name (each holding at least AttrPK and
// AttrSK; other attributes are ignored) with consistent BatchGetItem
// calls, and returns those that exist and have not expired, in keys'
// order. Keys DynamoDB leaves unprocessed (throttling) are asked again
// after a jittered backoff.
func (d *Store) batchGet(ctx context.Context, keys []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	id := func(item map[string]types.AttributeValue) string {
		return sValue(item, AttrPK) + "\x00" + sValue(item, AttrSK)
	}
	found := make(map[string]map[string]types.AttributeValue, len(keys))
	// BatchGetItem refuses a request that lists a key twice, and an index
	// page may name one item twice (its entry caught moving): ask once.
	seen := make(map[string]bool, len(keys))
	unique := make([]map[string]types.AttributeValue, 0, len(keys))
	for _, k := range keys {
		if !seen[id(k)] {
			seen[id(k)] = true
			unique = append(unique, k)
		}
	}
	for chunk := range slices.Chunk(unique, batchGetMax) {
		pending := make([]map[string]types.AttributeValue, len(chunk))
		for i, k := range chunk {
			pending[i] = map[string]types.AttributeValue{AttrPK: k[AttrPK], AttrSK: k[AttrSK]}
		}
		delay := 5 * time.Millisecond
		for len(pending) > 0 {
			out, err := d.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
				RequestItems: map[string]types.KeysAndAttributes{d.table: {Keys: pending, ConsistentRead: aws.Bool(true)}},
			})
			if err != nil {
				return nil, fmt.Errorf("batch get: %w", err)
			}
			for _, item := range out.Responses[d.table] {
				found[id(item)] = item
			}
			pending = out.UnprocessedKeys[d.table].Keys
			if len(pending) == 0 {
				break
			}
			if delay = pause(ctx, delay); ctx.Err() != nil {
				return nil, fmt.Errorf("batch get: %w", ctx.Err())
			}
		}
	}
	items := make([]map[string]types.AttributeValue, 0, len(found))
	for _, k := range keys {
		if item, ok := found[id(k)]; ok && !d.expired(item) {
			items = append(items, item)
			delete(found, id(k)) // a key listed twice yields one item
		}
	}
	return items, nil
}

// queryStatus reads one StatusIndex partition in key order, stopping once
// it has limit items (0 = all).
func (d *Store) queryStatus(ctx context.Context, partition string, key expression.KeyConditionBuilder, limit int) ([]map[string]types.AttributeValue, error) {
	expr, err := expression.NewBuilder().WithKeyCondition(key).Build()
	if err != nil {
		return nil, fmt.Errorf("query %s: build key condition: %w", partition, err)
	}
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(d.table),
		IndexName:                 aws.String(StatusIndex),
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	}
	if limit > 0 {
		in.Limit = aws.Int32(int32(min(limit, 1000)))
	}
	var items []map[string]types.AttributeValue
	pages := dynamodb.NewQueryPaginator(d.client, in)
	for pages.HasMorePages() && (limit <= 0 || len(items) < limit) {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", partition, err)
		}
		items = append(items, page.Items...)
	}
	return items, nil
}

// Close implements store.Store; the client holds nothing that needs releasing.
func (d *Store) Close() error { return nil }
