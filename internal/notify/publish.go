package notify

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
)

// Marker is what a Publisher needs of the store: store.Store's SetEvent.
type Marker interface {
	SetEvent(ctx context.Context, rec operation.Record) (operation.Record, error)
}

// Publisher sends a record's unsent event and marks it sent.
type Publisher struct {
	sink    Sink
	store   Marker
	log     *slog.Logger
	metrics *metrics.Emitter
}

// New returns a publisher to sink that marks events sent in st.
func New(sink Sink, st Marker, log *slog.Logger, m *metrics.Emitter) *Publisher {
	return &Publisher{sink: sink, store: st, log: cmp.Or(log, slog.New(slog.DiscardHandler)), metrics: m}
}

// sendTimeout bounds one send, so an unreachable sink delays the write
// that caused the event by this much at most; the sweep sends it later.
const sendTimeout = 5 * time.Second

// Send publishes the event rec owes, if unsent, then marks it sent, and
// returns the record as stored. A failed publish is logged and counted
// (metrics.EventPublishFailures) and returns rec unchanged with the
// error: the event stays owed, for the sweep. A failed mark leaves the
// event sent but owed: it is sent again, which consumers deduplicate.
func (p *Publisher) Send(ctx context.Context, rec operation.Record) (operation.Record, error) {
	ev, ok := Of(rec)
	if !ok {
		return rec, nil
	}
	pctx, cancel := context.WithTimeout(ctx, sendTimeout)
	err := p.sink.Publish(pctx, []Event{ev})
	cancel()
	if err != nil {
		p.metrics.Count(metrics.EventPublishFailures, 1, metrics.Dim{Name: "Phase", Value: string(rec.Phase)})
		p.log.WarnContext(ctx, "completion event not sent; the sweep sends it again", "operation_id", rec.OperationID,
			"event_id", ev.Detail.EventID, "detail_type", string(ev.DetailType), "error", err.Error())
		return rec, fmt.Errorf("send event %s: %w", ev.Detail.EventID, err)
	}
	p.metrics.Count(metrics.EventsPublished, 1, metrics.Dim{Name: "Phase", Value: string(rec.Phase)})
	sent := rec.Clone()
	sent.Event.Sent = true
	saved, err := p.store.SetEvent(ctx, sent)
	if err != nil {
		p.log.WarnContext(ctx, "completion event sent, and marking it sent failed; it is sent again", "operation_id", rec.OperationID,
			"event_id", ev.Detail.EventID, "error", err.Error())
		return rec, fmt.Errorf("mark event %s sent: %w", ev.Detail.EventID, err)
	}
	return saved, nil
}

// Defer moves rec's unsent event's due time to at, so a record whose
// event the sink keeps refusing sorts behind the sweep's other work; it
// returns the record as stored.
func (p *Publisher) Defer(ctx context.Context, rec operation.Record, at time.Time) (operation.Record, error) {
	if _, ok := rec.UnsentEvent(); !ok {
		return rec, nil
	}
	next := rec.Clone()
	next.Event.Due = at
	saved, err := p.store.SetEvent(ctx, next)
	if err != nil {
		return rec, fmt.Errorf("defer event of %s: %w", rec.OperationID, err)
	}
	return saved, nil
}
