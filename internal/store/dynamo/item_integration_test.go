//go:build integration

package dynamo_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/dynamo"
	"github.com/genjobs/genjobs/internal/store/storetest"
)

// observedRecord is an operation as observe writes it once the job has
// finished: accepted, its claim kept, the job's full snapshot with one
// output, the delivery scheduled, and ids as long as real ones (a ULID
// job id, an SQS message id, a worker's writer).
func observedRecord(id string) operation.Record {
	t0 := time.Date(2026, 3, 14, 9, 26, 53, 589793238, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	ptr := func(t time.Time) *time.Time { return &t }
	return operation.Record{
		OperationID:            id,
		Revision:               6,
		SpecRevision:           1,
		Phase:                  operation.PhaseAccepted,
		UserID:                 "user-7f3a9c2e",
		Model:                  "genace-v2",
		Input:                  json.RawMessage(`{"prompt":"a lighthouse on a cliff at dusk, oil painting, warm light","size":"1024x1024","seed":421337}`),
		Authorized:             true,
		AuthorizedSpecRevision: 1,
		BudgetCredits:          50,
		EstimatedCredits:       12,
		RemoteJobID:            "job_01JQ8Z6W4N3KX7V2M5T9R0B1CD",
		Claim:                  &operation.Claim{Owner: "submit/9c1e4f2a7b3d5e60", MessageID: "3f2b9c1e-4a5d-4e6f-8a7b-9c0d1e2f3a4b", At: at(0)},
		Remote: &operation.Snapshot{
			State:    operation.RemoteSucceeded,
			Progress: 1,
			Credits:  operation.Credits{Reserved: 12, Charged: 12, RefundState: operation.RefundNone},
			Outputs: []operation.OutputDescriptor{
				{ContentType: "image/png", SizeBytes: 1843217, SHA256: strings.Repeat("5e", 32)},
			},
			CreatedAt:  at(412 * time.Millisecond),
			UpdatedAt:  at(61*time.Second + 7),
			StartedAt:  ptr(at(19*time.Second + 3)),
			FinishedAt: ptr(at(61*time.Second + 7)),
			ObservedAt: at(61*time.Second + 250*time.Millisecond),
		},
		Settlement: operation.SettlementUnresolved,
		Posts:      1,
		Schedule:   &operation.NextAction{Action: "deliver_outputs", Due: at(61*time.Second + 251*time.Millisecond)},
		Counters:   operation.Counters{Observations: 4, WindowObservations: 4},
		Timestamps: operation.Timestamps{
			Created:  at(-30 * time.Millisecond),
			Updated:  at(61*time.Second + 251*time.Millisecond),
			Accepted: ptr(at(412 * time.Millisecond)),
		},
		LastAppliedMessageID: "8d7c6b5a-4f3e-4d2c-9b1a-0f9e8d7c6b5a",
	}
}

// TestObservedItemUnderOneKB: an operation's item, as stored once observed
// and once delivered, is under one write unit, so each write of it costs
// one WRU, not two.
func TestObservedItemUnderOneKB(t *testing.T) {
	client := dynamoClient(t)
	table := tempTable(t, client)
	st := dynamo.New(client, table)
	ctx := store.WithWriter(t.Context(), "observe/4e1f9a0c2b7d3e58")
	delivered := func(r operation.Record) operation.Record {
		r.Phase, r.Schedule = operation.PhaseDelivered, nil
		r.Settlement = operation.SettlementSettled
		out := r.Remote.Outputs[0]
		r.Deliveries = []operation.Delivery{{Key: "outputs/" + r.OperationID + "/0.png", SizeBytes: out.SizeBytes, SHA256: out.SHA256,
			StoredAt: r.Timestamps.Updated.Add(2 * time.Second)}}
		return r
	}
	for _, c := range []struct {
		name string
		rec  operation.Record
	}{
		{"observed", observedRecord("op-01JQ8Z5F0C9B7A6D4E3F2G1H0J")},
		{"delivered", delivered(observedRecord("op-01JQ8Z5F0C9B7A6D4E3F2G1H0K"))},
	} {
		created := observedRecord(c.rec.OperationID) // not terminal, so the update may write
		created.Revision = 0
		if _, err := st.Create(ctx, created); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Update(ctx, c.rec, 1); err != nil {
			t.Fatal(err)
		}
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(table), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{
				dynamo.AttrPK: &types.AttributeValueMemberS{Value: "OP#" + c.rec.OperationID},
				dynamo.AttrSK: &types.AttributeValueMemberS{Value: "RECORD"},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		size := dynamo.ItemSize(out.Item)
		t.Logf("%s record's item: %d bytes, %d attributes", c.name, size, len(out.Item))
		if size >= dynamo.WriteUnit {
			t.Errorf("%s record's item is %d bytes, want under %d (one write unit)", c.name, size, dynamo.WriteUnit)
		}
	}
}

// TestReadsLongFormItems: a record written in the form before the
// compact one (long attribute names, RFC 3339 times, terminal false)
// still loads whole, is due, and its next write succeeds and stores it
// compact.
func TestReadsLongFormItems(t *testing.T) {
	client := dynamoClient(t)
	table := tempTable(t, client)
	st := dynamo.New(client, table)
	ctx := t.Context()
	rec := storetest.FullRecord("legacy-1")
	rec.Parked = nil // parked records are not due
	rec.Revision = 4
	rec = rec.UTC()

	old, err := attributevalue.MarshalMap(rec)
	if err != nil {
		t.Fatal(err)
	}
	old[dynamo.AttrPK] = &types.AttributeValueMemberS{Value: "OP#" + rec.OperationID}
	old[dynamo.AttrSK] = &types.AttributeValueMemberS{Value: "RECORD"}
	old[dynamo.AttrTerminal] = &types.AttributeValueMemberBOOL{Value: false}
	due, _ := rec.SweepDue()
	old[dynamo.AttrStatusPK] = &types.AttributeValueMemberS{Value: "ACTIVE#0"}
	old[dynamo.AttrStatusSK] = &types.AttributeValueMemberS{Value: store.IndexKey(due, rec.OperationID)}
	if _, ok := old["phase"]; !ok {
		t.Fatalf("the long form has no phase attribute: %v", old)
	}
	if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: old}); err != nil {
		t.Fatal(err)
	}

	got, err := st.Get(ctx, rec.OperationID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.UTC(), rec) {
		t.Fatalf("long-form item read as\n%+v\nwant\n%+v", got, rec)
	}
	listed, err := st.Due(ctx, due, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || !reflect.DeepEqual(listed[0].UTC(), rec) {
		t.Fatalf("Due lists %+v, want the long-form record", listed)
	}

	next := got
	next.Counters.Observations++
	if _, err := st.Update(ctx, next, rec.Revision); err != nil {
		t.Fatalf("update of a long-form item: %v", err)
	}
	out, err := client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{dynamo.AttrPK: old[dynamo.AttrPK], dynamo.AttrSK: old[dynamo.AttrSK]},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, long := out.Item["phase"]; long {
		t.Errorf("rewritten item still has the long name phase: %v", out.Item)
	}
	if n, o := dynamo.ItemSize(out.Item), dynamo.ItemSize(old); n >= o {
		t.Errorf("rewritten item %d bytes, long form %d: not smaller", n, o)
	}
}

// capacity records the write units DynamoDB reports for each PutItem
// the store sends: the table's and each index's.
type capacity struct {
	mu     sync.Mutex
	writes []types.ConsumedCapacity
}

// client returns a client on the same endpoint whose PutItem calls ask
// for ReturnConsumedCapacity INDEXES and record the answer.
func (c *capacity) client(t *testing.T) *dynamodb.Client {
	base := dynamoClient(t)
	return dynamodb.New(base.Options(), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("consumed-capacity",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if p, ok := in.Parameters.(*dynamodb.PutItemInput); ok {
						p.ReturnConsumedCapacity = types.ReturnConsumedCapacityIndexes
					}
					out, md, err := next.HandleInitialize(ctx, in)
					if p, ok := out.Result.(*dynamodb.PutItemOutput); ok && p.ConsumedCapacity != nil {
						c.mu.Lock()
						c.writes = append(c.writes, *p.ConsumedCapacity)
						c.mu.Unlock()
					}
					return out, md, err
				}), middleware.After)
		})
	})
}

// last is the table's and the status index's units of the last write.
func (c *capacity) last(t *testing.T) (table, index float64) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.writes) == 0 {
		t.Fatal("no PutItem reported its consumed capacity")
	}
	w := c.writes[len(c.writes)-1]
	if w.Table != nil {
		table = aws.ToFloat64(w.Table.CapacityUnits)
	}
	if g, ok := w.GlobalSecondaryIndexes[dynamo.StatusIndex]; ok {
		index = aws.ToFloat64(g.CapacityUnits)
	}
	return table, index
}

// TestObserveWriteUnits: what DynamoDB (Local) charges for observe's
// writes of an observed record. One unit for the item, nothing for the
// status index while the due key stays, and two small index writes (the
// old key's delete, the new key's put) when it moves.
func TestObserveWriteUnits(t *testing.T) {
	var c capacity
	client := c.client(t)
	table := tempTable(t, client)
	st := dynamo.New(client, table)
	ctx := store.WithWriter(t.Context(), "observe/4e1f9a0c2b7d3e58")
	rec := observedRecord("op-01JQ8Z5F0C9B7A6D4E3F2G1H0J")
	rec.Revision = 0
	cur, err := st.Create(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name              string
		change            func(*operation.Record)
		wantTable, wantIx float64
	}{
		{"due key stays", func(r *operation.Record) { r.Counters.Observations++ }, 1, 0},
		{"due key moves", func(r *operation.Record) { r.Schedule.Due = r.Schedule.Due.Add(30 * time.Second) }, 1, 2},
	} {
		next := cur.Clone()
		step.change(&next)
		if cur, err = st.Update(ctx, next, cur.Revision); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if tb, ix := c.last(t); tb != step.wantTable || ix != step.wantIx {
			t.Errorf("%s: %v table and %v status index write units, want %v and %v", step.name, tb, ix, step.wantTable, step.wantIx)
		}
	}
}

// An index page may name one item twice (its entry caught moving between
// two due times); DynamoDB refuses a BatchGetItem that lists a key twice,
// which failed the whole sweep run. The read asks for each item once and
// yields it once.
func TestBatchGetOfARepeatedKey(t *testing.T) {
	client := dynamoClient(t)
	table := tempTable(t, client)
	st := dynamo.New(client, table)
	ctx := t.Context()
	r := observedRecord("op-twice")
	r.Revision = 0
	rec, err := st.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	key := map[string]types.AttributeValue{
		dynamo.AttrPK: &types.AttributeValueMemberS{Value: "OP#" + rec.OperationID},
		dynamo.AttrSK: &types.AttributeValueMemberS{Value: "RECORD"},
	}
	items, err := st.BatchGet(ctx, []map[string]types.AttributeValue{key, key})
	if err != nil {
		t.Fatalf("batch get of a key listed twice: %v", err)
	}
	if len(items) != 1 {
		t.Fatalf("%d items, want the one", len(items))
	}
}
