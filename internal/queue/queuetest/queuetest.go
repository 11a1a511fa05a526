// Package queuetest is the conformance suite for the queues genjobs runs
// on: the SQS adapter (package queue, run against moto) and the embedded
// queue of the local stack and the simulation (package localqueue). Both
// run the same tests, so a handler tested locally meets the semantics it
// gets in AWS.
//
// Every expected result comes from AWS's documentation of standard queues
// (each test names the section), not from what the implementations agree
// on. Where a backend knowingly differs it declares the difference in
// Features; the suite then checks the declared behaviour instead, so an
// undeclared difference fails, and so does a declared one the backend no
// longer has. Nothing is skipped.
//
// It is test support: import it from _test files only, never from code
// the Lambdas link.
package queuetest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// Backend is one queue implementation as the suite drives it. Each test
// gets its own Backend (Run calls the factory per test), so a backend on
// a manual clock can advance it without disturbing other tests.
type Backend interface {
	// NewQueue creates an empty standard queue for the calling test and
	// returns its URL. With cfg.MaxReceiveCount > 0 the queue gets a
	// redrive policy to a new dead-letter queue, whose URL is dlq.
	NewQueue(t *testing.T, cfg QueueConfig) (url, dlq string)
	// Send puts body on the queue, invisible for delay (whole seconds).
	Send(ctx context.Context, url string, body []byte, delay time.Duration) (id string, err error)
	// Receive returns up to max of the messages visible now and hides
	// them for visibility (whole seconds; 0 means the queue's own). A
	// backend over a real service waits as long as it must for "now" to
	// hold; it returns an error for arguments the service rejects.
	Receive(ctx context.Context, url string, max int, visibility time.Duration) ([]Message, error)
	// ChangeVisibility hides the received message for timeout from now.
	ChangeVisibility(ctx context.Context, url, receiptHandle string, timeout time.Duration) error
	// Delete removes the received message.
	Delete(ctx context.Context, url, receiptHandle string) error
	// Sleep lets d pass on the queue's clock: it advances a manual clock,
	// or sleeps.
	Sleep(d time.Duration)
	// Now reads the queue's clock.
	Now() time.Time
}

// QueueConfig is what a test asks of a new queue.
type QueueConfig struct {
	// Visibility is the queue's VisibilityTimeout (whole seconds, > 0).
	Visibility time.Duration
	// MaxReceiveCount is the redrive policy's maxReceiveCount; 0 means no
	// dead-letter queue.
	MaxReceiveCount int
}

// Message is a received message with the system attributes genjobs reads.
type Message struct {
	ID            string
	Body          []byte
	ReceiptHandle string
	// ReceiveCount is ApproximateReceiveCount.
	ReceiveCount int
	// SentAt is SentTimestamp.
	SentAt time.Time
	// FirstReceivedAt is ApproximateFirstReceiveTimestamp.
	FirstReceivedAt time.Time
}

// Features declares where a backend knowingly differs from SQS. The zero
// value is SQS as documented; each field says what SQS does and what a
// backend that sets it does instead (and is then checked for).
type Features struct {
	// DelaysBeyondMax: Send accepts delays longer than 900 s. SQS rejects
	// a DelaySeconds above 900 (15 minutes); genjobs sends longer waits
	// through EventBridge Scheduler. The embedded queue takes them because
	// the local stack and the simulation route those waits through the
	// queue (their dispatcher allows 365 days).
	DelaysBeyondMax bool
	// ReceiveBeyondTen: Receive accepts more than 10 messages at once.
	// SQS's MaxNumberOfMessages is 1..10; the embedded queue serves
	// Lambda-sized batches to the local event source mapping.
	ReceiveBeyondTen bool
	// ExactlyOnceInOrder: each receive hands out every visible message at
	// most once and the earliest visible first (ties in send order), and
	// a receive returns as many as are visible, up to max. SQS standard
	// queues deliver at least once, in best-effort order, and a receive
	// may return fewer messages than are visible. The embedded queue is
	// exact so a simulation replays; duplicates are the simulation's to
	// inject.
	ExactlyOnceInOrder bool
	// StaleDeleteFails: Delete with a receipt handle from an earlier
	// receive fails and deletes nothing. SQS answers success and "the
	// message might not be deleted". The embedded queue fails it so a
	// worker that lost its lease learns so instead of deleting its
	// successor's message.
	StaleDeleteFails bool
}

// Timing: visibility timeouts and delays of one or two seconds keep a run
// against a real-time emulator short; slack covers a real clock's request
// latency and the emulator's own timer resolution. Checks before an
// expiry are made slack early, checks after it slack late.
const (
	unit  = time.Second
	slack = 400 * time.Millisecond
	// stampTolerance bounds how far a reported timestamp (ms precision,
	// taken on the server) may sit from the client's reading.
	stampTolerance = 500 * time.Millisecond
)

// Run runs every test of the suite on backends made by newBackend, with
// the differences f declares.
func Run(t *testing.T, newBackend func(t *testing.T) Backend, f Features) {
	tests := []struct {
		name string
		fn   func(*testing.T, Backend, Features)
	}{
		{"VisibilityTimeout", testVisibilityTimeout},
		{"ReceiveVisibilityOverride", testReceiveVisibilityOverride},
		{"ChangeVisibilityExtends", testChangeVisibilityExtends},
		{"ChangeVisibilityZeroReleases", testChangeVisibilityZeroReleases},
		{"ReceiveCountIncrements", testReceiveCountIncrements},
		{"Timestamps", testTimestamps},
		{"DelaySeconds", testDelaySeconds},
		{"DelaySecondsMaximum", testDelaySecondsMaximum},
		{"RedriveAfterMaxReceiveCount", testRedrive},
		{"BatchReceiveUpToTen", testBatchReceive},
		{"ReceiveMoreThanTen", testReceiveMoreThanTen},
		{"DeleteCurrentHandle", testDeleteCurrentHandle},
		{"DeleteStaleHandle", testDeleteStaleHandle},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newBackend(t), f)
		})
	}
}

// Visibility timeout: a received message stays in the queue, hidden from
// other receives until the visibility timeout expires, and is then
// delivered again, with a new receipt handle.
// SQS Developer Guide, "Amazon SQS visibility timeout"; API Reference,
// ReceiveMessage ("each time you receive a message ... a different
// receipt handle").
func testVisibilityTimeout(t *testing.T, b Backend, _ Features) {
	ctx := t.Context()
	url, _ := b.NewQueue(t, QueueConfig{Visibility: 2 * unit})
	id := send(t, b, url, "visibility", 0)

	first := receiveOne(t, b, url, 0, "first receive")
	if first.ID != id {
		t.Fatalf("received %s, want %s", first.ID, id)
	}
	receiveNone(t, b, url, "right after the receive")
	b.Sleep(2*unit - slack)
	receiveNone(t, b, url, "before the 2 s visibility timeout expired")
	b.Sleep(2 * slack)
	again := receiveOne(t, b, url, 0, "after the visibility timeout")
	if again.ID != id || !bytes.Equal(again.Body, first.Body) {
		t.Errorf("redelivered %s %q, want %s %q", again.ID, again.Body, id, first.Body)
	}
	if again.ReceiptHandle == first.ReceiptHandle {
		t.Error("the redelivery reused the first receipt handle")
	}
	mustDelete(ctx, t, b, url, again.ReceiptHandle)
}

// ReceiveMessage's VisibilityTimeout hides the received messages for that
// long instead of the queue's timeout.
// API Reference, ReceiveMessage, request parameter VisibilityTimeout.
func testReceiveVisibilityOverride(t *testing.T, b Backend, _ Features) {
	url, _ := b.NewQueue(t, QueueConfig{Visibility: 30 * unit})
	send(t, b, url, "override", 0)
	m := receiveOne(t, b, url, unit, "receive with a 1 s visibility")
	b.Sleep(unit + slack)
	again := receiveOne(t, b, url, 0, "1 s after, well inside the queue's 30 s")
	if again.ID != m.ID {
		t.Errorf("redelivered %s, want %s", again.ID, m.ID)
	}
	mustDelete(t.Context(), t, b, url, again.ReceiptHandle)
}

// ChangeMessageVisibility hides a message in flight for the new timeout
// counted from the call, whatever the queue's timeout.
// API Reference, ChangeMessageVisibility ("the 10 seconds begin to count
// from the time that you make the ChangeMessageVisibility call").
func testChangeVisibilityExtends(t *testing.T, b Backend, _ Features) {
	ctx := t.Context()
	url, _ := b.NewQueue(t, QueueConfig{Visibility: unit})
	send(t, b, url, "extend", 0)
	m := receiveOne(t, b, url, 0, "first receive")
	if err := b.ChangeVisibility(ctx, url, m.ReceiptHandle, 3*unit); err != nil {
		t.Fatalf("extend to 3 s: %v", err)
	}
	b.Sleep(unit + slack)
	receiveNone(t, b, url, "past the queue's 1 s, inside the extended 3 s")
	b.Sleep(2*unit - 2*slack)
	receiveNone(t, b, url, "just before the extended 3 s ran out")
	b.Sleep(2 * slack)
	again := receiveOne(t, b, url, 0, "after the extended 3 s")
	if again.ID != m.ID {
		t.Errorf("redelivered %s, want %s", again.ID, m.ID)
	}
	mustDelete(ctx, t, b, url, again.ReceiptHandle)
}

// A visibility timeout of 0 makes the message visible at once; and the
// changed timeout is not kept for the message: the next receive hides it
// for the queue's timeout again.
// SQS Developer Guide, "Amazon SQS visibility timeout" (terminating the
// timeout by setting it to 0); API Reference, ChangeMessageVisibility
// ("the visibility timeout for the message reverts to the original
// timeout value ... the next time the message is received").
func testChangeVisibilityZeroReleases(t *testing.T, b Backend, _ Features) {
	ctx := t.Context()
	url, _ := b.NewQueue(t, QueueConfig{Visibility: unit})
	send(t, b, url, "release", 0)
	m := receiveOne(t, b, url, 0, "first receive")
	if err := b.ChangeVisibility(ctx, url, m.ReceiptHandle, 3*unit); err != nil {
		t.Fatalf("extend to 3 s: %v", err)
	}
	if err := b.ChangeVisibility(ctx, url, m.ReceiptHandle, 0); err != nil {
		t.Fatalf("release with 0: %v", err)
	}
	again := receiveOne(t, b, url, 0, "right after the release")
	if again.ID != m.ID {
		t.Fatalf("received %s, want %s", again.ID, m.ID)
	}
	b.Sleep(unit + slack)
	third := receiveOne(t, b, url, 0, "1 s after the second receive (the queue's timeout, not the 3 s set before)")
	if third.ID != m.ID {
		t.Errorf("received %s, want %s", third.ID, m.ID)
	}
	mustDelete(ctx, t, b, url, third.ReceiptHandle)
}

// ApproximateReceiveCount counts the receives of a message, this one
// included.
// API Reference, ReceiveMessage, MessageSystemAttributeNames:
// "ApproximateReceiveCount – Returns the number of times a message has
// been received across all queues but not deleted."
func testReceiveCountIncrements(t *testing.T, b Backend, _ Features) {
	url, _ := b.NewQueue(t, QueueConfig{Visibility: unit})
	send(t, b, url, "count", 0)
	var last Message
	for i := 1; i <= 3; i++ {
		if i > 1 {
			b.Sleep(unit + slack)
		}
		last = receiveOne(t, b, url, 0, fmt.Sprintf("receive %d", i))
		if last.ReceiveCount != i {
			t.Errorf("receive %d: ApproximateReceiveCount %d, want %d", i, last.ReceiveCount, i)
		}
	}
	mustDelete(t.Context(), t, b, url, last.ReceiptHandle)
}

// SentTimestamp is when the message was sent; ApproximateFirstReceive-
// Timestamp when it was first received, and stays so on redelivery.
// API Reference, ReceiveMessage, MessageSystemAttributeNames
// ("SentTimestamp – Returns the time the message was sent to the queue";
// "ApproximateFirstReceiveTimestamp – Returns the time the message was
// first received from the queue", both epoch milliseconds).
func testTimestamps(t *testing.T, b Backend, _ Features) {
	url, _ := b.NewQueue(t, QueueConfig{Visibility: unit})
	sentAt := b.Now()
	send(t, b, url, "stamps", 0)
	b.Sleep(2 * unit)
	firstAt := b.Now()
	first := receiveOne(t, b, url, 0, "first receive")
	b.Sleep(unit + slack)
	second := receiveOne(t, b, url, 0, "second receive")

	checkStamp(t, "SentTimestamp on the first receive", first.SentAt, sentAt)
	checkStamp(t, "SentTimestamp on the second receive", second.SentAt, sentAt)
	checkStamp(t, "ApproximateFirstReceiveTimestamp on the first receive", first.FirstReceivedAt, firstAt)
	checkStamp(t, "ApproximateFirstReceiveTimestamp on the second receive", second.FirstReceivedAt, firstAt)
	mustDelete(t.Context(), t, b, url, second.ReceiptHandle)
}

// DelaySeconds keeps a message invisible until the delay has passed.
// API Reference, SendMessage, DelaySeconds ("Messages with a positive
// DelaySeconds value become available for processing after the delay
// period is finished"); SQS Developer Guide, "Amazon SQS message timers".
func testDelaySeconds(t *testing.T, b Backend, _ Features) {
	url, _ := b.NewQueue(t, QueueConfig{Visibility: 30 * unit})
	id := send(t, b, url, "delayed", 2*unit)
	receiveNone(t, b, url, "right after a send delayed 2 s")
	b.Sleep(2*unit - slack)
	receiveNone(t, b, url, "before the 2 s delay passed")
	b.Sleep(2 * slack)
	m := receiveOne(t, b, url, 0, "after the 2 s delay")
	if m.ID != id {
		t.Errorf("received %s, want %s", m.ID, id)
	}
	mustDelete(t.Context(), t, b, url, m.ReceiptHandle)
}

// DelaySeconds is at most 900 (15 minutes): 900 is accepted and hides the
// message; more is rejected.
// API Reference, SendMessage, DelaySeconds ("Valid values: 0 to 900.
// Maximum: 15 minutes"); SQS Developer Guide, "Amazon SQS delay queues".
func testDelaySecondsMaximum(t *testing.T, b Backend, f Features) {
	ctx := t.Context()
	url, _ := b.NewQueue(t, QueueConfig{Visibility: 30 * unit})
	send(t, b, url, "fifteen minutes", 900*time.Second)
	receiveNone(t, b, url, "right after a send delayed 900 s")

	_, err := b.Send(ctx, url, []byte("sixteen minutes"), 901*time.Second)
	switch {
	case f.DelaysBeyondMax && err != nil:
		t.Errorf("send delayed 901 s: %v; declared DelaysBeyondMax", err)
	case !f.DelaysBeyondMax && err == nil:
		t.Error("send delayed 901 s succeeded; SQS rejects DelaySeconds above 900")
	}
	receiveNone(t, b, url, "after sends delayed 900 s and 901 s")
}

// A message received maxReceiveCount times without being deleted is moved
// to the dead-letter queue instead of being delivered again; it keeps its
// id, body and enqueue time there, and its receive count counts the
// receives from both queues.
// SQS Developer Guide, "Using dead-letter queues in Amazon SQS" (the
// redrive policy's maxReceiveCount) and "Setting-up dead-letter queue
// retention" ("When a message is moved to a dead-letter queue, the
// enqueue timestamp is unchanged"); API Reference, ReceiveMessage
// (ApproximateReceiveCount counts receives "across all queues").
func testRedrive(t *testing.T, b Backend, _ Features) {
	url, dlq := b.NewQueue(t, QueueConfig{Visibility: unit, MaxReceiveCount: 2})
	id := send(t, b, url, "poison", 0)
	var first Message
	for i := 1; i <= 2; i++ {
		if i > 1 {
			b.Sleep(unit + slack)
		}
		m := receiveOne(t, b, url, 0, fmt.Sprintf("receive %d of maxReceiveCount 2", i))
		if m.ID != id {
			t.Fatalf("receive %d: got %s, want %s", i, m.ID, id)
		}
		if i == 1 {
			first = m
		}
	}
	b.Sleep(unit + slack)
	receiveNone(t, b, url, "after maxReceiveCount receives")
	dead := receiveOne(t, b, dlq, 0, "from the dead-letter queue")
	if dead.ID != id || !bytes.Equal(dead.Body, first.Body) {
		t.Errorf("dead-letter queue holds %s %q, want %s %q", dead.ID, dead.Body, id, first.Body)
	}
	if !dead.SentAt.Equal(first.SentAt) {
		t.Errorf("SentTimestamp in the dead-letter queue %v, want the original %v", dead.SentAt, first.SentAt)
	}
	if dead.ReceiveCount != 3 {
		t.Errorf("ApproximateReceiveCount in the dead-letter queue %d, want 3", dead.ReceiveCount)
	}
	mustDelete(t.Context(), t, b, dlq, dead.ReceiptHandle)
	receiveNone(t, b, url, "source queue after the move")
}

// One receive returns at most MaxNumberOfMessages, which is 1..10, and
// never more than asked for; repeated receives drain the queue.
// API Reference, ReceiveMessage ("Retrieves one or more messages (up to
// 10)"; MaxNumberOfMessages: "Amazon SQS never returns more messages than
// this value (however, fewer messages might be returned). Valid values: 1
// to 10"); SQS Developer Guide, "Amazon SQS standard queues" (at-least-
// once delivery, best-effort ordering).
func testBatchReceive(t *testing.T, b Backend, f Features) {
	ctx := t.Context()
	url, _ := b.NewQueue(t, QueueConfig{Visibility: 30 * unit})
	const n = 12
	var ids []string
	for i := range n {
		ids = append(ids, send(t, b, url, fmt.Sprintf("batch %02d", i), 0))
	}

	seen := map[string]bool{}
	var order []string
	for round := 0; len(seen) < n && round < 10; round++ {
		msgs, err := b.Receive(ctx, url, 10, 0)
		if err != nil {
			t.Fatalf("receive 10: %v", err)
		}
		if len(msgs) > 10 {
			t.Fatalf("one receive returned %d messages, more than the 10 asked for", len(msgs))
		}
		if f.ExactlyOnceInOrder {
			if want := min(10, n-len(seen)); len(msgs) != want {
				t.Errorf("round %d: %d messages, want %d (all visible, up to 10)", round, len(msgs), want)
			}
		}
		for _, m := range msgs {
			if seen[m.ID] && f.ExactlyOnceInOrder {
				t.Errorf("message %s delivered twice; declared ExactlyOnceInOrder", m.ID)
			}
			if !seen[m.ID] {
				order = append(order, m.ID)
			}
			seen[m.ID] = true
			mustDelete(ctx, t, b, url, m.ReceiptHandle)
		}
	}
	for _, id := range ids {
		if !seen[id] {
			t.Errorf("message %s never received", id)
		}
	}
	if f.ExactlyOnceInOrder && !slices.Equal(order, ids) {
		t.Errorf("delivery order %v, want send order %v", order, ids)
	}
}

// MaxNumberOfMessages above 10 is rejected.
// API Reference, ReceiveMessage, MaxNumberOfMessages ("Valid values: 1 to
// 10").
func testReceiveMoreThanTen(t *testing.T, b Backend, f Features) {
	url, _ := b.NewQueue(t, QueueConfig{Visibility: 30 * unit})
	for i := range 11 {
		send(t, b, url, fmt.Sprintf("eleven %02d", i), 0)
	}
	msgs, err := b.Receive(t.Context(), url, 11, 0)
	switch {
	case !f.ReceiveBeyondTen && err == nil:
		t.Errorf("receive of 11 messages succeeded (%d returned); SQS's MaxNumberOfMessages is 1..10", len(msgs))
	case f.ReceiveBeyondTen && err != nil:
		t.Errorf("receive of 11 messages: %v; declared ReceiveBeyondTen", err)
	case f.ReceiveBeyondTen && f.ExactlyOnceInOrder && len(msgs) != 11:
		t.Errorf("receive of 11 with 11 visible returned %d; declared ReceiveBeyondTen and ExactlyOnceInOrder", len(msgs))
	}
}

// Delete with the receipt handle of the latest receive removes the
// message: it is not delivered again once its visibility timeout has run
// out.
// API Reference, DeleteMessage.
func testDeleteCurrentHandle(t *testing.T, b Backend, _ Features) {
	url, _ := b.NewQueue(t, QueueConfig{Visibility: unit})
	send(t, b, url, "delete me", 0)
	m := receiveOne(t, b, url, 0, "receive")
	mustDelete(t.Context(), t, b, url, m.ReceiptHandle)
	b.Sleep(unit + slack)
	receiveNone(t, b, url, "deleted, past the visibility timeout")
}

// Delete with the receipt handle of an earlier receive succeeds, but the
// message might not be deleted; the latest handle still works.
// API Reference, DeleteMessage ("If you use an old ReceiptHandle, the
// request will succeed, but the message might not be deleted").
func testDeleteStaleHandle(t *testing.T, b Backend, f Features) {
	ctx := t.Context()
	url, _ := b.NewQueue(t, QueueConfig{Visibility: unit})
	send(t, b, url, "stale", 0)
	old := receiveOne(t, b, url, 0, "first receive")
	b.Sleep(unit + slack)
	cur := receiveOne(t, b, url, 0, "second receive")

	err := b.Delete(ctx, url, old.ReceiptHandle)
	if !f.StaleDeleteFails {
		if err != nil {
			t.Errorf("delete with the stale handle: %v; SQS answers success", err)
		}
		// SQS leaves it open whether the message went; the current
		// handle's delete must not fail either way.
		if err := b.Delete(ctx, url, cur.ReceiptHandle); err != nil {
			t.Errorf("delete with the current handle after the stale one: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatal("delete with the stale handle succeeded; declared StaleDeleteFails")
	}
	// Declared: nothing was deleted, so the current handle still holds
	// the message.
	if err := b.ChangeVisibility(ctx, url, cur.ReceiptHandle, 0); err != nil {
		t.Fatalf("release with the current handle after the failed stale delete: %v", err)
	}
	back := receiveOne(t, b, url, 0, "after the failed stale delete")
	if back.ID != cur.ID {
		t.Errorf("received %s, want %s", back.ID, cur.ID)
	}
	mustDelete(ctx, t, b, url, back.ReceiptHandle)
}

func send(t *testing.T, b Backend, url, body string, delay time.Duration) string {
	t.Helper()
	id, err := b.Send(t.Context(), url, []byte(body), delay)
	if err != nil {
		t.Fatalf("send %q delayed %v: %v", body, delay, err)
	}
	if id == "" {
		t.Fatalf("send %q: empty message id", body)
	}
	return id
}

func receiveOne(t *testing.T, b Backend, url string, visibility time.Duration, when string) Message {
	t.Helper()
	msgs, err := b.Receive(t.Context(), url, 10, visibility)
	if err != nil {
		t.Fatalf("%s: receive: %v", when, err)
	}
	if len(msgs) != 1 {
		t.Fatalf("%s: received %d messages, want 1", when, len(msgs))
	}
	if msgs[0].ReceiptHandle == "" {
		t.Fatalf("%s: empty receipt handle", when)
	}
	return msgs[0]
}

func receiveNone(t *testing.T, b Backend, url, when string) {
	t.Helper()
	msgs, err := b.Receive(t.Context(), url, 10, 0)
	if err != nil {
		t.Fatalf("%s: receive: %v", when, err)
	}
	if len(msgs) != 0 {
		t.Fatalf("%s: received %d messages (first %q, receive count %d), want none", when, len(msgs), msgs[0].Body, msgs[0].ReceiveCount)
	}
}

func mustDelete(ctx context.Context, t *testing.T, b Backend, url, handle string) {
	t.Helper()
	if err := b.Delete(ctx, url, handle); err != nil {
		t.Fatalf("delete: %v", err)
	}
}

func checkStamp(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if got.IsZero() {
		t.Errorf("%s not reported, want about %v", what, want)
		return
	}
	if d := got.Sub(want); d < -stampTolerance || d > stampTolerance {
		t.Errorf("%s %v, want %v (±%v); off by %v", what, got, want, stampTolerance, d)
	}
}
