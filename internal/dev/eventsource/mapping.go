// Package eventsource plays the part of Lambda's SQS event source mapping for a
// queue of package localqueue: it receives batches, invokes a handler with
// an events.SQSEvent built as Lambda builds it, and deletes what the
// handler acknowledged, following Lambda's rules for partial batch
// responses (ReportBatchItemFailures, which every genjobs mapping enables).
//
// PollOnce is one step (non-blocking without a Gap or BatchingWindow) for
// a simulation on a virtual clock; Run loops it for the local stack.
package eventsource

import (
	"cmp"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/localqueue"
)

// Defaults, Lambda's own.
const (
	// DefaultBatchSize is the event source mapping's default batch size.
	DefaultBatchSize = 10
	// MaxBatchSize is the largest batch size Lambda allows for a standard
	// queue.
	MaxBatchSize = 10000
	// DefaultTimeout is a Lambda function's default timeout.
	DefaultTimeout = 3 * time.Second
	// DefaultIdle is how long Run waits after an empty receive when it is
	// given no idle time.
	DefaultIdle = time.Second
	// BatchingPoll is how often a mapping receives again while it
	// gathers a batch in its BatchingWindow.
	BatchingPoll = 100 * time.Millisecond
	// SenderID is the SenderId attribute of every local record. Lambda
	// reports the sending principal; locally there is only this one.
	SenderID = "AIDAGENJOBSLOCAL0000"
)

// ErrInvocation marks the errors of PollOnce that concern one invocation
// — the handler returned an error, panicked, ran past its timeout, or
// answered with an invalid batch response — as opposed to the queue
// (ErrNoQueue, a cancelled context). The batch stays on the queue and
// comes back after its visibility timeout, as in Lambda, so Run logs these
// and goes on polling.
var ErrInvocation = errors.New("invocation failed")

// Handler is an SQS-fed Lambda handler.
type Handler func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)

// Mapping connects a queue to a handler. Set the fields, then call
// PollOnce or Run; a Mapping must not be copied after first use (its
// counters are atomic) and its fields must not change while it polls.
// Its concurrency cap may: SetMaxConcurrency is safe at any time.
type Mapping struct {
	// Broker holds the queue.
	Broker *localqueue.Broker
	// Queue is the queue's URL.
	Queue string
	// Handler handles each batch.
	Handler Handler
	// BatchSize is the most records per invocation (1..MaxBatchSize);
	// 0 means DefaultBatchSize.
	BatchSize int
	// Timeout is the function's timeout (0: DefaultTimeout): the
	// invocation's deadline is Clock.Now()+Timeout on the clock's own time
	// line, since handlers compare ctx.Deadline() with their clock. On a
	// manual clock it is a waiter that outlives the invocation and fires
	// harmlessly.
	Timeout time.Duration
	// Clock is the clock the handler and the queue share; nil means the
	// wall clock.
	Clock clock.Clock
	// Workers is how many pollers Run runs in parallel, as Lambda scales
	// out concurrent invocations on a backlog; 0 means 1. It is the
	// ceiling of SetMaxConcurrency's cap.
	Workers int
	// Gap is the time between receiving a batch and invoking the handler
	// (in Lambda a cold start or a throttled invocation retried), while
	// the records' visibility timeouts run, so a handler may start with
	// little of its lease left. PollOnce waits it out on Clock (on a
	// manual clock, someone must advance it). 0 invokes at once.
	Gap time.Duration
	// BatchingWindow is Lambda's MaximumBatchingWindowInSeconds: after a
	// receive that leaves the batch short of BatchSize, the mapping goes
	// on receiving for up to this long, and invokes once the batch is
	// full or the window has passed. The first records' visibility
	// timeouts run meanwhile. It waits on Clock, like Gap. 0 invokes with
	// what the first receive returned.
	BatchingWindow time.Duration
	// Log, if set, receives Run's reports of failed invocations.
	Log *slog.Logger
	// Sandbox, if set, is the context Run's invocations run under:
	// cancelling it is the functions' sandboxes dying (a local run's
	// Ctrl-C), which ends invocations in flight; its deadline, if any, is
	// not theirs (Timeout is). Nil keeps an invocation
	// in flight running after Run stops, until its handler returns or its
	// deadline passes, as disabling a Lambda event source mapping does.
	Sandbox context.Context

	invocations, records, deleted, failed, staleDeletes, invocationErrors atomic.Int64

	// maxConcurrency is SetMaxConcurrency's cap (≤ 0: none); active
	// counts Run's pollers inside a poll; waiting counts those waiting
	// for a turn, so a poll's end wakes them only when there are any.
	maxConcurrency, active, waiting atomic.Int64
	// wakeMu guards wake, closed (and forgotten) to wake the waiting
	// pollers when the cap changes or a poll ends; nil until one waits.
	wakeMu sync.Mutex
	wake   chan struct{}
}

// SetMaxConcurrency caps, from now on, how many of Run's pollers poll at
// once, as updating a Lambda event source mapping's
// ScalingConfig.MaximumConcurrency does: n ≤ 0 removes the cap (Workers
// poll). The value is stored as given; the cap in force is
// min(n, max(Workers, 1)), since Run starts no more than Workers pollers.
//
// Run's poller number i (0-based) polls only while i is below the cap
// in force and fewer than that many pollers are inside a poll (receiving,
// gathering or invoking). Lowering the cap stops no invocation in flight:
// the pollers beyond it finish their poll, then wait, rechecking after
// each idle on Clock and whenever the cap changes or a poll ends, and no
// poller starts a poll until fewer than the cap run. Raising it again
// lets them poll. PollOnce ignores the cap: it is one step its caller
// chose to take.
func (m *Mapping) SetMaxConcurrency(n int) {
	m.maxConcurrency.Store(int64(n))
	m.broadcast()
}

// MaxConcurrency is the cap last set by SetMaxConcurrency, as set (it may
// exceed Workers), or max(Workers, 1) when none is.
func (m *Mapping) MaxConcurrency() int {
	if n := m.maxConcurrency.Load(); n > 0 {
		return int(n)
	}
	return m.workers()
}

// limit is the cap in force: MaxConcurrency, at most the pollers Run
// starts.
func (m *Mapping) limit() int64 { return int64(min(m.MaxConcurrency(), m.workers())) }

// turn waits until poller i may poll, and takes a place among the active
// pollers; false when ctx ended first. Between checks it waits on Clock
// for idle (as an idle poller does, so a virtual clock's driver sees the
// waiter) or until woken, whichever is first; a wake that still leaves it
// waiting keeps the clock's waiter rather than adding one per wake.
func (m *Mapping) turn(ctx context.Context, i int, idle time.Duration) bool {
	m.waiting.Add(1)
	defer m.waiting.Add(-1)
	var tick <-chan time.Time
	for {
		if ctx.Err() != nil {
			return false
		}
		// The wake channel is taken before the check: a change after the
		// check closes it, so none is missed.
		wake := m.wakeup()
		limit := m.limit()
		if int64(i) < limit {
			a := m.active.Load()
			if a < limit {
				if m.active.CompareAndSwap(a, a+1) {
					return true
				}
				continue // another poller moved first: check again
			}
		}
		if tick == nil {
			tick = m.clock().After(idle)
		}
		select {
		case <-ctx.Done():
			return false
		case <-wake:
		case <-tick:
			tick = nil
		}
	}
}

// done gives up the place turn took, waking a poller that may be waiting
// for it.
func (m *Mapping) done() {
	m.active.Add(-1)
	if m.waiting.Load() > 0 {
		m.broadcast()
	}
}

func (m *Mapping) wakeup() <-chan struct{} {
	m.wakeMu.Lock()
	defer m.wakeMu.Unlock()
	if m.wake == nil {
		m.wake = make(chan struct{})
	}
	return m.wake
}

func (m *Mapping) broadcast() {
	m.wakeMu.Lock()
	defer m.wakeMu.Unlock()
	if m.wake != nil {
		close(m.wake)
		m.wake = nil
	}
}

// Stats are a Mapping's running totals.
type Stats struct {
	// Invocations counts handler invocations (one per non-empty batch).
	Invocations int64
	// Records counts records handed to the handler.
	Records int64
	// Deleted counts records deleted after the handler acknowledged them.
	Deleted int64
	// Failed counts records left on the queue for redelivery: those the
	// handler listed as failures and every record of a failed invocation.
	Failed int64
	// StaleDeletes counts acknowledged records whose delete found the
	// receipt handle stale: another poller holds the message now (the
	// at-least-once case handlers must tolerate).
	StaleDeletes int64
	// InvocationErrors counts failed invocations (error, panic, timeout,
	// invalid response).
	InvocationErrors int64
}

// Stats returns the running totals. Each counter is read atomically, the
// set is not a snapshot: read it when the mapping is idle for exact sums.
func (m *Mapping) Stats() Stats {
	return Stats{
		Invocations:      m.invocations.Load(),
		Records:          m.records.Load(),
		Deleted:          m.deleted.Load(),
		Failed:           m.failed.Load(),
		StaleDeletes:     m.staleDeletes.Load(),
		InvocationErrors: m.invocationErrors.Load(),
	}
}

// PollOnce is one turn of the mapping: it receives up to BatchSize records
// visible now, gathers more for up to BatchingWindow while the batch is
// short, invokes the handler Gap later, and deletes every record the
// handler did not list in BatchItemFailures. handled is the batch's size.
//
// As in Lambda, an invocation that fails as a whole deletes nothing and
// returns an error wrapping ErrInvocation: the handler returned an error,
// panicked, was still running at its deadline or returned after it, or
// listed an item identifier not in the batch. At the deadline the
// invocation ends without waiting; the handler's goroutine goes on until
// it heeds its context, and its answer is discarded. A delete that finds
// its receipt handle stale is counted, not an error.
func (m *Mapping) PollOnce(ctx context.Context) (handled int, err error) {
	return m.pollOnce(ctx, ctx)
}

// pollOnce is PollOnce with the receive side (the batching window and the
// gap) on ctx and the invocation on invokeCtx, so Run can stop gathering
// without cutting an invocation short.
func (m *Mapping) pollOnce(ctx, invokeCtx context.Context) (handled int, err error) {
	if err := m.check(); err != nil {
		return 0, err
	}
	info, err := m.Broker.Info(m.Queue)
	if err != nil {
		return 0, fmt.Errorf("event source mapping: %w", err)
	}
	msgs, err := m.Broker.Receive(ctx, m.Queue, m.batchSize(), 0)
	if err != nil {
		return 0, fmt.Errorf("event source mapping %s: %w", info.Name, err)
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	// What is received stays in flight if the poller stops here, and
	// comes back after its visibility timeout, as when Lambda's poller
	// stops.
	if msgs, err = m.gather(ctx, msgs); err != nil {
		return 0, fmt.Errorf("event source mapping %s: %w", info.Name, err)
	}
	if m.Gap > 0 {
		select {
		case <-m.clock().After(m.Gap):
		case <-ctx.Done():
			return 0, fmt.Errorf("event source mapping %s: %w", info.Name, ctx.Err())
		}
	}
	n := len(msgs)
	m.invocations.Add(1)
	m.records.Add(int64(n))
	ev := Event(msgs, info.ARN, localqueue.Region)

	resp, err := m.invoke(invokeCtx, ev)
	if err == nil {
		var failed map[string]bool
		if failed, err = failures(resp, ev); err == nil {
			m.failed.Add(int64(len(failed)))
			return n, m.deleteExcept(invokeCtx, info.Name, ev, failed)
		}
	}
	m.invocationErrors.Add(1)
	m.failed.Add(int64(n))
	return n, fmt.Errorf("event source mapping %s: %w: %w", info.Name, ErrInvocation, err)
}

// gather receives more records every BatchingPoll while the batch is
// short of BatchSize, until BatchingWindow has passed since the first
// receive.
func (m *Mapping) gather(ctx context.Context, msgs []localqueue.Message) ([]localqueue.Message, error) {
	if m.BatchingWindow <= 0 {
		return msgs, nil
	}
	clk := m.clock()
	end := clk.Now().Add(m.BatchingWindow)
	for len(msgs) < m.batchSize() {
		left := end.Sub(clk.Now())
		if left <= 0 {
			break
		}
		select {
		case <-clk.After(min(left, BatchingPoll)):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		more, err := m.Broker.Receive(ctx, m.Queue, m.batchSize()-len(msgs), 0)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, more...)
	}
	return msgs, nil
}

// Run polls until ctx is done: again at once after a batch (a backlog is
// drained as fast as the handler goes), after idle on the clock after an
// empty receive (idle ≤ 0 means DefaultIdle). With Workers > 1 it runs
// that many pollers in parallel, as many of them at once as
// SetMaxConcurrency allows. Failed invocations are logged and
// polling goes on, since their batches come back by themselves; any other
// error (the queue is gone, the mapping is misconfigured) stops every
// poller and is returned. A done ctx returns nil.
func (m *Mapping) Run(ctx context.Context, idle time.Duration) error {
	if err := m.check(); err != nil {
		return err
	}
	if idle <= 0 {
		idle = DefaultIdle
	}
	workers := m.workers()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	for i := range workers {
		wg.Go(func() {
			if err := m.loop(ctx, i, idle); err != nil {
				once.Do(func() { firstErr = err })
				cancel()
			}
		})
	}
	wg.Wait()
	return firstErr
}

// sandboxed is an invocation's context in sandbox: cancelled when the
// sandbox ends, but with no deadline of the sandbox's, so the handler's
// deadline is its function's timeout alone, as on Lambda. A local run's
// end is the sandboxes dying, not every function's deadline: a handler
// that plans by its deadline (a delivery's copy window) would otherwise
// see the run's remaining time and stop working well before it ends.
func sandboxed(sandbox context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(sandbox))
	stop := context.AfterFunc(sandbox, func() { cancel(context.Cause(sandbox)) })
	return ctx, func() { stop(); cancel(nil) }
}

// loop is poller number i of Run.
func (m *Mapping) loop(ctx context.Context, i int, idle time.Duration) error {
	clk := m.clock()
	for {
		if ctx.Err() != nil || !m.turn(ctx, i, idle) {
			return nil
		}
		// Stopping Run stops polling and gathering, not an invocation in
		// flight (as disabling a Lambda event source mapping does): only
		// the function's deadline, or the sandbox's end, ends it.
		invokeCtx, release := context.WithoutCancel(ctx), func() {}
		if m.Sandbox != nil {
			invokeCtx, release = sandboxed(m.Sandbox)
		}
		n, err := m.pollOnce(ctx, invokeCtx)
		release()
		m.done()
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrInvocation):
			if m.Log != nil {
				m.Log.ErrorContext(ctx, "event source mapping: invocation failed", "queue", m.Queue, "records", n, "error", err.Error())
			}
			continue
		case err != nil:
			return err
		case n > 0:
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-clk.After(idle):
		}
	}
}

// Event builds the event Lambda would send for msgs received from the
// queue with ARN queueARN: the record fields and the attributes
// (ApproximateReceiveCount, SentTimestamp, SenderId,
// ApproximateFirstReceiveTimestamp, times in Unix milliseconds as
// strings). It is exported for tests and simulations that invoke a
// handler themselves.
func Event(msgs []localqueue.Message, queueARN, region string) events.SQSEvent {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(msgs))}
	for i, msg := range msgs {
		sum := md5.Sum(msg.Body)
		ev.Records[i] = events.SQSMessage{
			MessageId:     msg.ID,
			ReceiptHandle: msg.ReceiptHandle,
			Body:          string(msg.Body),
			Md5OfBody:     hex.EncodeToString(sum[:]),
			Attributes: map[string]string{
				"ApproximateReceiveCount":          strconv.Itoa(msg.ReceiveCount),
				"SentTimestamp":                    strconv.FormatInt(msg.SentAt.UnixMilli(), 10),
				"SenderId":                         SenderID,
				"ApproximateFirstReceiveTimestamp": strconv.FormatInt(msg.FirstReceivedAt.UnixMilli(), 10),
			},
			// Lambda sends an empty object, not null, when there are none.
			MessageAttributes: map[string]events.SQSMessageAttribute{},
			EventSourceARN:    queueARN,
			EventSource:       "aws:sqs",
			AWSRegion:         region,
		}
	}
	return ev
}

// invoke calls the handler under the function's deadline, turning a
// panic, an overrun and a handler still running at the deadline into
// errors.
func (m *Mapping) invoke(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	clk := m.clock()
	timeout := m.timeout()
	deadline := clk.Now().Add(timeout)
	ictx, cancel := withDeadline(ctx, clk, deadline, timeout)
	defer cancel()
	type result struct {
		resp events.SQSEventResponse
		err  error
	}
	// Buffered: a handler left behind at its deadline must not block.
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r = result{err: fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack())}
			}
			done <- r
		}()
		r.resp, r.err = m.Handler(ictx, ev)
		if r.err != nil {
			r.err = fmt.Errorf("handler: %w", r.err)
		}
	}()
	var r result
	select {
	case r = <-done:
	case <-ictx.Done():
		select {
		case r = <-done: // it returned as the context ended: judged below
		default:
			if !errors.Is(ictx.Err(), context.DeadlineExceeded) {
				// The caller cancelled: the handler sees it and returns;
				// only the deadline ends an invocation.
				r = <-done
				break
			}
			return events.SQSEventResponse{}, fmt.Errorf("handler still running at its %v timeout, stopped: %w", timeout, context.DeadlineExceeded)
		}
	}
	if r.err != nil {
		return r.resp, r.err
	}
	if !clk.Now().Before(deadline) || errors.Is(ictx.Err(), context.DeadlineExceeded) {
		return r.resp, fmt.Errorf("handler returned after its %v timeout: %w", timeout, context.DeadlineExceeded)
	}
	return r.resp, nil
}

// failures checks the batch response against the batch as Lambda does: an
// item identifier that is empty or names no record fails the whole batch.
func failures(resp events.SQSEventResponse, ev events.SQSEvent) (map[string]bool, error) {
	if len(resp.BatchItemFailures) == 0 {
		return nil, nil
	}
	inBatch := make(map[string]bool, len(ev.Records))
	for _, r := range ev.Records {
		inBatch[r.MessageId] = true
	}
	failed := make(map[string]bool, len(resp.BatchItemFailures))
	for _, f := range resp.BatchItemFailures {
		if !inBatch[f.ItemIdentifier] {
			return nil, fmt.Errorf("batch response lists item identifier %q, which is not in the batch", f.ItemIdentifier)
		}
		failed[f.ItemIdentifier] = true
	}
	return failed, nil
}

// deleteExcept deletes the records not in failed. The deletes do not
// depend on ctx: once the handler has acknowledged a record, shutting down
// must not make it come back.
func (m *Mapping) deleteExcept(ctx context.Context, queue string, ev events.SQSEvent, failed map[string]bool) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for _, r := range ev.Records {
		if failed[r.MessageId] {
			continue
		}
		switch err := m.Broker.Delete(ctx, m.Queue, r.ReceiptHandle); {
		case err == nil:
			m.deleted.Add(1)
		case errors.Is(err, localqueue.ErrStaleReceipt):
			m.staleDeletes.Add(1)
		default:
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("event source mapping %s: delete: %w", queue, err)
	}
	return nil
}

func (m *Mapping) check() error {
	switch {
	case m.Broker == nil:
		return errors.New("event source mapping: nil Broker")
	case m.Handler == nil:
		return errors.New("event source mapping: nil Handler")
	case m.BatchSize < 0 || m.BatchSize > MaxBatchSize:
		return fmt.Errorf("event source mapping: BatchSize %d outside 0..%d", m.BatchSize, MaxBatchSize)
	case m.Timeout < 0:
		return fmt.Errorf("event source mapping: negative Timeout %v", m.Timeout)
	case m.Workers < 0:
		return fmt.Errorf("event source mapping: negative Workers %d", m.Workers)
	case m.Gap < 0:
		return fmt.Errorf("event source mapping: negative Gap %v", m.Gap)
	case m.BatchingWindow < 0:
		return fmt.Errorf("event source mapping: negative BatchingWindow %v", m.BatchingWindow)
	}
	return nil
}

func (m *Mapping) batchSize() int         { return cmp.Or(m.BatchSize, DefaultBatchSize) }
func (m *Mapping) timeout() time.Duration { return cmp.Or(m.Timeout, DefaultTimeout) }
func (m *Mapping) clock() clock.Clock     { return cmp.Or[clock.Clock](m.Clock, clock.Real{}) }
func (m *Mapping) workers() int           { return max(m.Workers, 1) }
