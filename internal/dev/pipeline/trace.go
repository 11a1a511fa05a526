package pipeline

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/dev/eventsource"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/worker"
)

// TraceEvent is one line of Config.Trace.
type TraceEvent struct {
	At time.Time `json:"at"`
	// Event is "receive" (a function got the message), "send" (a
	// follow-up was sent, to arrive at Due) or "resend" (a resume sent a
	// record's next action again, to arrive at Due).
	Event       string         `json:"event"`
	Function    string         `json:"function,omitempty"`
	Action      message.Action `json:"action"`
	OperationID string         `json:"operation_id"`
	Revision    int64          `json:"revision"`
	Due         *time.Time     `json:"due,omitempty"`
}

// tracer writes TraceEvents; a nil one writes nothing.
type tracer struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func newTracer(w io.Writer) *tracer {
	if w == nil {
		return nil
	}
	return &tracer{enc: json.NewEncoder(w)}
}

func (t *tracer) write(ev TraceEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_ = t.enc.Encode(ev)
}

// handler traces each message fn receives before h handles it.
func (t *tracer) handler(fn string, h eventsource.Handler) eventsource.Handler {
	if t == nil {
		return h
	}
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		t.received(fn, ev.Records)
		return h(ctx, ev)
	}
}

func (t *tracer) received(fn string, msgs []events.SQSMessage) {
	now := time.Now()
	for _, m := range msgs {
		if env, err := message.Decode([]byte(m.Body)); err == nil {
			t.write(TraceEvent{At: now, Event: "receive", Function: fn, Action: env.Action, OperationID: env.OperationID, Revision: env.ExpectedRevision})
		}
	}
}

// receiver traces each message fn's feed receives, as handler does the
// mapping's; nil stays nil.
func (t *tracer) receiver(fn string, r observe.Receiver) observe.Receiver {
	if t == nil || r == nil {
		return r
	}
	return tracedReceiver{Receiver: r, t: t, fn: fn}
}

type tracedReceiver struct {
	observe.Receiver
	t  *tracer
	fn string
}

// Receive traces what the inner receiver returned.
func (tr tracedReceiver) Receive(ctx context.Context, max int, wait time.Duration) ([]events.SQSMessage, error) {
	msgs, err := tr.Receiver.Receive(ctx, max, wait)
	tr.t.received(tr.fn, msgs)
	return msgs, err
}

// sender traces each message sent through s as event.
func (t *tracer) sender(s worker.Sender, event string) worker.Sender {
	if t == nil {
		return s
	}
	return tracedSender{t: t, s: s, event: event}
}

type tracedSender struct {
	t     *tracer
	s     worker.Sender
	event string
}

func (ts tracedSender) Send(ctx context.Context, env message.Envelope, delay time.Duration) (schedule.Route, error) {
	r, err := ts.s.Send(ctx, env, delay)
	if err == nil {
		due := time.Now().Add(delay)
		ts.t.write(TraceEvent{At: time.Now(), Event: ts.event, Action: env.Action, OperationID: env.OperationID, Revision: env.ExpectedRevision, Due: &due})
	}
	return r, err
}
