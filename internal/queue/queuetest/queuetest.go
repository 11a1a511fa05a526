// Package queuetest is the conformance suite for the queues genjobs runs
// on: the SQS adapter (package queue, run against moto) and the embedded
// queue of the local stack and the simulation (package localqueue), so a
// handler tested locally meets the semantics it gets in AWS.
//
// Every expected result comes from AWS's documentation of standard queues
// (each test names the section), not from what the implementations agree
// on. A backend declares where it knowingly differs in Features, and the
// suite checks the declared behaviour instead: an undeclared difference
// fails, and so does a declared one the backend no longer has. Nothing is
// skipped. Import it from _test files only.
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
// gets its own, so a backend on a manual clock can advance it freely.
type Backend interface {
	// NewQueue creates an empty standard queue for the calling test and
	// returns its URL. With cfg.MaxReceiveCount > 0 the queue gets a
	// redrive policy to a new dead-letter queue, whose URL is dlq.
	NewQueue(t *testing.T, cfg QueueConfig) (url, dlq string)
	// Send puts body on the queue, invisible for delay (whole seconds).
	Send(ctx context.Context, url string, body []byte, delay time.Duration) (id string, err error)
	// Receive returns up to max of the messages visible now and hides
	// them for visibility (whole seconds; 0 means the queue's own),
	// waiting as long as a real service needs; it returns an error for
	// arguments the service rejects.
	Receive(ctx context.Context, url string, max int, visibility time.Duration) ([]Message, error)
	// ChangeVisibility hides the received message for timeout from now.
	ChangeVisibility(ctx context.Context, url, receiptHandle string, timeout time.Duration) error
	// Delete removes the received message.
	Delete(ctx context.Context, url, receiptHandle string) error
	// Sleep lets d pass on the queue's clock (advances it, or sleeps).
	Sleep(d time.Duration)
	// Now reads the queue's clock.
	Now() time.Time
}

// QueueConfig is what a test asks of a new queue.
type QueueConfig struct {
	Visibility time.Duration // the queue's VisibilityTimeout (whole seconds, > 0)
	// MaxReceiveCount is the redrive policy's maxReceiveCount; 0 means no
	// dead-letter queue.
	MaxReceiveCount int
}

// Message is a received message with the system attributes genjobs reads.
type Message struct {
	ID              string
	Body            []byte
	ReceiptHandle   string
	ReceiveCount    int       // ApproximateReceiveCount
	SentAt          time.Time // SentTimestamp
	FirstReceivedAt time.Time // ApproximateFirstReceiveTimestamp
}

// Features declares where a backend knowingly differs from SQS, whose
// documented behaviour is the zero value; a backend that sets a field is
// checked for what the field says instead.
type Features struct {
	// DelaysBeyondMax: Send accepts delays over SQS's 900 s (genjobs sends
	// longer waits through EventBridge Scheduler; the local stack and the
	// simulation route them through the embedded queue, up to 365 days).
	DelaysBeyondMax bool
	// ReceiveBeyondTen: Receive accepts more than SQS's 10 messages at
	// once (the embedded queue serves the local event source mapping
	// Lambda-sized batches).
	ReceiveBeyondTen bool
	// ExactlyOnceInOrder: a receive hands out every visible message at
	// most once, earliest visible first (ties in send order), and as many
	// as are visible up to max; SQS standard queues deliver at least
	// once, in best-effort order, maybe fewer than are visible. The
	// embedded queue is exact so a simulation replays (it injects its own
	// duplicates).
	ExactlyOnceInOrder bool
	// StaleDeleteFails: Delete with a receipt handle from an earlier
	// receive fails and deletes nothing (SQS answers success and "the
	// message might not be deleted"), so a worker that lost its lease
	// learns so instead of deleting its successor's message.
	StaleDeleteFails bool
}

// Timing: timeouts and delays of a second or two keep a run against a
// real-time emulator short; checks before an expiry are made slack early,
// checks after it slack late, for request latency and timer resolution.
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
	run := func(name string, test func(*testing.T, Backend, Features)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, newBackend(t), f)
		})
	}
	run("VisibilityTimeout", testVisibilityTimeout)
	run("ReceiveVisibilityOverride", testReceiveVisibilityOverride)
	run("ChangeVisibilityExtends", testChangeVisibilityExtends)
	run("ChangeVisibilityZeroReleases", testChangeVisibilityZeroReleases)
	run("ReceiveCountIncrements", testReceiveCountIncrements)
	run("Timestamps", testTimestamps)
	run("DelaySeconds", testDelaySeconds)
	run("DelaySecondsMaximum", testDelaySecondsMaximum)
	run("RedriveAfterMaxReceiveCount", testRedrive)
	run("BatchReceiveUpToTen", testBatchReceive)
	run("ReceiveMoreThanTen", testReceiveMoreThanTen)
	run("DeleteCurrentHandle", testDeleteCurrentHandle)
	run("DeleteStaleHandle", testDeleteStaleHandle)
}

// A received message is hidden until the visibility timeout expires, then
// delivered again with a new receipt handle.
// SQS Developer Guide, "Amazon SQS visibility timeout"; API Reference,
// ReceiveMessage ("each time you receive a message ... a different
// receipt handle").
func testVisibilityTimeout(t *testing.T, b Backend, _ Features) {
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
	mustDelete(t, b, url, again.ReceiptHandle)
}

// ReceiveMessage's VisibilityTimeout hides the received messages for that
// long instead of the queue's timeout.
// API Reference, ReceiveMessage, request parameter VisibilityTimeout.
func testReceiveVisibilityOverride(t *testing.T, b Backend, _ Features) {
	url, _ := b.NewQueue(t, QueueConfig{Visibility: 30 * unit})
	send(t, b, url, "override", 0)
	m := receiveOne(t, b, url, unit, "receive with a 1 s visibility")
	b.Sleep(unit + slack)
	again := receiveID(t, b, url, m.ID, "1 s after, well inside the queue's 30 s")
	mustDelete(t, b, url, again.ReceiptHandle)
}

// ChangeMessageVisibility hides a message for the new timeout from the
// call, whatever the queue's timeout.
// API Reference, ChangeMessageVisibility ("the 10 seconds begin to count
// from the time that you make the ChangeMessageVisibility call").
func testChangeVisibilityExtends(t *testing.T, b Backend, _ Features) {
	url, _ := b.NewQueue(t, QueueConfig{Visibility: unit})
	send(t, b, url, "extend", 0)
	m := receiveOne(t, b, url, 0, "first receive")
	mustChangeVisibility(t, b, url, m.ReceiptHandle, 3*unit, "extend to 3 s")
	b.Sleep(unit + slack)
	receiveNone(t, b, url, "past the queue's 1 s, inside the extended 3 s")
	b.Sleep(2*unit - 2*slack)
	receiveNone(t, b, url, "just before the extended 3 s ran out")
	b.Sleep(2 * slack)
	again := receiveID(t, b, url, m.ID, "after the extended 3 s")
	mustDelete(t, b, url, again.ReceiptHandle)
}

// A visibility timeout of 0 makes the message visible at once, and the
// next receive hides it for the queue's timeout again.
// SQS Developer Guide, "Amazon SQS visibility timeout" (terminating the
// timeout by setting it to 0); API Reference, ChangeMessageVisibility
// ("the visibility timeout for the message reverts to the original
// timeout value ... the next time the message is received").
func testChangeVisibilityZeroReleases(t *testing.T, b Backend, _ Features) {
	url, _ := b.NewQueue(t, QueueConfig{Visibility: unit})
	send(t, b, url, "release", 0)
	m := receiveOne(t, b, url, 0, "first receive")
	mustChangeVisibility(t, b, url, m.ReceiptHandle, 3*unit, "extend to 3 s")
	mustChangeVisibility(t, b, url, m.ReceiptHandle, 0, "release with 0")
	again := receiveOne(t, b, url, 0, "right after the release")
	if again.ID != m.ID {
		t.Fatalf("received %s, want %s", again.ID, m.ID)
	}
	b.Sleep(unit + slack)
	third := receiveID(t, b, url, m.ID, "1 s after the second receive (the queue's timeout, not the 3 s set before)")
	mustDelete(t, b, url, third.ReceiptHandle)
}

// ApproximateReceiveCount counts the receives of a message, this one
// included.
// API Reference, ReceiveMessage, MessageSystemAttributeNames.
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
	mustDelete(t, b, url, last.ReceiptHandle)
}

// SentTimestamp is when the message was sent; ApproximateFirstReceive-
// Timestamp when it was first received, also on redelivery (both epoch
// milliseconds).
// API Reference, ReceiveMessage, MessageSystemAttributeNames.
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
	mustDelete(t, b, url, second.ReceiptHandle)
}

// DelaySeconds keeps a message invisible until the delay has passed.
// API Reference, SendMessage, DelaySeconds; SQS Developer Guide, "Amazon
// SQS message timers".
func testDelaySeconds(t *testing.T, b Backend, _ Features) {
	url, _ := b.NewQueue(t, QueueConfig{Visibility: 30 * unit})
	id := send(t, b, url, "delayed", 2*unit)
	receiveNone(t, b, url, "right after a send delayed 2 s")
	b.Sleep(2*unit - slack)
	receiveNone(t, b, url, "before the 2 s delay passed")
	b.Sleep(2 * slack)
	m := receiveID(t, b, url, id, "after the 2 s delay")
	mustDelete(t, b, url, m.ReceiptHandle)
}

// DelaySeconds is at most 900 (15 minutes): 900 is accepted and hides the
// message; more is rejected.
// API Reference, SendMessage, DelaySeconds ("Valid values: 0 to 900.
// Maximum: 15 minutes"); SQS Developer Guide, "Amazon SQS delay queues".
func testDelaySecondsMaximum(t *testing.T, b Backend, f Features) {
	url, _ := b.NewQueue(t, QueueConfig{Visibility: 30 * unit})
	send(t, b, url, "fifteen minutes", 900*time.Second)
	receiveNone(t, b, url, "right after a send delayed 900 s")

	_, err := b.Send(t.Context(), url, []byte("sixteen minutes"), 901*time.Second)
	switch {
	case f.DelaysBeyondMax && err != nil:
		t.Errorf("send delayed 901 s: %v; declared DelaysBeyondMax", err)
	case !f.DelaysBeyondMax && err == nil:
		t.Error("send delayed 901 s succeeded; SQS rejects DelaySeconds above 900")
	}
	receiveNone(t, b, url, "after sends delayed 900 s and 901 s")
}

// A message received maxReceiveCount times without being deleted moves to
// the dead-letter queue, keeping its id, body and enqueue time; its
// receive count counts the receives from both queues.
// SQS Developer Guide, "Using dead-letter queues in Amazon SQS" and
// "Setting-up dead-letter queue retention" ("the enqueue timestamp is
// unchanged"); API Reference, ReceiveMessage (ApproximateReceiveCount
// counts receives "across all queues").
func testRedrive(t *testing.T, b Backend, _ Features) {
	url, dlq := b.NewQueue(t, QueueConfig{Visibility: unit, MaxReceiveCount: 2})
	id := send(t, b, url, "poison", 0)
	first := receiveOne(t, b, url, 0, "receive 1 of maxReceiveCount 2")
	if first.ID != id {
		t.Fatalf("receive 1: got %s, want %s", first.ID, id)
	}
	b.Sleep(unit + slack)
	if m := receiveOne(t, b, url, 0, "receive 2 of maxReceiveCount 2"); m.ID != id {
		t.Fatalf("receive 2: got %s, want %s", m.ID, id)
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
	mustDelete(t, b, dlq, dead.ReceiptHandle)
	receiveNone(t, b, url, "source queue after the move")
}

// One receive returns at most MaxNumberOfMessages (1..10), never more than
// asked for; repeated receives drain the queue.
// API Reference, ReceiveMessage, MaxNumberOfMessages ("never returns more
// messages than this value"); SQS Developer Guide, "Amazon SQS standard
// queues" (at-least-once delivery, best-effort ordering).
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
			mustDelete(t, b, url, m.ReceiptHandle)
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
// API Reference, ReceiveMessage, MaxNumberOfMessages ("Valid values: 1 to 10").
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

// Delete with the latest receive's handle removes the message: it is not
// delivered again once its visibility timeout has run out.
// API Reference, DeleteMessage.
func testDeleteCurrentHandle(t *testing.T, b Backend, _ Features) {
	url, _ := b.NewQueue(t, QueueConfig{Visibility: unit})
	send(t, b, url, "delete me", 0)
	m := receiveOne(t, b, url, 0, "receive")
	mustDelete(t, b, url, m.ReceiptHandle)
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
		// Whether the message went or not, the current handle's delete
		// must not fail.
		if err := b.Delete(ctx, url, cur.ReceiptHandle); err != nil {
			t.Errorf("delete with the current handle after the stale one: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatal("delete with the stale handle succeeded; declared StaleDeleteFails")
	}
	// Nothing was deleted: the current handle still holds the message.
	mustChangeVisibility(t, b, url, cur.ReceiptHandle, 0, "release with the current handle after the failed stale delete")
	back := receiveID(t, b, url, cur.ID, "after the failed stale delete")
	mustDelete(t, b, url, back.ReceiptHandle)
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

// receiveOne receives the one visible message, hiding it for visibility.
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

// receiveID is receiveOne of a message that must be id (or it is an error).
func receiveID(t *testing.T, b Backend, url, id, when string) Message {
	t.Helper()
	m := receiveOne(t, b, url, 0, when)
	if m.ID != id {
		t.Errorf("%s: received %s, want %s", when, m.ID, id)
	}
	return m
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

func mustDelete(t *testing.T, b Backend, url, handle string) {
	t.Helper()
	if err := b.Delete(t.Context(), url, handle); err != nil {
		t.Fatalf("delete: %v", err)
	}
}

func mustChangeVisibility(t *testing.T, b Backend, url, handle string, timeout time.Duration, what string) {
	t.Helper()
	if err := b.ChangeVisibility(t.Context(), url, handle, timeout); err != nil {
		t.Fatalf("%s: %v", what, err)
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
