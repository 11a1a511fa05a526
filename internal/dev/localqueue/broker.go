// Package localqueue is an in-memory stand-in for Amazon SQS standard
// queues, for `genjobs local` and the fault simulation: delays, visibility
// timeouts, receive counts, receipt handles that change on every receive
// and redrive to a dead-letter queue, on an injected clock. No call
// blocks: Receive never long-polls, and NextEvent tells a driver of
// virtual time when the next message becomes visible.
//
// Deliberate differences from SQS, each chosen so that a bug shows up
// locally rather than hides (the queue conformance suite, queuetest,
// checks each as the features declared in conformance_test.go):
//
//   - Delivery is exactly once per receive and ordered: the message that
//     became visible earliest comes first (ties by send order). SQS gives
//     no order and may deliver twice; here a simulation replays exactly.
//     Duplicates are the simulation's to inject, not the queue's.
//   - A receipt handle is valid only until the message is received again:
//     an older one fails with ErrStaleReceipt and changes nothing. Real SQS
//     may accept a stale handle for Delete (a worker whose lease ran out
//     deleting its successor's message); genjobs must never rely on that.
//   - Delays have no 15-minute ceiling: locally, long waits go through the
//     queue instead of EventBridge Scheduler.
//   - The receive count is kept when a message is redriven to the
//     dead-letter queue (see Receive).
package localqueue

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/worker"
)

// Limits and defaults, SQS's own where SQS has one, so a call that would
// fail against AWS fails here too.
const (
	// DefaultVisibility is the visibility timeout of a queue created
	// without one: SQS's default.
	DefaultVisibility = 30 * time.Second
	// MaxVisibility is the longest visibility timeout, and the longest a
	// message may stay hidden in total from the receive that handed it
	// out, however often ChangeVisibility extends it: SQS's 12 hours.
	MaxVisibility = 12 * time.Hour
	// MaxBodySize is the largest body SQS accepts (1 MiB).
	MaxBodySize = 1 << 20
	// MaxMaxReceiveCount is the highest maxReceiveCount a redrive policy
	// accepts.
	MaxMaxReceiveCount = 1000
	// Account is the account id in local ARNs.
	Account = "000000000000"
	// Region is the region in local ARNs.
	Region = "local"
	// URLPrefix starts every local queue URL; the queue name follows.
	URLPrefix = "local://"
)

// Errors. Callers test them with errors.Is; the returned errors wrap them
// with the call and the queue.
var (
	// ErrStaleReceipt: the receipt handle is not the message's current one
	// (the message was received again since, or deleted, or moved to the
	// dead-letter queue), or was never issued by this queue. Nothing was
	// changed. For a worker it means: someone else may hold the message now.
	ErrStaleReceipt = errors.New("stale or unknown receipt handle")
	// ErrNotInFlight: ChangeVisibility on a message whose visibility has
	// already run out (it is visible again, not yet received by anyone).
	// SQS answers MessageNotInflight in this case; a lease that hits it is
	// lost, because any poller may take the message at any moment.
	ErrNotInFlight = errors.New("message is not in flight")
	// ErrNoQueue: no queue with that URL or name.
	ErrNoQueue = errors.New("no such queue")
	// ErrExists: Create with a name already taken.
	ErrExists = errors.New("queue already exists")
	// ErrInvalidArgument: an argument SQS would reject (a negative delay,
	// an oversized body, a visibility outside 0..MaxVisibility, ...). Never
	// retryable.
	ErrInvalidArgument = errors.New("invalid argument")
)

// Config describes a queue.
type Config struct {
	// Visibility is the queue's visibility timeout, used when Receive asks
	// for 0. 0 means DefaultVisibility. Rounded up to whole seconds, as
	// SQS counts in seconds.
	Visibility time.Duration
	// MaxReceiveCount is the redrive policy's maxReceiveCount
	// (1..MaxMaxReceiveCount): a message already received that many times
	// goes to DeadLetter on the next receive. 0 means no redrive, and then
	// DeadLetter must be empty.
	MaxReceiveCount int
	// DeadLetter names the dead-letter queue, which must exist already
	// (as SQS requires of a redrive policy's target). "" means none.
	DeadLetter string
}

// Info describes an existing queue.
type Info struct {
	Name   string
	URL    string
	ARN    string
	Config Config
}

// Message is one received message.
type Message struct {
	// ID is the message id, assigned by Send and stable across
	// redeliveries and redrive.
	ID string
	// Body is a copy of the body as sent.
	Body []byte
	// ReceiptHandle identifies this receive; Delete and ChangeVisibility
	// take it, and the next receive of the message makes it stale.
	ReceiptHandle string
	// ReceiveCount counts receives, this one included
	// (SQS's ApproximateReceiveCount, exact here).
	ReceiveCount int
	// SentAt is when Send accepted the message.
	SentAt time.Time
	// FirstReceivedAt is when the message was first received
	// (ApproximateFirstReceiveTimestamp).
	FirstReceivedAt time.Time
}

// Depth counts a queue's messages by state at the moment of the call.
type Depth struct {
	Visible  int // can be received now
	InFlight int // received, still hidden by their visibility timeout
	Delayed  int // sent with a delay that has not run out, never received
}

// Broker holds a set of queues on one clock. It is safe for concurrent
// use; one mutex guards everything, which keeps redrive (two queues at
// once) atomic and costs nothing that matters at local scale.
type Broker struct {
	clk    clock.Clock
	epoch  uint64
	mu     sync.Mutex
	byURL  map[string]*queue
	byName map[string]*queue
	msgSeq uint64 // ids and send order
	rcpSeq uint64 // receipt handles
}

// The consumers declare the interfaces they need; these checks keep the
// Broker usable where they expect the real SQS adapter.
var (
	_ schedule.QueueSender = (*Broker)(nil)
	_ worker.Extender      = (*Broker)(nil)
)

// New returns an empty Broker on clk (nil means the wall clock). Message
// ids come from clk's time at New and a counter: reproducible under a
// manual clock, and never reused across restarts on the wall clock (the
// store may remember the last message id applied to an operation).
func New(clk clock.Clock) *Broker {
	clk = cmp.Or[clock.Clock](clk, clock.Real{})
	return &Broker{
		clk:    clk,
		epoch:  uint64(clk.Now().UnixNano()),
		byURL:  map[string]*queue{},
		byName: map[string]*queue{},
	}
}

// queue is one queue's state. All messages, whatever their state, are in
// one min-heap ordered by (visibleAt, seq): the visible ones are a prefix
// of the heap order, so Receive pops from the top, and the next future
// visibility time is found without scanning the whole queue.
type queue struct {
	info     Info
	vis      time.Duration
	dlq      *queue
	msgs     msgHeap
	byHandle map[string]*msg
}

// msg is a stored message.
type msg struct {
	id       string
	seq      uint64
	body     []byte
	sentAt   time.Time
	firstRcv time.Time
	// rcvAt is when the current receipt was issued: MaxVisibility counts
	// from there.
	rcvAt     time.Time
	visibleAt time.Time
	// shownAt is when the message last became visible before the current
	// receipt took it (see Broker.ShownAt).
	shownAt  time.Time
	receives int
	// handle is the current receipt handle; "" when the message has not
	// been received in this queue (new, or just redriven).
	handle string
	index  int // in the heap
}

// Create makes a queue and returns its URL.
func (b *Broker) Create(name string, cfg Config) (string, error) {
	if !validName(name) {
		return "", fmt.Errorf("localqueue create %q: %w: want 1..80 of [A-Za-z0-9_-] (FIFO queues are not supported)", name, ErrInvalidArgument)
	}
	switch {
	case cfg.Visibility < 0 || cfg.Visibility > MaxVisibility:
		return "", fmt.Errorf("localqueue create %q: %w: visibility %v outside 0..%v", name, ErrInvalidArgument, cfg.Visibility, MaxVisibility)
	case cfg.MaxReceiveCount < 0 || cfg.MaxReceiveCount > MaxMaxReceiveCount:
		return "", fmt.Errorf("localqueue create %q: %w: MaxReceiveCount %d outside 0..%d", name, ErrInvalidArgument, cfg.MaxReceiveCount, MaxMaxReceiveCount)
	case (cfg.MaxReceiveCount == 0) != (cfg.DeadLetter == ""):
		return "", fmt.Errorf("localqueue create %q: %w: MaxReceiveCount and DeadLetter go together (got %d and %q)", name, ErrInvalidArgument, cfg.MaxReceiveCount, cfg.DeadLetter)
	case cfg.DeadLetter == name:
		return "", fmt.Errorf("localqueue create %q: %w: a queue cannot be its own dead-letter queue", name, ErrInvalidArgument)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.byName[name]; ok {
		return "", fmt.Errorf("localqueue create %q: %w", name, ErrExists)
	}
	q := &queue{vis: ceilSecond(cfg.Visibility), byHandle: map[string]*msg{}}
	if q.vis == 0 {
		q.vis = DefaultVisibility
	}
	if cfg.DeadLetter != "" {
		dlq, ok := b.byName[cfg.DeadLetter]
		if !ok {
			return "", fmt.Errorf("localqueue create %q: dead-letter queue %q: %w", name, cfg.DeadLetter, ErrNoQueue)
		}
		q.dlq = dlq
	}
	q.info = Info{Name: name, URL: URLPrefix + name, ARN: "arn:aws:sqs:" + Region + ":" + Account + ":" + name, Config: cfg}
	b.byName[name] = q
	b.byURL[q.info.URL] = q
	return q.info.URL, nil
}

// Info describes the queue at url. The event source mapping uses it for
// the ARN it puts on every record.
func (b *Broker) Info(url string) (Info, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q, ok := b.byURL[url]
	if !ok {
		return Info{}, fmt.Errorf("localqueue %s: %w", url, ErrNoQueue)
	}
	return q.info, nil
}

// Send puts a copy of body on the queue at url, invisible for delay
// (rounded up to whole seconds, as SQS does, so a message never arrives
// before the moment the caller computed). Any delay ≥ 0 is accepted: the
// local stack sends long delays through the queue instead of a scheduler.
// The body must be 1..MaxBodySize bytes of the Unicode characters SQS
// allows.
func (b *Broker) Send(ctx context.Context, url string, body []byte, delay time.Duration) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("localqueue send to %s: %w", url, err)
	}
	if delay < 0 {
		return "", fmt.Errorf("localqueue send to %s: %w: negative delay %v", url, ErrInvalidArgument, delay)
	}
	if len(body) == 0 || len(body) > MaxBodySize {
		return "", fmt.Errorf("localqueue send to %s: %w: body of %d bytes, want 1..%d", url, ErrInvalidArgument, len(body), MaxBodySize)
	}
	if !validBody(body) {
		return "", fmt.Errorf("localqueue send to %s: %w: body holds bytes that are not UTF-8 or characters SQS does not allow", url, ErrInvalidArgument)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	q, ok := b.byURL[url]
	if !ok {
		return "", fmt.Errorf("localqueue send to %s: %w", url, ErrNoQueue)
	}
	now := b.clk.Now()
	b.msgSeq++
	m := &msg{
		id:        b.messageID(b.msgSeq),
		seq:       b.msgSeq,
		body:      slices.Clone(body),
		sentAt:    now,
		visibleAt: now.Add(ceilSecond(delay)),
	}
	heap.Push(&q.msgs, m)
	return m.id, nil
}

// Receive returns up to max (≥ 1; no upper bound, as the event source
// mapping takes up to 10000) messages visible now, oldest-visible first,
// without waiting. Each gets a receive count one higher, a first receive
// time if unset, a new receipt handle (the old one goes stale) and is
// hidden for visibility (rounded up to seconds; 0: the queue's own).
//
// Redrive: a visible message already received MaxReceiveCount times moves
// to the dead-letter queue, visible there at once, and the receive looks
// further. It keeps its id, body, times and receive count (the move is
// not a receive), so the first receive from the dead-letter queue reports
// MaxReceiveCount+1, as SQS does and as triage records.
func (b *Broker) Receive(ctx context.Context, url string, max int, visibility time.Duration) ([]Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("localqueue receive from %s: %w", url, err)
	}
	if max < 1 {
		return nil, fmt.Errorf("localqueue receive from %s: %w: max %d < 1", url, ErrInvalidArgument, max)
	}
	if visibility < 0 || visibility > MaxVisibility {
		return nil, fmt.Errorf("localqueue receive from %s: %w: visibility %v outside 0..%v", url, ErrInvalidArgument, visibility, MaxVisibility)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	q, ok := b.byURL[url]
	if !ok {
		return nil, fmt.Errorf("localqueue receive from %s: %w", url, ErrNoQueue)
	}
	vis := ceilSecond(visibility)
	if vis == 0 {
		vis = q.vis
	}
	now := b.clk.Now()
	var out []Message
	// Received messages are held out of the heap until the loop ends, so
	// one call can never hand out the same message twice, whatever the
	// visibility.
	var taken []*msg
	for len(out) < max && len(q.msgs) > 0 && !q.msgs[0].visibleAt.After(now) {
		m := heap.Pop(&q.msgs).(*msg)
		delete(q.byHandle, m.handle)
		if q.dlq != nil && m.receives >= q.info.Config.MaxReceiveCount {
			m.handle = ""
			m.visibleAt = now
			heap.Push(&q.dlq.msgs, m)
			continue
		}
		m.receives++
		if m.receives == 1 {
			m.firstRcv = now
		}
		b.rcpSeq++
		m.handle = fmt.Sprintf("%s#%d", m.id, b.rcpSeq)
		m.rcvAt = now
		m.shownAt = m.visibleAt
		m.visibleAt = now.Add(vis)
		q.byHandle[m.handle] = m
		taken = append(taken, m)
		out = append(out, Message{
			ID:              m.id,
			Body:            slices.Clone(m.body),
			ReceiptHandle:   m.handle,
			ReceiveCount:    m.receives,
			SentAt:          m.sentAt,
			FirstReceivedAt: m.firstRcv,
		})
	}
	for _, m := range taken {
		heap.Push(&q.msgs, m)
	}
	return out, nil
}

// ShownAt is when the message a current receipt handle holds became
// visible before that receive took it: its send plus its delay, or the
// end of its last visibility timeout. SQS does not say this; a
// simulation that delays receives after a message shows (a poller's
// pickup) needs it, since a delayed message is no older for its wait.
func (b *Broker) ShownAt(receiptHandle string) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, q := range b.byURL {
		if m, ok := q.byHandle[receiptHandle]; ok {
			return m.shownAt, true
		}
	}
	return time.Time{}, false
}

// Delete removes the message received with receiptHandle, which must be
// its current one (else ErrStaleReceipt, nothing deleted; see the package
// doc). A handle whose visibility ran out stays current until the message
// is received again, as in SQS.
func (b *Broker) Delete(ctx context.Context, url, receiptHandle string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("localqueue delete on %s: %w", url, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	q, ok := b.byURL[url]
	if !ok {
		return fmt.Errorf("localqueue delete on %s: %w", url, ErrNoQueue)
	}
	m, ok := q.byHandle[receiptHandle]
	if !ok {
		return fmt.Errorf("localqueue delete on %s, handle %q: %w", url, receiptHandle, ErrStaleReceipt)
	}
	delete(q.byHandle, receiptHandle)
	heap.Remove(&q.msgs, m.index)
	return nil
}

// ChangeVisibility hides the message received with receiptHandle for
// timeout from now (rounded up to seconds; 0 gives it back at once). As in
// SQS it must still be in flight (else ErrNotInFlight), and the total time
// hidden since the receive may not exceed MaxVisibility
// (ErrInvalidArgument); a stale handle fails with ErrStaleReceipt.
func (b *Broker) ChangeVisibility(ctx context.Context, url, receiptHandle string, timeout time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("localqueue change visibility on %s: %w", url, err)
	}
	if timeout < 0 || timeout > MaxVisibility {
		return fmt.Errorf("localqueue change visibility on %s: %w: timeout %v outside 0..%v", url, ErrInvalidArgument, timeout, MaxVisibility)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	q, ok := b.byURL[url]
	if !ok {
		return fmt.Errorf("localqueue change visibility on %s: %w", url, ErrNoQueue)
	}
	m, ok := q.byHandle[receiptHandle]
	if !ok {
		return fmt.Errorf("localqueue change visibility on %s, handle %q: %w", url, receiptHandle, ErrStaleReceipt)
	}
	now := b.clk.Now()
	if !m.visibleAt.After(now) {
		return fmt.Errorf("localqueue change visibility on %s, message %s: %w: visible again since %s", url, m.id, ErrNotInFlight, m.visibleAt.Format(time.RFC3339Nano))
	}
	until := now.Add(ceilSecond(timeout))
	if until.Sub(m.rcvAt) > MaxVisibility {
		return fmt.Errorf("localqueue change visibility on %s, message %s: %w: would stay hidden %v after its receive, more than %v", url, m.id, ErrInvalidArgument, until.Sub(m.rcvAt), MaxVisibility)
	}
	m.visibleAt = until
	heap.Fix(&q.msgs, m.index)
	return nil
}

// Depth counts the messages of the queue at url by state; an unknown
// queue has none.
func (b *Broker) Depth(url string) Depth {
	b.mu.Lock()
	defer b.mu.Unlock()
	var d Depth
	q, ok := b.byURL[url]
	if !ok {
		return d
	}
	now := b.clk.Now()
	for _, m := range q.msgs {
		switch {
		case !m.visibleAt.After(now):
			d.Visible++
		case m.handle != "":
			d.InFlight++
		default:
			d.Delayed++
		}
	}
	return d
}

// NextEvent reports the earliest time after now at which a message in any
// queue becomes visible (a delay or a visibility timeout running out), for
// a driver of virtual time to jump to; false when there is none.
func (b *Broker) NextEvent() (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clk.Now()
	var next time.Time
	found := false
	for _, q := range b.byURL {
		if t, ok := q.msgs.firstAfter(now); ok && (!found || t.Before(next)) {
			next, found = t, true
		}
	}
	return next, found
}

// messageID formats a UUID-shaped id from the broker's epoch and seq.
func (b *Broker) messageID(seq uint64) string {
	e := b.epoch
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", uint32(e>>32), uint16(e>>16), uint16(e), uint16(seq>>48), seq&(1<<48-1))
}

// ceilSecond rounds d up to whole seconds, SQS's unit.
func ceilSecond(d time.Duration) time.Duration {
	if r := d % time.Second; r > 0 {
		return d - r + time.Second
	}
	return d
}

// validName follows SQS's rule for standard queues: 1..80 of letters,
// digits, '-' and '_'.
var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`).MatchString

// validBody reports whether body is UTF-8 made only of the characters SQS
// accepts: #x9, #xA, #xD, #x20-#xD7FF, #xE000-#xFFFD, #x10000-#x10FFFF.
// SQS rejects anything else, so a body that would fail there fails here.
func validBody(body []byte) bool {
	for len(body) > 0 {
		r, n := utf8.DecodeRune(body)
		if r == utf8.RuneError && n <= 1 {
			return false
		}
		switch {
		case r == 0x9, r == 0xA, r == 0xD,
			r >= 0x20 && r <= 0xD7FF,
			r >= 0xE000 && r <= 0xFFFD,
			r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
		body = body[n:]
	}
	return true
}
