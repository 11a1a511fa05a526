package worker

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store"
)

// Deps is what a worker works with.
type Deps struct {
	// Store reads and writes records and reviews.
	Store RecordStore
	// Extender renews message visibility (the lease).
	Extender Extender
	// Sender delivers follow-up messages.
	Sender  Sender
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Emitter
}

// Config describes one SQS handler's queue.
type Config struct {
	// Action is the only action the queue carries.
	Action message.Action
	// Name is the function ("submit"), which starts its error texts and
	// its writer name; Queue names its queue in them ("dispatch").
	Name, Queue string
	// QueueURL and Visibility make each message's lease.
	QueueURL   string
	Visibility time.Duration
	// Concurrency bounds records in flight per batch (Runner's default
	// when zero).
	Concurrency int
	// StaleWriteAction is the Action dimension of StaleWritesRejected
	// (default: Action).
	StaleWriteAction string
	// RetryUnknown: see Persister.
	RetryUnknown bool
	// Source marks the reviews its follow-ups write (default
	// review.SourceHandler).
	Source review.Source
}

// Worker is one SQS handler's path for each record of a batch: Handle
// runs the batch, each record through decode, load and lease to the
// handler's Decision; the decision persists through Persist and sends
// what the persisted record expects through Emit.
type Worker struct {
	runner    Runner
	consumer  Consumer
	persister Persister
	emitter   *Emitter
	sender    Sender
}

// New wires a worker.
func New(d Deps, c Config) *Worker {
	log := cmp.Or(d.Log, slog.New(slog.DiscardHandler))
	return &Worker{
		runner: Runner{Action: string(c.Action), Concurrency: c.Concurrency, Log: log, Metrics: d.Metrics, Clock: d.Clock},
		consumer: Consumer{Action: c.Action, Name: c.Name, Queue: c.Queue, Store: d.Store,
			Extender: d.Extender, QueueURL: c.QueueURL, Visibility: c.Visibility, Clock: d.Clock, Log: log, Metrics: d.Metrics},
		persister: Persister{Store: d.Store, Clock: d.Clock, Metrics: d.Metrics,
			Action: cmp.Or(c.StaleWriteAction, string(c.Action)), RetryUnknown: c.RetryUnknown},
		emitter: &Emitter{Sender: d.Sender, Reviews: d.Store, Clock: d.Clock, Metrics: d.Metrics,
			Source: cmp.Or(c.Source, review.SourceHandler)},
		sender: d.Sender,
	}
}

// Handle runs a batch: each record to decide, and the failed ones
// reported back.
func (w *Worker) Handle(ctx context.Context, ev events.SQSEvent, decide Decision) events.SQSEventResponse {
	return w.runner.Run(ctx, ev, w.consumer.Record(decide))
}

// Persist writes a decision (Persister.Persist).
func (w *Worker) Persist(ctx context.Context, cur operation.Record, messageID string, mutate Mutation) (operation.Record, error) {
	return w.persister.Persist(ctx, cur, messageID, mutate)
}

// Emit does what the persisted record expects next (Emitter.Emit).
func (w *Worker) Emit(ctx context.Context, rec *operation.Record, attempt int) error {
	return w.emitter.Emit(ctx, rec, attempt)
}

// Park stops automation on an operation no retry can move on (the job
// is unknown to Genace, a delivery cannot be verified): the record keeps
// its phase, is parked with reason, which takes it out of the sweep's
// index, and Emit files one review; an operator's replay clears the park.
// Failed towards the DLQ instead, the record would stay due and the sweep
// re-arm it every run. Each park is counted in OperationsParked by
// lastError, its category. When another writer moved the record first, its
// state stands: nothing is written (OutcomeLostRace).
func (w *Worker) Park(ctx context.Context, cur operation.Record, messageID, reason, lastError string, attempt int) (operation.Record, Outcome, error) {
	now := w.persister.Clock.Now()
	next := cur.Clone()
	next.Parked = &operation.ParkedState{Reason: reason, At: now}
	next.Schedule = nil
	next.LastError = lastError
	next.Timestamps.Updated = now
	saved, err := w.Persist(ctx, cur, messageID, OnlyAt(cur.Revision, next))
	if errors.Is(err, ErrMovedOn) || errors.Is(err, store.ErrConflict) {
		return cur, OutcomeLostRace, nil
	}
	if err != nil {
		return cur, OutcomeError, err
	}
	w.persister.Metrics.Count(metrics.Parked, 1, metrics.Dim{Name: "Reason", Value: lastError})
	return saved, OutcomeParked, w.Emit(ctx, &saved, attempt)
}

// Send sends one message the record does not schedule itself (a re-arm,
// a hand-over), after delay.
func (w *Worker) Send(ctx context.Context, env message.Envelope, delay time.Duration) (schedule.Route, error) {
	return w.sender.Send(ctx, env, delay)
}

// Obsolete acknowledges a message that the record makes pointless
// (Consumer.Obsolete).
func (w *Worker) Obsolete(ctx context.Context, env message.Envelope, rec *operation.Record, why Reason) (Outcome, error) {
	return w.consumer.Obsolete(ctx, env, rec, why)
}
