//go:build integration

package dynamo_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genjobs/genjobs/internal/dev/testenv"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/dynamo"
	"github.com/genjobs/genjobs/internal/store/storetest"
)

// dynamoClient talks to the DynamoDB Local named by
// AWS_ENDPOINT_URL_DYNAMODB (skipping, or failing under
// GENJOBS_REQUIRE_INTEGRATION=1, without one). Dummy credentials and a
// region come from config options when the environment has none, so the
// test process's environment stays untouched and tests may run parallel.
func dynamoClient(t testing.TB) *dynamodb.Client {
	t.Helper()
	testenv.Endpoint(t, "AWS_ENDPOINT_URL_DYNAMODB")
	var opts []func(*config.LoadOptions) error
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	}
	if os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
		opts = append(opts, config.WithRegion("us-east-1"))
	}
	client, err := dynamo.NewClient(context.Background(), opts...)
	if err != nil {
		t.Fatalf("dynamodb client: %v", err)
	}
	return client
}

// tempTable creates a table of its own for this test (random suffix, so
// runs and packages never collide) and deletes it when the test ends.
func tempTable(t testing.TB, client *dynamodb.Client) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := "genjobs-test-" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dynamo.EnsureTable(ctx, client, name); err != nil {
		t.Fatalf("ensure table: %v", err)
	}
	t.Cleanup(func() {
		// Not t.Context(): it is already canceled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)}); err != nil {
			t.Errorf("delete table %s: %v", name, err)
		}
	})
	return name
}

func TestConformance(t *testing.T) {
	client := dynamoClient(t)
	table := tempTable(t, client)
	storetest.Run(t, func(*testing.T) store.Store { return dynamo.New(client, table) })
}

// TestLostAck runs the lost-answer part of the suite with the real
// fault: the client's HTTP client lets DynamoDB Local apply a conditional
// write and then drops its answer, so the SDK's own retryer sends the
// write again (AckRetried), or every answer is dropped until the SDK
// gives up and the caller sends it again (AckErrored).
func TestLostAck(t *testing.T) {
	table := tempTable(t, dynamoClient(t))
	storetest.RunLostAck(t, func(t *testing.T) storetest.LostAck {
		// A client of its own per subtest: arming one subtest's fault
		// must not touch the writes of the others running in parallel.
		// The SDK's own HTTP client (with whatever the environment
		// configured on it) stays underneath.
		var d *ackDropper
		client := dynamodb.New(dynamoClient(t).Options(), func(o *dynamodb.Options) {
			d = &ackDropper{next: o.HTTPClient}
			o.HTTPClient = d
		})
		return storetest.LostAck{Store: dynamo.New(client, table), Lose: d.lose}
	})
}

// ackDropper is the SDK's HTTP client with the fault "DynamoDB applied the
// write, the answer never arrived": while armed, it sends a conditional
// write (PutItem, TransactWriteItems) on, reads DynamoDB's whole answer,
// and reports a connection reset instead, which the SDK's retryer
// retries. Other requests pass untouched.
type ackDropper struct {
	next  dynamodb.HTTPClient
	mu    sync.Mutex
	armed storetest.AckLoss
	lost  int
}

func (d *ackDropper) lose(loss storetest.AckLoss) func() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.armed, d.lost = loss, 0
	return func() int {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.armed = 0
		return d.lost
	}
}

// drop reports whether the answer to this request is to be lost.
func (d *ackDropper) drop(req *http.Request) bool {
	switch req.Header.Get("X-Amz-Target") {
	case "DynamoDB_20120810.PutItem", "DynamoDB_20120810.TransactWriteItems":
	default:
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch d.armed {
	case 0:
		return false
	case storetest.AckRetried:
		d.armed = 0 // only the first answer: the retry's is delivered
	}
	d.lost++
	return true
}

func (d *ackDropper) Do(req *http.Request) (*http.Response, error) {
	drop := d.drop(req)
	resp, err := d.next.Do(req)
	if err != nil || !drop {
		return resp, err
	}
	// The whole answer is read first: DynamoDB has applied the write.
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
}

func TestEnsureTableIdempotent(t *testing.T) {
	client := dynamoClient(t)
	table := tempTable(t, client)
	for range 2 {
		if err := dynamo.EnsureTable(t.Context(), client, table); err != nil {
			t.Fatalf("ensure existing table: %v", err)
		}
	}
}

// TestTableDefinitionMatchesTable checks that what DynamoDB built from
// TableDefinition is that definition: keys, attribute types, the GSI and
// its projection, and on-demand billing.
func TestTableDefinitionMatchesTable(t *testing.T) {
	client := dynamoClient(t)
	table := tempTable(t, client)
	out, err := client.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	got, want := out.Table, dynamo.TableDefinition(table)

	keys := func(ks []types.KeySchemaElement) map[string]types.KeyType {
		m := map[string]types.KeyType{}
		for _, k := range ks {
			m[aws.ToString(k.AttributeName)] = k.KeyType
		}
		return m
	}
	attrs := func(as []types.AttributeDefinition) map[string]types.ScalarAttributeType {
		m := map[string]types.ScalarAttributeType{}
		for _, a := range as {
			m[aws.ToString(a.AttributeName)] = a.AttributeType
		}
		return m
	}
	if !maps.Equal(keys(got.KeySchema), keys(want.KeySchema)) {
		t.Errorf("key schema %v, want %v", keys(got.KeySchema), keys(want.KeySchema))
	}
	if !maps.Equal(attrs(got.AttributeDefinitions), attrs(want.AttributeDefinitions)) {
		t.Errorf("attributes %v, want %v", attrs(got.AttributeDefinitions), attrs(want.AttributeDefinitions))
	}
	if got.BillingModeSummary == nil || got.BillingModeSummary.BillingMode != want.BillingMode {
		t.Errorf("billing mode %+v, want %s", got.BillingModeSummary, want.BillingMode)
	}
	if len(got.GlobalSecondaryIndexes) != len(want.GlobalSecondaryIndexes) {
		t.Fatalf("%d GSIs, want %d", len(got.GlobalSecondaryIndexes), len(want.GlobalSecondaryIndexes))
	}
	for _, w := range want.GlobalSecondaryIndexes {
		// DescribeTable lists indexes in no particular order.
		i := slices.IndexFunc(got.GlobalSecondaryIndexes, func(g types.GlobalSecondaryIndexDescription) bool {
			return aws.ToString(g.IndexName) == aws.ToString(w.IndexName)
		})
		if i < 0 {
			t.Errorf("no GSI named %q", aws.ToString(w.IndexName))
			continue
		}
		g := got.GlobalSecondaryIndexes[i]
		if !maps.Equal(keys(g.KeySchema), keys(w.KeySchema)) {
			t.Errorf("GSI %s keys %v, want %v", aws.ToString(w.IndexName), keys(g.KeySchema), keys(w.KeySchema))
		}
		if g.Projection == nil || g.Projection.ProjectionType != w.Projection.ProjectionType {
			t.Errorf("GSI %s projection %+v, want %s", aws.ToString(w.IndexName), g.Projection, w.Projection.ProjectionType)
		}
	}
	if len(got.LocalSecondaryIndexes) != 0 {
		t.Errorf("unexpected LSIs: %+v", got.LocalSecondaryIndexes)
	}
}

// TestItemLayout pins the documented single-table layout, which
// operators' ad-hoc queries and the template rely on, at the item level.
func TestItemLayout(t *testing.T) {
	client := dynamoClient(t)
	table := tempTable(t, client)
	st := dynamo.New(client, table)
	ctx := t.Context()
	due := time.Date(2025, 1, 2, 3, 4, 5, 600, time.UTC)

	raw := func(pk, sk string) map[string]types.AttributeValue {
		t.Helper()
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(table), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{
				dynamo.AttrPK: &types.AttributeValueMemberS{Value: pk},
				dynamo.AttrSK: &types.AttributeValueMemberS{Value: sk},
			},
		})
		if err != nil || len(out.Item) == 0 {
			t.Fatalf("get %s/%s: %v (found: %v)", pk, sk, err, len(out.Item) > 0)
		}
		return out.Item
	}
	s := func(item map[string]types.AttributeValue, name string) string {
		v, _ := item[name].(*types.AttributeValueMemberS)
		if v == nil {
			return "<absent>"
		}
		return v.Value
	}
	wantAttrs := func(what string, item map[string]types.AttributeValue, want map[string]string) {
		t.Helper()
		for name, w := range want {
			if g := s(item, name); g != w {
				t.Errorf("%s: %s = %q, want %q", what, name, g, w)
			}
		}
	}

	rec := operation.Record{OperationID: "layout-1", Phase: operation.PhaseAccepted, RemoteJobID: "job-1",
		Schedule: &operation.NextAction{Action: "observe_generation", Due: due}}
	v1, err := st.Create(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	item := raw("OP#layout-1", "RECORD")
	wantAttrs("scheduled record", item, map[string]string{
		"operation_id": "layout-1", "ph": "accepted",
		dynamo.AttrStatusSK: "2025-01-02T03:04:05.000000600Z#layout-1",
	})
	if pk := s(item, dynamo.AttrStatusPK); !slices.Contains([]string{"ACTIVE#0", "ACTIVE#1", "ACTIVE#2", "ACTIVE#3", "ACTIVE#4", "ACTIVE#5", "ACTIVE#6", "ACTIVE#7"}, pk) {
		t.Errorf("status_pk %q, want ACTIVE#0..7", pk)
	}
	if term, ok := item[dynamo.AttrTerminal]; ok {
		t.Errorf("terminal = %#v on an active record, want absent (absent is false)", term)
	}

	done := v1
	done.Phase, done.Timestamps.Updated = operation.PhaseDelivered, due
	v2, err := st.UpdateWithAudit(ctx, done, 1, review.AuditEntry{Operator: "alice", Action: operation.ActionAcknowledge})
	if err != nil {
		t.Fatal(err)
	}
	// In the index while its completion event is unsent, compactly; out
	// once it is sent.
	item = raw("OP#layout-1", "RECORD")
	wantAttrs("terminal record, event unsent", item, map[string]string{dynamo.AttrStatusSK: "2025-01-02T03:04:05.000000600Z#layout-1"})
	if ev, ok := item["ev"].(*types.AttributeValueMemberM); !ok || s(ev.Value, "ty") != string(operation.EventDelivered) {
		t.Errorf("event attribute %#v, want the compact map with ty %q", item["ev"], operation.EventDelivered)
	}
	v2.Event.Sent = true
	if _, err := st.SetEvent(ctx, v2); err != nil {
		t.Fatal(err)
	}
	item = raw("OP#layout-1", "RECORD")
	wantAttrs("terminal record, event sent", item, map[string]string{dynamo.AttrStatusPK: "<absent>", dynamo.AttrStatusSK: "<absent>"})
	if term, _ := item[dynamo.AttrTerminal].(*types.AttributeValueMemberBOOL); term == nil || !term.Value {
		t.Errorf("terminal = %#v, want true", item[dynamo.AttrTerminal])
	}
	wantAttrs("audit entry", raw("OP#layout-1", "AUDIT#00000000000000000002"), map[string]string{"operator": "alice"})

	if _, err := st.PutReview(ctx, review.Record{ID: "r-1", CreatedAt: due, Open: true}); err != nil {
		t.Fatal(err)
	}
	wantAttrs("open review", raw("REVIEW#r-1", "REVIEW"), map[string]string{
		dynamo.AttrStatusPK: "REVIEW#OPEN", dynamo.AttrStatusSK: "2025-01-02T03:04:05.000000600Z#r-1",
	})
	if err := st.CloseReview(ctx, "r-1", "bob", due); err != nil {
		t.Fatal(err)
	}
	wantAttrs("closed review", raw("REVIEW#r-1", "REVIEW"), map[string]string{
		dynamo.AttrStatusPK: "<absent>", dynamo.AttrStatusSK: "<absent>", "closed_by": "bob",
	})
	// A closed review of an operation leaves the index; it stays filed
	// under its operation (OperationReviews).
	if _, err := st.PutReview(ctx, review.Record{ID: "r-2", OperationID: "layout-1", RemoteJobID: "job-2", CreatedAt: due, Open: true}); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseReview(ctx, "r-2", "bob", due); err != nil {
		t.Fatal(err)
	}
	wantAttrs("closed review of an operation", raw("REVIEW#r-2", "REVIEW"), map[string]string{
		dynamo.AttrStatusPK: "<absent>", dynamo.AttrStatusSK: "<absent>",
		dynamo.AttrRemoteJobID: "job-2", dynamo.AttrOperationID: "layout-1",
	})
}

// TestConformsWithRetention runs the conformance suite on a store
// that writes expiries, with a clock before every time the suite uses:
// the expiry attribute and the readers' filter change nothing for items
// that have not expired.
func TestConformsWithRetention(t *testing.T) {
	client := dynamoClient(t)
	table := tempTable(t, client)
	early := func() time.Time { return time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) }
	storetest.Run(t, func(*testing.T) store.Store {
		return dynamo.New(client, table).WithRetention(dynamo.Retention{Records: 24 * time.Hour, Audit: 48 * time.Hour}, early)
	})
}

// TestRetention: terminal records, closed reviews and audit entries
// carry dynamo.AttrExpiresAt (epoch seconds, DynamoDB's TTL attribute) at
// their own time plus the retention; nothing else does; and the readers
// skip an expired item that DynamoDB has not deleted yet.
func TestRetention(t *testing.T) {
	ctx := context.Background()
	client := dynamoClient(t)
	table := tempTable(t, client)
	const records, audit = 90 * 24 * time.Hour, 400 * 24 * time.Hour
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var now time.Time
	st := dynamo.New(client, table).WithRetention(dynamo.Retention{Records: records, Audit: audit}, func() time.Time { return now })
	expiresAt := func(pk, sk string) (int64, bool) {
		t.Helper()
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: pk}, dynamo.AttrSK: &types.AttributeValueMemberS{Value: sk}}})
		if err != nil || out.Item == nil {
			t.Fatalf("raw get %s/%s: %v (item %v)", pk, sk, err, out.Item)
		}
		v, ok := out.Item[dynamo.AttrExpiresAt].(*types.AttributeValueMemberN)
		if !ok {
			return 0, false
		}
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			t.Fatalf("%s is not a whole number: %q", dynamo.AttrExpiresAt, v.Value)
		}
		return n, true
	}
	now = t0

	// An active record never expires; the write that finishes it sets the
	// expiry from its own Updated time.
	rec, err := st.Create(ctx, operation.Record{OperationID: "op-ttl", Phase: operation.PhaseAccepted, Timestamps: operation.Timestamps{Created: t0, Updated: t0}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := expiresAt("OP#op-ttl", "RECORD"); ok {
		t.Error("an active record carries an expiry")
	}
	done := t0.Add(time.Hour)
	rec.Phase, rec.Timestamps.Updated = operation.PhaseDelivered, done
	if _, err := st.Update(ctx, rec, rec.Revision); err != nil {
		t.Fatal(err)
	}
	if got, ok := expiresAt("OP#op-ttl", "RECORD"); !ok || got != done.Add(records).Unix() {
		t.Errorf("terminal record expires at %d (%v), want %d", got, ok, done.Add(records).Unix())
	}

	// Audit entries expire from their own time, after the retention for audits.
	ent := review.AuditEntry{Operator: "ops", Action: operation.ActionObserve, At: t0}
	rec2, err := st.Create(ctx, operation.Record{OperationID: "op-audit", Phase: operation.PhaseStalled, Timestamps: operation.Timestamps{Created: t0, Updated: t0}})
	if err != nil {
		t.Fatal(err)
	}
	rec2.Phase = operation.PhaseAccepted
	if _, err := st.UpdateWithAudit(ctx, rec2, rec2.Revision, ent); err != nil {
		t.Fatal(err)
	}
	if got, ok := expiresAt("OP#op-audit", "AUDIT#00000000000000000002"); !ok || got != t0.Add(audit).Unix() {
		t.Errorf("audit entry expires at %d (%v), want %d", got, ok, t0.Add(audit).Unix())
	}

	// An open review never expires; closing it starts its retention.
	rv := review.Record{ID: "rv-ttl", OperationID: "op-audit", Source: review.SourceSweep, CreatedAt: t0, Open: true}
	if _, err := st.PutReview(ctx, rv); err != nil {
		t.Fatal(err)
	}
	if _, ok := expiresAt("REVIEW#rv-ttl", "REVIEW"); ok {
		t.Error("an open review carries an expiry")
	}
	closed := t0.Add(2 * time.Hour)
	if err := st.ResolveReview(ctx, "rv-ttl", "ops", "settled", closed); err != nil {
		t.Fatal(err)
	}
	if got, ok := expiresAt("REVIEW#rv-ttl", "REVIEW"); !ok || got != closed.Add(records).Unix() {
		t.Errorf("closed review expires at %d (%v), want %d", got, ok, closed.Add(records).Unix())
	}

	// Readers: each item is there until its expiry and gone from then on,
	// though DynamoDB Local (like DynamoDB, for days) still holds it.
	for _, tt := range []struct {
		name string
		at   time.Time
		seen func() bool
	}{
		{"terminal record", done.Add(records), func() bool { _, err := st.Get(ctx, "op-ttl"); return err == nil }},
		{"closed review", closed.Add(records), func() bool { _, err := st.GetReview(ctx, "rv-ttl"); return err == nil }},
		{"closed review of its operation", closed.Add(records), func() bool {
			rs, err := st.OperationReviews(ctx, "op-audit")
			if err != nil {
				t.Fatal(err)
			}
			return len(rs) == 1
		}},
		{"audit entry", t0.Add(audit), func() bool {
			es, err := st.Audit(ctx, "op-audit")
			if err != nil {
				t.Fatal(err)
			}
			return len(es) == 1
		}},
	} {
		now = tt.at.Add(-time.Second)
		if !tt.seen() {
			t.Errorf("%s: gone a second before its expiry", tt.name)
		}
		now = tt.at
		if tt.seen() {
			t.Errorf("%s: still read at its expiry", tt.name)
		}
	}
	now = t0
	if _, err := st.Get(ctx, "op-ttl"); err != nil {
		t.Errorf("before expiry: %v", err)
	}
	now = done.Add(records)
	if _, err := st.Get(ctx, "op-ttl"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("expired record: %v, want ErrNotFound", err)
	}

	// Without a retention nothing expires, and a terminal record with no
	// Updated time is never given an expiry in the past.
	plain := dynamo.New(client, table)
	if _, err := plain.Create(ctx, operation.Record{OperationID: "op-keep", Phase: operation.PhaseRejected, Timestamps: operation.Timestamps{Updated: t0}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := expiresAt("OP#op-keep", "RECORD"); ok {
		t.Error("a store without retention wrote an expiry")
	}
	if _, err := st.Create(ctx, operation.Record{OperationID: "op-undated", Phase: operation.PhaseRejected}); err != nil {
		t.Fatal(err)
	}
	if _, ok := expiresAt("OP#op-undated", "RECORD"); ok {
		t.Error("a terminal record without an Updated time got an expiry")
	}
}
