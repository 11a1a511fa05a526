package topology

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/dev/eventsource"
	"github.com/genjobs/genjobs/internal/dev/localqueue"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/queue"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/stack"
)

// LocalConfig says how to stand a topology up on an embedded queue.
type LocalConfig struct {
	// Clock is the queues' clock (nil: the wall clock).
	Clock clock.Clock
}

// Local is a topology on an embedded queue: every queue with its redrive
// policy and, once Consume has run, an event source mapping per mapping of
// the topology, feeding the functions' handlers. It is the one wiring the
// local pipeline, the fault simulation and the benchmarks share.
type Local struct {
	// Topology is what was stood up.
	Topology Topology
	// Broker holds the queues.
	Broker *localqueue.Broker
	// Mappings are the event source mappings, in the topology's order
	// (functions, then each function's mappings).
	Mappings []*LocalMapping

	clk   clock.Clock
	feeds map[string]*eventsource.Feed // by function
	urls  map[string]string            // by queue id
	vis   map[string]time.Duration     // by queue id
}

// LocalMapping is one event source mapping of a Local.
type LocalMapping struct {
	// Function is the function it invokes, Queue the queue it polls.
	Function Function
	Queue    Queue
	*eventsource.Mapping
}

// Local creates the topology's queues on a new embedded queue, each
// dead-letter queue before the queue that redrives to it.
func (t Topology) Local(cfg LocalConfig) (*Local, error) {
	clk := cmp.Or[clock.Clock](cfg.Clock, clock.Real{})
	l := &Local{Topology: t, Broker: localqueue.New(clk), clk: clk, feeds: map[string]*eventsource.Feed{},
		urls: map[string]string{}, vis: map[string]time.Duration{}}
	var create func(q Queue) error
	create = func(q Queue) error {
		if _, done := l.urls[q.ID]; done {
			return nil
		}
		qc := localqueue.Config{Visibility: q.Visibility}
		if q.DeadLetter != "" {
			dlq, ok := t.Queue(q.DeadLetter)
			if !ok {
				return fmt.Errorf("topology: queue %s redrives to %s, which it does not declare", q.ID, q.DeadLetter)
			}
			if err := create(dlq); err != nil {
				return err
			}
			qc.DeadLetter, qc.MaxReceiveCount = dlq.Name, q.MaxReceiveCount
		}
		url, err := l.Broker.Create(q.Name, qc)
		if err != nil {
			return fmt.Errorf("topology: queue %s: %w", q.ID, err)
		}
		l.urls[q.ID], l.vis[q.ID] = url, qc.Visibility
		return nil
	}
	for _, q := range t.Queues {
		if err := create(q); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// URL is the queue's URL (by logical id; "" for none).
func (l *Local) URL(queueID string) string { return l.urls[queueID] }

// Visibility is the queue's visibility timeout as created.
func (l *Local) Visibility(queueID string) time.Duration { return l.vis[queueID] }

// Consumed is the first queue the function consumes (its only one, for
// every function but triage), and its URL and visibility as created.
func (l *Local) Consumed(function string) (q Queue, url string, visibility time.Duration) {
	f, _ := l.Topology.Function(function)
	if len(f.Mappings) == 0 {
		return Queue{}, "", 0
	}
	q, _ = l.Topology.Queue(f.Mappings[0].Queue)
	return q, l.urls[q.ID], l.vis[q.ID]
}

// Handlers builds, through internal/stack's table, the handler of each
// function deps says yes to, from deps' dependency set with the
// topology's queues (unless set) and the consumed queue's visibility.
func (l *Local) Handlers(deps func(Function) (stack.Deps, bool)) (map[string]stack.Handler, error) {
	out := map[string]stack.Handler{}
	for _, f := range l.Topology.Functions {
		d, ok := deps(f)
		if !ok {
			continue
		}
		fn, ok := stack.Lookup(f.Name)
		if !ok {
			return nil, fmt.Errorf("topology: function %s is not in the table (internal/stack)", f.Name)
		}
		if d.Config.Queues == nil {
			d.Config.Queues = l.Targets()
		}
		if _, _, vis := l.Consumed(f.Name); vis > 0 {
			d.Config.Visibility = vis
		}
		out[f.Name] = fn.Build(d)
	}
	return out, nil
}

// Feed is the function's own queue to receive from while it runs, as
// deployed, for a function that holds records (config.NeedHold:
// observe's feed; stack.Deps.Receiver), and nil for any other. Its
// records count in Stats. The fault simulation uses none: it replays
// what the mappings alone deliver.
func (l *Local) Feed(function string) observe.Receiver {
	fn, _ := stack.Lookup(function)
	_, url, _ := l.Consumed(function)
	if url == "" || !slices.Contains(fn.Needs.Needs, config.NeedHold) {
		return nil
	}
	if l.feeds[function] == nil {
		l.feeds[function] = &eventsource.Feed{Broker: l.Broker, Queue: url, Clock: l.clk}
	}
	return l.feeds[function]
}

// Batches are the SQS handlers of hs, for ConsumeConfig.Handlers.
func Batches(hs map[string]stack.Handler) map[string]eventsource.Handler {
	out := map[string]eventsource.Handler{}
	for name, h := range hs {
		if h.Batch != nil {
			out[name] = h.Batch
		}
	}
	return out
}

// Targets are the dispatcher's queues: each action's queue.
func (l *Local) Targets() map[message.Action]schedule.Target {
	out := map[message.Action]schedule.Target{}
	for _, q := range l.Topology.Queues {
		if q.Action != "" {
			out[q.Action] = schedule.Target{URL: l.urls[q.ID]}
		}
	}
	return out
}

// DeadLetterDepth is how many messages the dead-letter queues hold.
func (l *Local) DeadLetterDepth() int {
	n := 0
	for _, q := range l.Topology.Queues {
		if q.Action == "" {
			d := l.Broker.Depth(l.urls[q.ID])
			n += d.Visible + d.InFlight + d.Delayed
		}
	}
	return n
}

// Empty reports whether every queue is empty.
func (l *Local) Empty() bool {
	for _, u := range l.urls {
		if d := l.Broker.Depth(u); d.Visible+d.InFlight+d.Delayed > 0 {
			return false
		}
	}
	return true
}

// ConsumeConfig says how the mappings invoke the handlers.
type ConsumeConfig struct {
	// Handlers are the handlers by function name. A function without one
	// is not wired (the benchmarks run no triage).
	Handlers map[string]eventsource.Handler
	// Workers, if set, is a mapping's parallel pollers in Run instead of
	// its MaxConcurrency.
	Workers func(Function, Mapping) int
	// NoBatchingWindows invokes with what one receive returns: the fault
	// simulation injects the gap between receive and invoke itself, and
	// the benchmarks report batch counts without windows.
	NoBatchingWindows bool
	// Wrap, if set, wraps each mapping's handler once the mapping is
	// built (the fault simulation's fault wrappers).
	Wrap func(function string, m *eventsource.Mapping, h eventsource.Handler) eventsource.Handler
	// Log receives Run's reports of failed invocations (nil: none).
	Log *slog.Logger
	// Sandbox, if set, is every mapping's eventsource.Mapping.Sandbox:
	// cancelling it ends the invocations in flight.
	Sandbox context.Context
}

// Consume builds an event source mapping for each mapping of a function
// that has a handler, with the topology's batch size, batching window and
// concurrency and the function's timeout.
func (l *Local) Consume(cfg ConsumeConfig) {
	for _, f := range l.Topology.Functions {
		h, ok := cfg.Handlers[f.Name]
		if !ok {
			continue
		}
		for _, mp := range f.Mappings {
			q, _ := l.Topology.Queue(mp.Queue)
			workers := mp.MaxConcurrency
			if cfg.Workers != nil {
				workers = cfg.Workers(f, mp)
			}
			m := &eventsource.Mapping{Broker: l.Broker, Queue: l.urls[q.ID], Handler: h, BatchSize: mp.BatchSize,
				Timeout: f.Timeout, Clock: l.clk, Workers: workers, Log: cfg.Log, Sandbox: cfg.Sandbox}
			if !cfg.NoBatchingWindows {
				m.BatchingWindow = mp.BatchingWindow
			}
			if cfg.Wrap != nil {
				m.Handler = cfg.Wrap(f.Name, m, h)
			}
			l.Mappings = append(l.Mappings, &LocalMapping{Function: f, Queue: q, Mapping: m})
		}
	}
}

// Run runs every mapping (eventsource.Mapping.Run) until ctx is done, and
// returns the errors that stopped any.
func (l *Local) Run(ctx context.Context, idle time.Duration) error {
	var wg sync.WaitGroup
	errs := make([]error, len(l.Mappings))
	for i, m := range l.Mappings {
		wg.Go(func() { errs[i] = m.Run(ctx, idle) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Lambda's bounds of an SQS event source mapping's
// ScalingConfig.MaximumConcurrency; LocalCapacity refuses others, as
// UpdateEventSourceMapping does.
const (
	MinMaximumConcurrency = 2
	MaxMaximumConcurrency = 1000
)

// ErrNoMapping is LocalCapacity's error for a function with no event
// source mapping on its queue (yet): Consume has not run, or gave it no
// handler.
var ErrNoMapping = errors.New("no event source mapping")

// Fitting returns d with what the sweep needs to fit observe's
// concurrency to its queue's load, as deployed: observe's Capacity, the
// hold it runs with (observe.DefaultHold, which the template deploys) and
// its mapping's MaximumConcurrency as the ceiling. A local tool that runs
// the sweep and observe's feed gives it to the sweep; one that replays
// the mappings alone (no feed) must not, since without a feed two
// invocations cannot hold the load.
func (l *Local) Fitting(d stack.Deps) stack.Deps {
	d.Capacity = l.Capacity(Observe)
	d.Config.Hold, d.Config.ObserveMaxConcurrency = observe.DefaultHold, l.Topology.MaxConcurrency(Observe)
	return d
}

// Capacity is what the sweep adjusts for function: its event source
// mapping's concurrency cap and its queue's depth, on the first queue it
// consumes (Consumed), the local stand-in for UpdateEventSourceMapping
// and GetQueueAttributes. It may be taken before Consume; its methods
// find the mapping when called, and fail with ErrNoMapping until there
// is one. They must not run concurrently with Consume.
func (l *Local) Capacity(function string) *LocalCapacity {
	return &LocalCapacity{l: l, function: function}
}

// LocalCapacity is a function's mapping cap and queue depth on a Local;
// see Local.Capacity. The context of its methods is checked, as an AWS
// call's would be; nothing it does blocks.
type LocalCapacity struct {
	l        *Local
	function string
}

// Depth counts the consumed queue's messages by state.
func (c *LocalCapacity) Depth(ctx context.Context) (queue.Depth, error) {
	if err := ctx.Err(); err != nil {
		return queue.Depth{}, err
	}
	_, url, err := c.queue()
	if err != nil {
		return queue.Depth{}, err
	}
	d := c.l.Broker.Depth(url)
	return queue.Depth{Visible: d.Visible, InFlight: d.InFlight, Delayed: d.Delayed}, nil
}

// MaxConcurrency is the mapping's cap as last set, or its pollers
// (Workers: the topology's MaxConcurrency or ConsumeConfig.Workers) when
// none was.
func (c *LocalCapacity) MaxConcurrency(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m, err := c.mapping()
	if err != nil {
		return 0, err
	}
	return m.MaxConcurrency(), nil
}

// SetMaxConcurrency caps the mapping's concurrent invocations at n
// (eventsource.Mapping.SetMaxConcurrency: above Workers it is stored, and
// Workers run), refusing an n outside Lambda's
// MinMaximumConcurrency..MaxMaximumConcurrency.
func (c *LocalCapacity) SetMaxConcurrency(ctx context.Context, n int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if n < MinMaximumConcurrency || n > MaxMaximumConcurrency {
		return fmt.Errorf("topology: %s: MaximumConcurrency %d outside %d..%d", c.function, n, MinMaximumConcurrency, MaxMaximumConcurrency)
	}
	m, err := c.mapping()
	if err != nil {
		return err
	}
	m.SetMaxConcurrency(n)
	return nil
}

// queue is the function's first consumed queue and its URL.
func (c *LocalCapacity) queue() (Queue, string, error) {
	if _, ok := c.l.Topology.Function(c.function); !ok {
		return Queue{}, "", fmt.Errorf("topology: no function %q", c.function)
	}
	q, url, _ := c.l.Consumed(c.function)
	if url == "" {
		return Queue{}, "", fmt.Errorf("topology: function %s consumes no queue", c.function)
	}
	return q, url, nil
}

func (c *LocalCapacity) mapping() (*eventsource.Mapping, error) {
	q, _, err := c.queue()
	if err != nil {
		return nil, err
	}
	for _, m := range c.l.Mappings {
		if m.Function.Name == c.function && m.Queue.ID == q.ID {
			return m.Mapping, nil
		}
	}
	return nil, fmt.Errorf("topology: function %s on %s: %w (Consume builds one for a function with a handler)", c.function, q.ID, ErrNoMapping)
}

// Stats are the mappings' totals per function, with the records the
// functions' feeds received counted as records.
func (l *Local) Stats() map[string]eventsource.Stats {
	out := map[string]eventsource.Stats{}
	for _, m := range l.Mappings {
		s, t := out[m.Function.Name], m.Stats()
		s.Invocations += t.Invocations
		s.Records += t.Records
		s.Deleted += t.Deleted
		s.Failed += t.Failed
		s.StaleDeletes += t.StaleDeletes
		s.InvocationErrors += t.InvocationErrors
		out[m.Function.Name] = s
	}
	for name, f := range l.feeds {
		s := out[name]
		s.Records += f.Received()
		out[name] = s
	}
	return out
}
