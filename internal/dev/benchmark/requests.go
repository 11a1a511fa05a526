package benchmark

import (
	"context"
	"io"
	"math"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/dynamo"
)

// Requests counts the AWS requests and capacity that some work costs.
// Fields are float64 so that per-render means and scaled sums share the
// type.
type Requests struct {
	// SQS API requests. Receive and Delete count the event source
	// mapping's batches (one ReceiveMessage and one DeleteMessageBatch per
	// invocation); Send counts SendMessage.
	SQSSend, SQSReceive, SQSDelete, SQSChangeVisibility float64
	// DynamoDB API requests, and the capacity units they consume:
	// GetItem (strongly consistent), PutItem (conditional writes),
	// TransactWriteItems and Query.
	DynamoGet, DynamoPut, DynamoTransact, DynamoQuery float64
	// RRU and WRU are DynamoDB on-demand read and write request units,
	// the status index's writes included.
	RRU, WRU float64
	// ItemBytes sums the sizes of the operation items written, for their
	// mean size.
	ItemBytes float64
	// S3 requests of the artifact store (HeadObject, PutObject): counted,
	// not priced — both designs copy the same outputs.
	S3Head, S3Put float64
	// Schedules counts EventBridge Scheduler schedules (delays over SQS's
	// 900 s), each invoked once.
	Schedules float64
	// Lambda invocations and GB-seconds.
	LambdaInvocations, LambdaGBSeconds float64
	// SFNTransitions counts Step Functions Standard state transitions.
	SFNTransitions float64
	// ExpressRequests counts Step Functions Express executions started,
	// ExpressGBSeconds their billed duration × memory.
	ExpressRequests, ExpressGBSeconds float64
}

// Plus returns r+o field by field.
func (r Requests) Plus(o Requests) Requests {
	return Requests{
		SQSSend: r.SQSSend + o.SQSSend, SQSReceive: r.SQSReceive + o.SQSReceive, SQSDelete: r.SQSDelete + o.SQSDelete,
		SQSChangeVisibility: r.SQSChangeVisibility + o.SQSChangeVisibility,
		DynamoGet:           r.DynamoGet + o.DynamoGet, DynamoPut: r.DynamoPut + o.DynamoPut,
		DynamoTransact: r.DynamoTransact + o.DynamoTransact, DynamoQuery: r.DynamoQuery + o.DynamoQuery,
		RRU: r.RRU + o.RRU, WRU: r.WRU + o.WRU, ItemBytes: r.ItemBytes + o.ItemBytes, S3Head: r.S3Head + o.S3Head, S3Put: r.S3Put + o.S3Put,
		Schedules: r.Schedules + o.Schedules, LambdaInvocations: r.LambdaInvocations + o.LambdaInvocations,
		LambdaGBSeconds: r.LambdaGBSeconds + o.LambdaGBSeconds, SFNTransitions: r.SFNTransitions + o.SFNTransitions,
		ExpressRequests: r.ExpressRequests + o.ExpressRequests, ExpressGBSeconds: r.ExpressGBSeconds + o.ExpressGBSeconds,
	}
}

// Times returns r with every field multiplied by f.
func (r Requests) Times(f float64) Requests {
	return Requests{
		SQSSend: r.SQSSend * f, SQSReceive: r.SQSReceive * f, SQSDelete: r.SQSDelete * f, SQSChangeVisibility: r.SQSChangeVisibility * f,
		DynamoGet: r.DynamoGet * f, DynamoPut: r.DynamoPut * f, DynamoTransact: r.DynamoTransact * f, DynamoQuery: r.DynamoQuery * f,
		RRU: r.RRU * f, WRU: r.WRU * f, ItemBytes: r.ItemBytes * f, S3Head: r.S3Head * f, S3Put: r.S3Put * f, Schedules: r.Schedules * f,
		LambdaInvocations: r.LambdaInvocations * f, LambdaGBSeconds: r.LambdaGBSeconds * f, SFNTransitions: r.SFNTransitions * f,
		ExpressRequests: r.ExpressRequests * f, ExpressGBSeconds: r.ExpressGBSeconds * f,
	}
}

// SQS is the SQS requests in total.
func (r Requests) SQS() float64 {
	return r.SQSSend + r.SQSReceive + r.SQSDelete + r.SQSChangeVisibility
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
	writeUnit = 1024     // bytes per write request unit
	readUnit  = 4 * 1024 // bytes per strongly consistent read request unit
)

// units is how many units of size unit an item of n bytes takes (at
// least one).
func units(n, unit int) float64 { return math.Max(1, math.Ceil(float64(n)/float64(unit))) }

// recordSize is the DynamoDB item size of rec as dynamo.Store writes it:
// the record's attributes, the keys, the terminal flag and, while it is
// due, the status index attributes.
func recordSize(rec operation.Record) int {
	item, err := attributevalue.MarshalMap(rec)
	if err != nil {
		return writeUnit
	}
	n := itemSize(item)
	n += len(dynamo.AttrPK) + len("OP#") + len(rec.OperationID) + len(dynamo.AttrSK) + len("RECORD")
	n += len(dynamo.AttrTerminal) + 1
	if _, ok := rec.SweepDue(); ok {
		n += len(dynamo.AttrStatusPK) + len("ACTIVE#0") + len(dynamo.AttrStatusSK) + len("2006-01-02T15:04:05.000000000Z#") + len(rec.OperationID)
	}
	return n
}

// reviewSize is the DynamoDB item size of a review record.
func reviewSize(r review.Record) int {
	item, err := attributevalue.MarshalMap(r)
	if err != nil {
		return writeUnit
	}
	return itemSize(item) + 64 // keys and index attributes
}

// itemSize follows DynamoDB's item size rules: attribute names plus
// values; a number takes about one byte per two significant digits plus
// one; maps and lists take 3 bytes plus one per element.
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for k, v := range item {
		n += len(k) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch t := v.(type) {
	case *types.AttributeValueMemberS:
		return len(t.Value)
	case *types.AttributeValueMemberN:
		return (len(t.Value)+1)/2 + 1
	case *types.AttributeValueMemberB:
		return len(t.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberM:
		return 3 + len(t.Value) + itemSize(t.Value)
	case *types.AttributeValueMemberL:
		n := 3 + len(t.Value)
		for _, e := range t.Value {
			n += valueSize(e)
		}
		return n
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range t.Value {
			n += len(s)
		}
		return n
	}
	return 8
}

// recordCache remembers the last record each counting store saw, so a
// write can be charged for the status index entry it moves.
type recordCache struct {
	mu   sync.Mutex
	recs map[string]operation.Record
}

func (c *recordCache) get(id string) (operation.Record, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.recs[id]
	return r, ok
}

func (c *recordCache) put(r operation.Record) {
	c.mu.Lock()
	c.recs[r.OperationID] = r
	c.mu.Unlock()
}

// countingStore charges each store call to a function's counter as the
// DynamoDB store would issue it: Get → GetItem (strongly consistent),
// Create/Update/PutReview → PutItem with a condition, UpdateWithAudit →
// TransactWriteItems, Due → Query. Writes are charged for the sparse
// status index too: a put when a record enters it, a delete when it
// leaves, both when its key (the due time) moves.
type countingStore struct {
	store.Store
	c         *counter
	cache     *recordCache
	onWritten func(operation.Record)
}

func indexWrites(old *operation.Record, oldSize int, rec operation.Record, size int) float64 {
	var w float64
	oldDue, oldIn := time.Time{}, false
	if old != nil {
		oldDue, oldIn = old.SweepDue()
	}
	newDue, newIn := rec.SweepDue()
	switch {
	case oldIn && newIn && oldDue.Equal(newDue):
		w += units(size, writeUnit)
	case oldIn && newIn:
		w += units(oldSize, writeUnit) + units(size, writeUnit)
	case oldIn:
		w += units(oldSize, writeUnit)
	case newIn:
		w += units(size, writeUnit)
	}
	return w
}

func (s *countingStore) charge(rec operation.Record, transact bool) {
	size := recordSize(rec)
	var oldPtr *operation.Record
	oldSize := 0
	if old, ok := s.cache.get(rec.OperationID); ok {
		oldPtr, oldSize = &old, recordSize(old)
	}
	w := math.Max(units(size, writeUnit), units(oldSize, writeUnit)) + indexWrites(oldPtr, oldSize, rec, size)
	s.c.add(func(r *Requests) {
		r.ItemBytes += float64(size)
		if transact {
			r.DynamoTransact++
			r.WRU += 2 * w
		} else {
			r.DynamoPut++
			r.WRU += w
		}
	})
}

// Create is a conditional PutItem.
func (s *countingStore) Create(ctx context.Context, rec operation.Record) (operation.Record, error) {
	s.charge(rec, false)
	out, err := s.Store.Create(ctx, rec)
	if err == nil {
		s.cache.put(out)
	}
	return out, err
}

// Get is a strongly consistent GetItem.
func (s *countingStore) Get(ctx context.Context, id string) (operation.Record, error) {
	rec, err := s.Store.Get(ctx, id)
	size := 0
	if err == nil {
		size = recordSize(rec)
		s.cache.put(rec)
	}
	s.c.add(func(r *Requests) { r.DynamoGet++; r.RRU += units(size, readUnit) })
	return rec, err
}

// Update is a conditional PutItem.
func (s *countingStore) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	rec.Revision = expected + 1
	s.charge(rec, false)
	out, err := s.Store.Update(ctx, rec, expected)
	if err == nil {
		s.cache.put(out)
		if s.onWritten != nil {
			s.onWritten(out)
		}
	}
	return out, err
}

// UpdateWithAudit is a TransactWriteItems of the record and the entry.
func (s *countingStore) UpdateWithAudit(ctx context.Context, rec operation.Record, expected int64, e review.AuditEntry) (operation.Record, error) {
	rec.Revision = expected + 1
	s.charge(rec, true)
	out, err := s.Store.UpdateWithAudit(ctx, rec, expected, e)
	if err == nil {
		s.cache.put(out)
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
		r.WRU += 2 * units(size, writeUnit)
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

// ResolveReview is a conditional UpdateItem of the review that also takes
// it out of the open-review index (charged as a put).
func (s *countingStore) ResolveReview(ctx context.Context, id, by, reason string, at time.Time) error {
	s.c.add(func(r *Requests) { r.DynamoPut++; r.WRU += 2 })
	return s.Store.ResolveReview(ctx, id, by, reason, at)
}

// Due is one Query per status index shard.
func (s *countingStore) Due(ctx context.Context, t time.Time, limit int) ([]operation.Record, error) {
	recs, err := s.Store.Due(ctx, t, limit)
	s.c.add(func(r *Requests) { r.DynamoQuery += dynamo.StatusShards; r.RRU += float64(dynamo.StatusShards) })
	return recs, err
}

// countingSender is the SQS sender of one function: SendMessage, and a
// schedule for a delay SQS could not carry.
type countingSender struct {
	next schedule.QueueSender
	c    *counter
}

// Send is one SendMessage, and a schedule past SQS's longest delay.
func (s countingSender) Send(ctx context.Context, url string, body []byte, delay time.Duration) (string, error) {
	s.c.add(func(r *Requests) {
		r.SQSSend++
		if delay > schedule.DefaultMaxQueueDelay {
			r.Schedules++
		}
	})
	return s.next.Send(ctx, url, body, delay)
}

// visibilityChanger is what a lease renews with.
type visibilityChanger interface {
	ChangeVisibility(ctx context.Context, queueURL, receiptHandle string, timeout time.Duration) error
}

// countingExtender counts ChangeMessageVisibility.
type countingExtender struct {
	next visibilityChanger
	c    *counter
}

// ChangeVisibility is one ChangeMessageVisibility.
func (e countingExtender) ChangeVisibility(ctx context.Context, url, handle string, timeout time.Duration) error {
	e.c.add(func(r *Requests) { r.SQSChangeVisibility++ })
	return e.next.ChangeVisibility(ctx, url, handle, timeout)
}

// artifactStore is what the deliver handler needs of the artifact store.
type artifactStore interface {
	Stat(ctx context.Context, key string) (artifact.Object, bool, error)
	Put(ctx context.Context, key string, r io.Reader, size int64, sha256hex, contentType string) (artifact.Object, error)
}

// countingArtifacts counts S3 HeadObject and PutObject.
type countingArtifacts struct {
	next artifactStore
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
