package observe

// The feed. An invocation holds each of its records for a whole chain of
// long polls, so Lambda time per render is about the invocation's length
// over the records it holds; the event source mapping hands it one batch
// (at most 10). With a Receiver, the invocation takes more records from
// its own queue while it runs, up to Config.Hold at once, so that under
// load invocations fill up instead of multiplying. A received record goes
// through exactly the batch's path (lease, decision, revision-guarded
// write, follow-up) and is deleted once acknowledged, as the mapping
// deletes the batch's; a failed one is left for the queue's visibility
// timeout to bring back.

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/metrics"
)

// Receiver is the observe queue as the feed uses it, its messages shaped
// as Lambda's event gives them (MessageId, ReceiptHandle, Body, and the
// ApproximateReceiveCount and SentTimestamp attributes as strings).
type Receiver interface {
	// Receive returns up to max (1..10) messages, waiting up to wait for
	// the first; none and a nil error when the wait ran out.
	Receive(ctx context.Context, max int, wait time.Duration) ([]events.SQSMessage, error)
	// Delete acknowledges a received message.
	Delete(ctx context.Context, receiptHandle string) error
}

const (
	// feedReceiveSlack is how much longer than its wait a receive may
	// take before it is abandoned.
	feedReceiveSlack = 10 * time.Second
	// DefaultHold is the default Config.Hold.
	DefaultHold = 1250
	// DefaultFeedMargin is the default Config.FeedMargin: a record taken
	// this late still gets a long poll before its chain hands over. It is
	// short because an invocation that stops feeding leaves the queue to
	// the others, and the sweep fits observe's concurrency down to 2
	// (sweep.Fit): with 3 minutes, 100 renders in flight on 2 invocations
	// waited up to a minute whenever both were in their last 3 minutes
	// (p99 detection 32 s; 30 s: 0.31 s, GETs per render 1.018× the
	// floor). A record taken late costs one hand-over more.
	DefaultFeedMargin = 30 * time.Second
	// feedMax and feedWait are SQS's most messages per receive and its
	// longest long poll.
	feedMax  = 10
	feedWait = 20 * time.Second
	// feedBackoff is the pause after a failed receive.
	feedBackoff = 5 * time.Second
)

// feed is one invocation's records held: its batch and what it received.
type feed struct {
	h          *Handler
	mu         sync.Mutex
	held, most int
	received   int
	freed      chan struct{} // signalled, never blocking, as records finish
	wg         sync.WaitGroup
}

// fed runs the batch and, alongside it, receives until the feed's stop
// time (Config.FeedMargin before the deadline), or until the invocation
// holds nothing and a receive brought nothing: an idle invocation ends
// rather than pay for waiting. It returns the batch's response once every
// record received is done too.
func (h *Handler) fed(ctx context.Context, ev events.SQSEvent) events.SQSEventResponse {
	dl, _ := ctx.Deadline()
	f := &feed{h: h, freed: make(chan struct{}, 1)}
	f.take(len(ev.Records), false)
	batch := make(chan events.SQSEventResponse, 1)
	go func() {
		resp := h.w.Handle(ctx, ev, h.decide)
		f.done(len(ev.Records))
		batch <- resp
	}()
	f.receive(ctx, dl.Add(-h.cfg.FeedMargin))
	resp := <-batch
	f.wg.Wait()
	h.metrics.Count(metrics.FeedReceived, float64(f.received))
	h.metrics.Count(metrics.RecordsHeld, float64(f.most))
	h.log.InfoContext(ctx, "feed done", "batch", len(ev.Records), "received", f.received, "most_held", f.most)
	return resp
}

func (f *feed) receive(ctx context.Context, stop time.Time) {
	h := f.h
	for ctx.Err() == nil {
		left := stop.Sub(h.clk.Now())
		// Whole seconds, as SQS waits: a shorter wait would be a short
		// poll, and the loop would spin.
		wait := min(h.cfg.FeedWait, left).Truncate(time.Second)
		if wait <= 0 {
			return
		}
		room := h.cfg.Hold - f.holding()
		if room <= 0 {
			select {
			case <-f.freed:
			case <-ctx.Done():
			case <-h.clk.After(left):
			}
			continue
		}
		// A receive that hangs must not hold the invocation (and its
		// batch's answer) to Lambda's timeout.
		rctx, cancel := context.WithTimeout(ctx, wait+feedReceiveSlack)
		msgs, err := h.feed.Receive(rctx, min(feedMax, room), wait)
		cancel()
		switch {
		case ctx.Err() != nil:
			// The invocation is ending: what came stays in flight and
			// comes back after its visibility timeout.
			return
		case err != nil:
			h.log.WarnContext(ctx, "feed: receive failed", "error", err.Error())
			if f.holding() == 0 {
				// An idle invocation does not wait out a broken queue; the
				// mapping still delivers.
				return
			}
			select {
			case <-ctx.Done():
			case <-h.clk.After(min(feedBackoff, left)):
			}
			continue
		case len(msgs) == 0:
			if f.holding() == 0 {
				return
			}
			continue
		}
		f.take(len(msgs), true)
		for _, m := range msgs {
			f.wg.Go(func() { f.handle(ctx, m) })
		}
	}
}

// handle runs one received record as a one-record batch and deletes it
// once acknowledged. A failed one is left for the queue's visibility
// timeout to redeliver, as the mapping leaves a batch's failures. A
// failed delete is logged and counted: the message comes back and
// collapses on the revision check.
func (f *feed) handle(ctx context.Context, m events.SQSMessage) {
	defer f.done(1)
	h := f.h
	resp := h.w.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{m}}, h.decide)
	if len(resp.BatchItemFailures) > 0 {
		return
	}
	// The record is acknowledged: the invocation's end must not bring it
	// back.
	if err := h.feed.Delete(context.WithoutCancel(ctx), m.ReceiptHandle); err != nil {
		// SQS names a refused receipt handle in its error; the handle lets
		// its holder delete the message, so it is not logged.
		msg := strings.ReplaceAll(err.Error(), m.ReceiptHandle, "<receipt handle>")
		h.log.WarnContext(ctx, "feed: delete failed; the message comes back", "message_id", m.MessageId, "error", msg)
		h.metrics.Count(metrics.FeedDeleteFailures, 1)
	}
}

// take counts n records held (received ones also as received).
func (f *feed) take(n int, received bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held += n
	f.most = max(f.most, f.held)
	if received {
		f.received += n
	}
}

// done ends n holds: one record received, or the whole batch.
func (f *feed) done(n int) {
	f.mu.Lock()
	f.held -= n
	f.mu.Unlock()
	select {
	case f.freed <- struct{}{}:
	default:
	}
}

func (f *feed) holding() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held
}
