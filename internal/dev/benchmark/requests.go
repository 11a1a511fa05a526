package benchmark

import (
	"context"
	"io"
	"math"
	"reflect"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/deliver"
	"github.com/genjobs/genjobs/internal/notify"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/dynamo"
	"github.com/genjobs/genjobs/internal/worker"
)

// Requests counts the AWS requests and capacity that some work costs.
// Fields are float64 so that per-render means and sums share the type.
type Requests struct {
	// SQS API requests. Receive and Delete count the event source
	// mapping's batches (one ReceiveMessage and one DeleteMessageBatch per
	// invocation); Send counts SendMessage.
	SQSSend, SQSReceive, SQSDelete, SQSChangeVisibility float64
	// DynamoDB API requests, and the capacity units they consume:
	// GetItem and BatchGetItem (strongly consistent), PutItem
	// (conditional writes), TransactWriteItems and Query.
	DynamoGet, DynamoPut, DynamoTransact, DynamoQuery float64
	// RRU and WRU are DynamoDB on-demand read and write request units,
	// the status index's writes included.
	RRU, WRU float64
	// IndexWRU is the share of WRU written to the status index (its
	// shards are partition keys with their own limit).
	IndexWRU float64
	// S3 requests of the artifact store (HeadObject, PutObject).
	S3Head, S3Put float64
	// LambdaInvocations counts the event source mappings' invocations.
	LambdaInvocations float64
	// Events counts the completion events sent (PutEvents entries, each
	// billed on its own).
	Events float64
}

// Plus returns r+o field by field.
func (r Requests) Plus(o Requests) Requests {
	return r.zip(o, func(a, b float64) float64 { return a + b })
}

// Times returns r with every field multiplied by f.
func (r Requests) Times(f float64) Requests {
	return r.zip(r, func(a, _ float64) float64 { return a * f })
}

// zip sets every field (all float64) of r to op of it and o's.
func (r Requests) zip(o Requests, op func(a, b float64) float64) Requests {
	rv, ov := reflect.ValueOf(&r).Elem(), reflect.ValueOf(o)
	for i := range rv.NumField() {
		rv.Field(i).SetFloat(op(rv.Field(i).Float(), ov.Field(i).Float()))
	}
	return r
}

// counter accumulates Requests from concurrent handlers.
type counter struct {
	mu sync.Mutex
	r  Requests
}

func (c *counter) add(f func(r *Requests)) {
	c.mu.Lock()
	f(&c.r)
	c.mu.Unlock()
}

func (c *counter) snapshot() Requests {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.r
}

// DynamoDB's capacity units and limits.
const (
	writeUnit   = dynamo.WriteUnit // bytes per write request unit
	readUnit    = 4 * 1024         // bytes per strongly consistent read request unit
	batchGetMax = 100              // keys per BatchGetItem
)

// units is how many units of size unit an item of n bytes takes (at
// least one).
func units(n, unit int) float64 { return math.Max(1, math.Ceil(float64(n)/float64(unit))) }

// recordItem is the item dynamo.Store writes for rec; nil if it cannot
// be encoded (never for a record a store accepted).
func recordItem(rec operation.Record) map[string]types.AttributeValue {
	item, err := dynamo.RecordItem(rec)
	if err != nil {
		return nil
	}
	return item
}

// recordSize is the DynamoDB item size of rec as dynamo.Store writes it
// (dynamo.ItemSize of dynamo.RecordItem: the store's own encoding).
func recordSize(rec operation.Record) int { return itemSize(recordItem(rec)) }

// itemSize is an encoded record's size; a record that would not encode
// (nil) is charged one write unit.
func itemSize(item map[string]types.AttributeValue) int {
	if item == nil {
		return writeUnit
	}
	return dynamo.ItemSize(item)
}

// reviewSize is the DynamoDB item size of a review record.
func reviewSize(r review.Record) int {
	item, err := attributevalue.MarshalMap(r)
	if err != nil {
		return writeUnit
	}
	return dynamo.ItemSize(item) + 64 // keys and index attributes
}

// reviewIndexUnits is the write to the keys-only status index when a
// review enters or leaves it: one small entry.
const reviewIndexUnits = 1

// countingStore charges each store call to a function's counter as the
// DynamoDB store would issue it: Get → GetItem (strongly consistent),
// Create/Update/PutReview → PutItem with a condition, UpdateWithAudit →
// TransactWriteItems, Due → Query, then BatchGetItem of what it lists.
// Writes are charged for the keys-only status index by DynamoDB's rules
// (dynamo.IndexWriteUnits): nothing while the record's due key stays, a
// small put when it enters, a delete when it leaves, both when it moves.
type countingStore struct {
	store.Store
	c *counter
	// cache holds the last record seen per operation id, so that a write
	// is charged for the index entry it moves.
	cache     *sync.Map
	onWritten func(operation.Record)
}

// auditEntryUnits is the audit entry's put in UpdateWithAudit's
// transaction: a small item, one unit.
const auditEntryUnits = 1

func (s *countingStore) charge(rec operation.Record, transact bool) {
	// Each record encoded once: the sizes and the index units come from
	// the same items.
	item := recordItem(rec)
	size := itemSize(item)
	var oldItem map[string]types.AttributeValue
	oldSize := 0
	if old, ok := s.cache.Load(rec.OperationID); ok {
		oldItem = recordItem(old.(operation.Record))
		oldSize = itemSize(oldItem)
	}
	idx := float64(dynamo.IndexWriteUnits(oldItem, item))
	w := float64(dynamo.WriteUnits(oldSize, size)) + idx
	s.c.add(func(r *Requests) {
		if transact {
			// A transaction's writes cost twice their units, the audit
			// entry's included.
			r.DynamoTransact++
			r.WRU += 2 * (w + auditEntryUnits)
			r.IndexWRU += 2 * idx
		} else {
			r.DynamoPut++
			r.WRU += w
			r.IndexWRU += idx
		}
	})
}

// Create is a conditional PutItem.
func (s *countingStore) Create(ctx context.Context, rec operation.Record) (operation.Record, error) {
	s.charge(rec, false)
	out, err := s.Store.Create(ctx, rec)
	if err == nil {
		s.cache.Store(out.OperationID, out)
	}
	return out, err
}

// Get is a strongly consistent GetItem.
func (s *countingStore) Get(ctx context.Context, id string) (operation.Record, error) {
	rec, err := s.Store.Get(ctx, id)
	size := 0
	if err == nil {
		size = recordSize(rec)
		s.cache.Store(rec.OperationID, rec)
	}
	s.c.add(func(r *Requests) { r.DynamoGet++; r.RRU += units(size, readUnit) })
	return rec, err
}

// Update is a conditional PutItem.
func (s *countingStore) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	rec.Revision = expected + 1
	s.charge(rec, false)
	return s.written(s.Store.Update(ctx, rec, expected))
}

// SetEvent is a conditional PutItem of the whole record (its completion
// event marked sent), which also takes it out of the due index.
// It changes no phase, so onWritten does not hear of it.
func (s *countingStore) SetEvent(ctx context.Context, rec operation.Record) (operation.Record, error) {
	s.charge(rec, false)
	out, err := s.Store.SetEvent(ctx, rec)
	if err == nil {
		s.cache.Store(out.OperationID, out)
	}
	return out, err
}

// UpdateWithAudit is a TransactWriteItems of the record and the entry.
func (s *countingStore) UpdateWithAudit(ctx context.Context, rec operation.Record, expected int64, e review.AuditEntry) (operation.Record, error) {
	rec.Revision = expected + 1
	s.charge(rec, true)
	return s.written(s.Store.UpdateWithAudit(ctx, rec, expected, e))
}

// written caches a successful update's record and hands it to onWritten.
func (s *countingStore) written(out operation.Record, err error) (operation.Record, error) {
	if err == nil {
		s.cache.Store(out.OperationID, out)
		if s.onWritten != nil {
			s.onWritten(out)
		}
	}
	return out, err
}

// PutReview is a conditional PutItem, indexed while open, after a plain
// PutItem of the reference that files it under its operation.
func (s *countingStore) PutReview(ctx context.Context, rv review.Record) (bool, error) {
	size := reviewSize(rv)
	s.c.add(func(r *Requests) {
		r.DynamoPut++
		r.WRU += units(size, writeUnit)
		if rv.Open {
			r.WRU += reviewIndexUnits
			r.IndexWRU += reviewIndexUnits
		}
		if rv.OperationID != "" {
			r.DynamoPut++
			r.WRU++
		}
	})
	return s.Store.PutReview(ctx, rv)
}

// OpenReviewsOf is a consistent Query of the operation's references, then
// a consistent GetItem per review (charged for those it returns).
func (s *countingStore) OpenReviewsOf(ctx context.Context, operationID string) ([]review.Record, error) {
	rs, err := s.Store.OpenReviewsOf(ctx, operationID)
	s.c.add(func(r *Requests) {
		r.DynamoQuery++
		r.RRU++
		for _, rv := range rs {
			r.DynamoGet++
			r.RRU += units(reviewSize(rv), readUnit)
		}
	})
	return rs, err
}

// ResolveReview is a conditional UpdateItem of the review (a small item:
// one unit) that also takes it out of the open-review index.
func (s *countingStore) ResolveReview(ctx context.Context, id, by, reason string, at time.Time) error {
	s.c.add(func(r *Requests) { r.DynamoPut++; r.WRU += 1 + reviewIndexUnits; r.IndexWRU += reviewIndexUnits })
	return s.Store.ResolveReview(ctx, id, by, reason, at)
}

// Due is one Query per status index shard (keys only: one unit each for
// any realistic page), then consistent BatchGetItem of the records it
// lists, charged per record.
func (s *countingStore) Due(ctx context.Context, t time.Time, limit int) ([]operation.Record, error) {
	recs, err := s.Store.Due(ctx, t, limit)
	s.c.add(func(r *Requests) {
		r.DynamoQuery += dynamo.StatusShards
		r.RRU += float64(dynamo.StatusShards)
		r.DynamoGet += math.Ceil(float64(len(recs)) / batchGetMax)
		for _, rec := range recs {
			r.RRU += units(recordSize(rec), readUnit)
		}
	})
	return recs, err
}

// countingSender counts one function's SendMessage.
type countingSender struct {
	next schedule.QueueSender
	c    *counter
}

// Send is one SendMessage.
func (s countingSender) Send(ctx context.Context, url string, body []byte, delay time.Duration) (string, error) {
	s.c.add(func(r *Requests) { r.SQSSend++ })
	return s.next.Send(ctx, url, body, delay)
}

// countingExtender counts ChangeMessageVisibility.
type countingExtender struct {
	next worker.Extender
	c    *counter
}

// ChangeVisibility is one ChangeMessageVisibility.
func (e countingExtender) ChangeVisibility(ctx context.Context, url, handle string, timeout time.Duration) error {
	e.c.add(func(r *Requests) { r.SQSChangeVisibility++ })
	return e.next.ChangeVisibility(ctx, url, handle, timeout)
}

// countingSink counts the completion events a function sends.
type countingSink struct{ c *counter }

// Publish is one PutEvents of the events, each an entry.
func (s countingSink) Publish(_ context.Context, events []notify.Event) error {
	s.c.add(func(r *Requests) { r.Events += float64(len(events)) })
	return nil
}

// countingArtifacts counts S3 HeadObject and PutObject.
type countingArtifacts struct {
	next deliver.Artifacts
	c    *counter
}

// Stat is one HeadObject.
func (a countingArtifacts) Stat(ctx context.Context, key string) (artifact.Object, bool, error) {
	a.c.add(func(r *Requests) { r.S3Head++ })
	return a.next.Stat(ctx, key)
}

// Put is one PutObject.
func (a countingArtifacts) Put(ctx context.Context, key string, rd io.Reader, size int64, sum, contentType string) (artifact.Object, error) {
	a.c.add(func(r *Requests) { r.S3Put++ })
	return a.next.Put(ctx, key, rd, size, sum, contentType)
}
