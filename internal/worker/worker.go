package worker

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
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

// Config describes one handler's queue and writes.
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
	// Resends and ResendBackoff: see Persister.
	Resends       int
	ResendBackoff time.Duration
	// Source marks the reviews its follow-ups write (default
	// review.SourceHandler).
	Source review.Source
}

// Worker is one handler's write path. For an SQS handler, Handle runs
// the batch, each record through decode, load and lease to the handler's
// Step; whatever the step decides, Commit carries out: the conditional
// write, a lost race, the follow-up, the outcome.
type Worker struct {
	name      string
	runner    Runner
	consumer  Consumer
	persister Persister
	emitter   *Emitter
	sender    Sender
	store     RecordStore
	clock     clock.Clock
	log       *slog.Logger
	metrics   *metrics.Emitter
}

// New wires a worker.
func New(d Deps, c Config) *Worker {
	log := cmp.Or(d.Log, slog.New(slog.DiscardHandler))
	return &Worker{
		name:   c.Name,
		runner: Runner{Action: string(c.Action), Concurrency: c.Concurrency, Log: log, Metrics: d.Metrics, Clock: d.Clock},
		consumer: Consumer{Action: c.Action, Name: c.Name, Queue: c.Queue, Store: d.Store,
			Extender: d.Extender, QueueURL: c.QueueURL, Visibility: c.Visibility, Clock: d.Clock, Log: log, Metrics: d.Metrics},
		persister: Persister{Store: d.Store, Clock: d.Clock, Metrics: d.Metrics,
			Action: cmp.Or(c.StaleWriteAction, string(c.Action)), Resends: c.Resends, Backoff: c.ResendBackoff},
		emitter: &Emitter{Sender: d.Sender, Reviews: d.Store, Clock: d.Clock, Metrics: d.Metrics,
			Source: cmp.Or(c.Source, review.SourceHandler)},
		sender: d.Sender, store: d.Store, clock: d.Clock, log: log, metrics: d.Metrics,
	}
}

// Turn is one message's handling as a step sees it: the message, its
// envelope, its lease and the record as last read or written.
type Turn struct {
	Msg   events.SQSMessage
	Env   message.Envelope
	Rec   operation.Record
	Lease *Lease
}

// Step is a handler's decision on one message's record. It returns what
// it decided; the worker commits it.
type Step func(ctx context.Context, t Turn) Decision

// Handle runs a batch: each record to the step, its decision committed,
// and the failed ones reported back.
func (w *Worker) Handle(ctx context.Context, ev events.SQSEvent, step Step) events.SQSEventResponse {
	return w.runner.Run(ctx, ev, w.consumer.Record(func(ctx context.Context, m events.SQSMessage, env message.Envelope, rec operation.Record, l *Lease) (Outcome, error) {
		t := Turn{Msg: m, Env: env, Rec: rec, Lease: l}
		return w.Commit(ctx, t, step(ctx, t))
	}))
}
