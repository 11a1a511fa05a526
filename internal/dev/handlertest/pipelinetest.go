// Package handlertest supports tests that drive the real handlers: it
// starts the Genace simulator over HTTP, opens a real store (the bbolt
// file, or DynamoDB Local under the integration tag), and records the
// follow-up messages handlers send so a test can deliver them, drop them
// or deliver them twice.
package handlertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/bolt"
)

// APIKey is the simulator's key in tests.
const APIKey = "test-key-never-logged"

// Start is the fixed start of every test's manual clock.
var Start = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

// Sim starts the simulator on the clock and returns it with a client.
func Sim(t testing.TB, clk clock.Clock, cfg genacesim.Config) (*genacesim.Simulator, *genace.Client) {
	t.Helper()
	cfg.APIKey = APIKey
	sim := genacesim.New(cfg, clk)
	srv := httptest.NewServer(sim)
	t.Cleanup(func() { sim.Close(); srv.Close() })
	c, err := genace.New(srv.URL, APIKey, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	return sim, c
}

// OpenStore opens a fresh store of the given kind: "bolt" (as genjobs
// local opens it: every commit fsync'd), "bolt-nosync" (the same file
// without fsync, for benchmarks that separate CPU from storage latency),
// or "dynamodb" (through the opener the integration build registers).
func OpenStore(t testing.TB, kind string) store.Store {
	t.Helper()
	switch kind {
	case "bolt", "bolt-nosync":
		s, err := bolt.OpenWith(filepath.Join(t.TempDir(), "genjobs.db"), bolt.Options{NoSync: kind == "bolt-nosync"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	case "dynamodb":
		if openDynamo == nil {
			t.Fatal("dynamodb store requested in a build without the integration tag")
		}
		return openDynamo(t)
	}
	t.Fatalf("unknown store kind %q", kind)
	return nil
}

// openDynamo is set by the integration build.
var openDynamo func(t testing.TB) store.Store

// Prepared returns an authorized, prepared operation ready to dispatch.
func Prepared(id string) operation.Record {
	return operation.Record{
		OperationID: id, SpecRevision: 1, Phase: operation.PhasePrepared, UserID: "user-1", Model: "flux-pro-2",
		Input:      json.RawMessage(`{"prompt":"a lighthouse at dusk","size":"1024x1024"}`),
		Authorized: true, AuthorizedSpecRevision: 1, BudgetCredits: 50, EstimatedCredits: 12,
		Timestamps: operation.Timestamps{Created: Start, Updated: Start},
	}
}

// Create stores rec and returns it as written (revision 1).
func Create(t testing.TB, s store.Store, rec operation.Record) operation.Record {
	t.Helper()
	out, err := s.Create(context.Background(), rec)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Get reads a record or fails the test.
func Get(t testing.TB, s store.Store, id string) operation.Record {
	t.Helper()
	r, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Sent is one message a handler sent.
type Sent struct {
	ID    string
	Env   message.Envelope
	Delay time.Duration
}

// Outbox records sent messages. FailNext makes the next n sends fail, as a
// crash between a write and its send would leave things.
type Outbox struct {
	mu       sync.Mutex
	sent     []Sent
	failNext int
	seq      int
}

// Send records env.
func (o *Outbox) Send(_ context.Context, env message.Envelope, delay time.Duration) (schedule.Route, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := env.Validate(); err != nil {
		return "", err
	}
	if o.failNext > 0 {
		o.failNext--
		return "", errors.New("outbox: injected send failure")
	}
	o.seq++
	o.sent = append(o.sent, Sent{ID: "sent-" + strconv.Itoa(o.seq), Env: env, Delay: delay})
	return schedule.RouteSQS, nil
}

// FailNext makes the next n sends fail.
func (o *Outbox) FailNext(n int) { o.mu.Lock(); o.failNext = n; o.mu.Unlock() }

// Take returns and clears what was sent.
func (o *Outbox) Take() []Sent {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.sent
	o.sent = nil
	return out
}

// Len reports how many messages wait in the outbox.
func (o *Outbox) Len() int { o.mu.Lock(); defer o.mu.Unlock(); return len(o.sent) }

// Extender renews leases, or fails to.
type Extender struct {
	mu    sync.Mutex
	Fail  bool
	Calls int
}

// ChangeVisibility records the call and fails when told to.
func (e *Extender) ChangeVisibility(context.Context, string, string, time.Duration) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.Calls++
	if e.Fail {
		return errors.New("extender: injected renewal failure")
	}
	return nil
}

// Event wraps envelopes as one SQS batch; ids name the messages (their
// ids stay the same across redeliveries, as in SQS).
func Event(t testing.TB, sentAt time.Time, msgs ...Sent) events.SQSEvent {
	t.Helper()
	var ev events.SQSEvent
	for i, m := range msgs {
		body, err := m.Env.Encode()
		if err != nil {
			t.Fatal(err)
		}
		id := m.ID
		if id == "" {
			id = fmt.Sprintf("msg-%d", i)
		}
		ev.Records = append(ev.Records, events.SQSMessage{
			MessageId: id, ReceiptHandle: "rh-" + id, Body: string(body), EventSource: "aws:sqs",
			Attributes: map[string]string{"SentTimestamp": strconv.FormatInt(sentAt.UnixMilli(), 10), "ApproximateReceiveCount": "1"},
		})
	}
	return ev
}

// Raw wraps an arbitrary body as a one-record batch.
func Raw(id, body string) events.SQSEvent {
	return events.SQSEvent{Records: []events.SQSMessage{{MessageId: id, ReceiptHandle: "rh-" + id, Body: body, EventSource: "aws:sqs"}}}
}

// Dispatch is the first submit message for a record.
func Dispatch(rec operation.Record) Sent {
	return Sent{ID: "dispatch-" + rec.OperationID, Env: message.Envelope{Action: message.ActionSubmitGeneration, OperationID: rec.OperationID, ExpectedRevision: rec.Revision}}
}

// Failed lists the failed message ids of a batch response.
func Failed(resp events.SQSEventResponse) []string {
	var ids []string
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

// StoreKinds lists the stores every handler test runs against: the bbolt
// file always, DynamoDB Local in the integration build.
func StoreKinds() []string {
	if openDynamo != nil {
		return []string{"bolt", "dynamodb"}
	}
	return []string{"bolt"}
}

// Buffer is a bytes.Buffer safe for the concurrent writes of a logger or
// a metrics emitter shared by a batch's goroutines.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }

// String returns everything written so far.
func (s *Buffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
