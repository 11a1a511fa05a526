// Package stack is the composition table: the one list of genjobs'
// Lambda functions, each with what it reads of its environment and how
// its handler is built from one dependency set. The deployed functions
// (functions/*/main.go, through internal/coldstart) and the local tooling
// (the local pipeline, the benchmarks, the fault simulation) build their
// handlers here, each with its own clients.
package stack

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/deliver"
	"github.com/genjobs/genjobs/internal/intake"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/notify"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/submit"
	"github.com/genjobs/genjobs/internal/sweep"
	"github.com/genjobs/genjobs/internal/triage"
	"github.com/genjobs/genjobs/internal/worker"
)

// Function names: each function's folder under functions/.
const (
	Submit  = "submit"
	Observe = "observe"
	Deliver = "deliver"
	Triage  = "triage"
	Sweep   = "sweep"
	Intake  = "intake"
)

// Functions is the table, in template.yaml's order.
var Functions = []Function{
	{Name: Submit, Needs: submit.Needs, build: func(d Deps) Handler {
		c := tuned(d, submit.Config{QueueURL: d.Config.Queues[message.ActionSubmitGeneration].URL, Visibility: d.Config.Visibility,
			Concurrency: d.Config.Concurrency, OverdueAfter: d.Config.SweepOverdue})
		return batch(submit.New(submit.Deps{Store: d.Store, Genace: d.Genace, Extender: d.Extender, Sender: d.Sender, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics}, c).Handle)
	}},
	{Name: Observe, Needs: observe.Needs, build: func(d Deps) Handler {
		delays := d.Delays
		if delays == nil {
			delays = schedule.NewObservation(d.Config.Policies)
		}
		return batch(observe.New(observe.Deps{Store: d.Store, Genace: d.Genace, Delays: delays, Extender: d.Extender, Sender: d.Sender, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics,
			Receiver: d.Receiver}, tuned(d, observe.Configured(d.Config))).Handle)
	}},
	{Name: Deliver, Needs: deliver.Needs, build: func(d Deps) Handler {
		c := tuned(d, deliver.Config{QueueURL: d.Config.Queues[message.ActionDeliverArtifacts].URL, Visibility: d.Config.Visibility,
			Concurrency: d.Config.Concurrency, OverdueAfter: d.Config.SweepOverdue})
		return batch(deliver.New(deliver.Deps{Store: d.Store, Genace: d.Genace, Artifacts: d.Artifacts, Extender: d.Extender, Sender: d.Sender, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics}, c).Handle)
	}},
	{Name: Triage, Needs: triage.Needs, build: func(d Deps) Handler {
		return batch(triage.New(triage.Deps{Store: d.Store, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics}, tuned(d, triage.Config{Concurrency: d.Config.Concurrency})).Handle)
	}},
	{Name: Sweep, Needs: sweep.Needs, build: func(d Deps) Handler {
		var events sweep.Events
		if d.publisher != nil { // nil without a store
			events = d.publisher
		}
		s := sweep.New(sweep.Deps{Store: d.Store, Sender: d.Sender, Events: events, Capacity: d.Capacity, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics},
			tuned(d, sweep.Configured(d.Config)))
		return Handler{Lambda: s.Handle, Scheduled: func(ctx context.Context) error { _, err := s.Sweep(ctx); return err }}
	}},
	{Name: Intake, Needs: intake.Needs, build: buildIntake},
}

// buildIntake builds the intake API, identifying callers by the IAM
// principal FunctionURL reads (or WithCaller's, served locally). Local
// tools that set no catalog get config's default one.
func buildIntake(d Deps) Handler {
	catalog := d.Config.Catalog
	if catalog == nil {
		catalog, _ = config.ParseCatalog(config.DefaultModelCatalog)
	}
	// The body may hold the input with whitespace around it.
	limits := intake.Limits{MaxInputBytes: d.Config.MaxInputBytes, MaxBodyBytes: 2 * int64(d.Config.MaxInputBytes)}
	svc, err := intake.New(intake.Deps{Store: d.Store, Sender: d.Sender, Clock: d.Clock, Catalog: catalog, Limits: limits, Log: d.Log})
	if err != nil {
		// config.Load refused any catalog New would: what is left is a
		// dependency set without a store or a sender, a wiring bug.
		panic(fmt.Sprintf("stack: %v", err))
	}
	h := svc.Handler(intake.CallerIdentity)
	return Handler{Lambda: intake.FunctionURL(h), HTTP: h}
}

// Function is one Lambda function of the table.
type Function struct {
	// Name is its folder under functions/.
	Name string
	// Needs is what it reads of its environment (config.Load's spec).
	Needs config.Spec
	build func(Deps) Handler
}

// Build builds the function's handler from d. Its store sends each
// completion event a write leaves owed right after the write
// (notifying), to d.Events, or to none (notify.Discard) when that is nil.
func (f Function) Build(d Deps) Handler {
	if d.Store != nil {
		var sink notify.Sink = notify.Discard{}
		if d.Events != nil {
			sink = d.Events
		}
		d.publisher = notify.New(sink, d.Store, d.Log, d.Metrics)
		d.Store = notifying{Store: d.Store, p: d.publisher}
	}
	return f.build(d)
}

// notifying is the store a handler writes through: a write that leaves
// the record owing an unsent completion event sends it and returns the
// record marked sent, so the handler's next write carries that on. A
// failed send is the publisher's to log; the write stands, and the sweep
// sends the event later.
type notifying struct {
	Store
	p *notify.Publisher
}

// Update implements the handlers' Update.
func (n notifying) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	saved, err := n.Store.Update(ctx, rec, expected)
	if err != nil {
		return saved, err
	}
	if sent, err := n.p.Send(ctx, saved); err == nil {
		return sent, nil
	}
	return saved, nil
}

// Lookup returns the function with the name.
func Lookup(name string) (Function, bool) {
	for _, f := range Functions {
		if f.Name == name {
			return f, true
		}
	}
	return Function{}, false
}

// Store is what the handlers need of persistence, all of them together,
// and marking completion events sent.
type Store interface {
	intake.Store
	notify.Marker
	submit.Store
	observe.Store
	deliver.Store
	triage.Store
	sweep.Store
}

// Genace is what the handlers need of the Genace client.
type Genace interface {
	submit.Genace
	observe.Genace
	deliver.Genace
}

// Deps is the one dependency set every handler is built from. A function
// uses the part it needs: triage has no Genace and no Sender, only
// deliver has Artifacts.
type Deps struct {
	// Config is the function's settings: read from its environment when
	// deployed, written by a local tool from the topology otherwise. Each
	// handler's Config is derived from it (Visibility and Concurrency are
	// the function's own).
	Config    config.Config
	Store     Store
	Genace    Genace
	Artifacts deliver.Artifacts
	// Extender renews message visibility; Sender sends follow-ups.
	Extender worker.Extender
	Sender   worker.Sender
	// Delays is observe's delay policy (nil: Config.Policies').
	Delays observe.Delays
	// Receiver is the function's own queue, for a function that receives
	// from it while it runs (config.NeedHold: observe's feed); nil: the
	// event's batch alone.
	Receiver observe.Receiver
	// Capacity is observe's queue and mapping, for the sweep to fit one
	// to the other (nil: the sweep leaves observe's concurrency as it is).
	Capacity sweep.Capacity
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *metrics.Emitter
	// Tune changes a handler's Config after it is derived from Config.
	Tune []Option
	// Events receives the completion events (nil: none, notify.Discard).
	Events notify.Sink

	publisher *notify.Publisher // Build's, over Events and Store
}

// Option changes one handler's Config: a local tool's setting that no
// environment variable carries (a shorter observation chain, a jitter
// the seed controls). Tune makes one.
type Option func(cfg any)

// Tune is the Option that applies f to the handler Config of type C
// (submit.Config, observe.Config, ...); the other handlers ignore it.
func Tune[C any](f func(*C)) Option {
	return func(cfg any) {
		if c, ok := cfg.(*C); ok {
			f(c)
		}
	}
}

// tuned is c with d's options applied.
func tuned[C any](d Deps, c C) C {
	for _, o := range d.Tune {
		o(&c)
	}
	return c
}

// Handler is one built function.
type Handler struct {
	// Lambda is what lambda.Start serves: the handler's Handle method.
	Lambda any
	// Batch handles one SQS batch (nil for a scheduled function).
	Batch func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)
	// Scheduled runs a scheduled function once (nil for a queue consumer).
	Scheduled func(context.Context) error
	// HTTP serves an HTTP function's API (nil for the others), for a
	// local tool to serve on loopback; Lambda is its function URL adapter.
	HTTP http.Handler
}

func batch(h func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)) Handler {
	return Handler{Lambda: h, Batch: h}
}
