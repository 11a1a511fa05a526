package benchmark

import (
	"context"

	"errors"
	"fmt"
	"github.com/aws/aws-lambda-go/events"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/dev/eventsource"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/localpack"
	"github.com/genjobs/genjobs/internal/dev/pipeline"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/queue"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/stack"
	"github.com/genjobs/genjobs/internal/store/bolt"
	"github.com/genjobs/genjobs/internal/sweep"
)

// PipelineConfig describes one run of the pipeline harness: the real
// submit, observe and deliver handlers wired as template.yaml wires them
// (topology.Local; BATCH_CONCURRENCY 10), fed by the embedded queue, on
// bbolt, against the simulator, with every store, queue and artifact
// call counted.
type PipelineConfig struct {
	// Operations is how many renders to run.
	Operations int
	// QueueFor and RunFor are every render's simulated times.
	QueueFor, RunFor time.Duration
	// Policies pace the observations (DefaultPolicies when zero).
	Policies schedule.Policies
	// Dir is where the run makes its own folder for the store file and
	// the artifacts, removed at the end ("" for the system's temporary
	// folder).
	Dir string
	// Spacing is the pause between two dispatches (0: all at once).
	Spacing time.Duration
	// Timeout bounds the run (default 2 minutes).
	Timeout time.Duration
	// KeepProcs leaves GOMAXPROCS as it is instead of raising it as
	// genjobs local does (pipeline.RaiseProcs).
	KeepProcs bool
	// Renders, when set, gives each render its own length (queued
	// min(2 s, length), then running), instead of QueueFor and RunFor; its
	// length is also Operations.
	Renders []time.Duration
	// Virtual runs Genace in this process with these latencies added, and
	// every invocation Pickup and Start after its receive. The caller must
	// run RunPipeline inside a testing/synctest bubble: its clock is
	// virtual, so a two-hour render takes seconds, and nothing waits on a
	// socket (which would hold the bubble's time still).
	Virtual *Latency
	// Seed seeds Virtual's draws.
	Seed uint64
	// GenaceRateLimit is Genace's limit on requests per second (0: none),
	// beyond which it answers 429.
	GenaceRateLimit int
	// FittedTo is the renders in flight observe's concurrency was fitted
	// to before a virtual run (sweep.Fit; 0: an idle stack's empty queue).
	FittedTo int
}

// FunctionStats are one function's totals in a pipeline run.
type FunctionStats struct {
	// Actions counts the records handled; Batches the invocations.
	Actions, Batches int64
	// Requests are the AWS requests its handler made, the event source
	// mapping's receives and deletes included (one each per batch).
	Requests Requests
}

// PipelineResult is what a pipeline run measured.
type PipelineResult struct {
	// Operations were dispatched, Delivered finished, Stalled parked for
	// review when their polling budget ran out.
	Operations, Delivered, Stalled int
	// Elapsed runs from the first dispatch to the last delivery.
	Elapsed time.Duration
	// CPU is the process's user+system time over Elapsed, the simulator,
	// queue and pollers included.
	CPU time.Duration
	// Syncs counts the fsyncs the store and the artifact pack issued over
	// Elapsed (bolt.Store.Syncs, localpack.Dir.Syncs).
	Syncs int64
	// Functions holds each function's counts.
	Functions map[string]FunctionStats
	// App is the application's part: the records and the dispatches.
	App Requests
	// GenaceGETs and GenacePOSTs are the simulator's own counts.
	GenaceGETs, GenacePOSTs int
	// DeadLettered counts messages in the dead-letter queues at the end.
	DeadLettered int
	// Invocations are each function's invocations as Lambda bills them.
	Invocations map[string]*Invocations
	// Renders are each render's length, GETs and detection, in creation
	// order.
	Renders []RenderResult
	// GenacePeakPerSecond is the most requests Genace got in one second
	// of the clock, Genace429 those it refused for its rate limit (a
	// virtual run's).
	GenacePeakPerSecond, Genace429 int
	// Memory is the process's heap and stacks at the most renders under
	// observation at once (a virtual run's).
	Memory MemorySample
	// Telemetry is what the handlers logged (a virtual run's only: a
	// real-time run's throughput is measured without).
	Telemetry *Telemetry
	// ObserveConcurrency is observe's mapping's MaximumConcurrency after
	// each of the sweep's runs (a virtual run's: it sweeps on the
	// template's cadence).
	ObserveConcurrency []int
	// SweepFailures are the errors of the sweep's failed runs (a virtual
	// run's).
	SweepFailures []string
}

// Invocations are one function's invocations, timed on the run's clock
// from the handler's start to its return.
type Invocations struct {
	// Count and Records: invocations and the records they handled, their
	// batches' and what each received itself (observe's feed).
	Count, Records int64
	// Busy is their summed duration.
	Busy time.Duration
	// PeakConcurrent is the most running at once, PeakRecords the most
	// records one invocation handled, PeakPayload the largest event in
	// bytes.
	PeakConcurrent, PeakRecords, PeakPayload int64
	// MemoryMB is the function's MemorySize in template.yaml.
	MemoryMB int

	// Spans are each invocation's start and end on the run's clock.
	Spans [][2]time.Time

	mu      sync.Mutex
	running int64
}

// GBSecondsWithin is the invocations' billed compute within [from, to).
func (i *Invocations) GBSecondsWithin(from, to time.Time) float64 {
	var busy time.Duration
	for _, s := range i.Spans {
		if a, b := maxTime(s[0], from), minTime(s[1], to); b.After(a) {
			busy += b.Sub(a)
		}
	}
	return busy.Seconds() * float64(i.MemoryMB) / 1024
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// GBSeconds is the invocations' billed compute: duration × memory.
func (i *Invocations) GBSeconds() float64 {
	return i.Busy.Seconds() * float64(i.MemoryMB) / 1024
}

// invocation is one invocation's records: its batch and what its feed
// received.
type invocation struct{ records atomic.Int64 }

type invocationKey struct{}

func (i *Invocations) begin(ctx context.Context, records, payload int) context.Context {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.Count++
	i.running++
	i.PeakConcurrent = max(i.PeakConcurrent, i.running)
	i.PeakPayload = max(i.PeakPayload, int64(payload))
	inv := &invocation{}
	inv.records.Store(int64(records))
	return context.WithValue(ctx, invocationKey{}, inv)
}

func (i *Invocations) end(ctx context.Context, start time.Time) {
	n := ctx.Value(invocationKey{}).(*invocation).records.Load()
	now := time.Now()
	i.mu.Lock()
	defer i.mu.Unlock()
	i.running--
	i.Busy += now.Sub(start)
	i.Spans = append(i.Spans, [2]time.Time{start, now})
	i.Records += n
	i.PeakRecords = max(i.PeakRecords, n)
}

// RenderResult is one render of a run.
type RenderResult struct {
	// Length is the render's time at Genace, queued and running; Queued
	// its queued part.
	Length, Queued time.Duration
	// GETs are the job reads Genace answered for it (delivery's read
	// included).
	GETs int
	// Detection is from the job's success at Genace to the observe write
	// that recorded it landing.
	Detection time.Duration
	// Created is when Genace accepted the job.
	Created time.Time
	// Parked is a render still running when its polling budget ran out:
	// parked for review, never detected (Detection 0).
	Parked bool
	// Blind says what Genace held of the job's reads when it finished
	// (virtual runs only).
	Blind Blind
}

// Actions is the number of handler actions of every function.
func (r *PipelineResult) Actions() int64 {
	var n int64
	for _, f := range r.Functions {
		n += f.Actions
	}
	return n
}

// PerAction is a function's requests per action.
func (r *PipelineResult) PerAction(fn string) Requests {
	f := r.Functions[fn]
	if f.Actions == 0 {
		return Requests{}
	}
	return f.Requests.Times(1 / float64(f.Actions))
}

// PerRender is every request of the run (the application's record and
// dispatch, and each function's) per dispatched render.
func (r *PipelineResult) PerRender() Requests {
	total := r.App
	for _, f := range r.Functions {
		total = total.Plus(f.Requests)
	}
	return total.Times(1 / float64(max(r.Operations, 1)))
}

// RecordsPerInvocation is a function's mean batch: records handled per
// invocation (0 when it was not invoked).
func (r *PipelineResult) RecordsPerInvocation(fn string) float64 {
	f := r.Functions[fn]
	if f.Batches == 0 {
		return 0
	}
	return float64(f.Actions) / float64(f.Batches)
}

const (
	// pipelineConcurrency is the template's BATCH_CONCURRENCY default.
	pipelineConcurrency = 10
	pipelineIdle        = 10 * time.Millisecond
)

// RunPipeline runs cfg's renders through the pipeline and counts.
func RunPipeline(ctx context.Context, cfg PipelineConfig) (*PipelineResult, error) {
	if len(cfg.Renders) > 0 {
		cfg.Operations = len(cfg.Renders)
	}
	if cfg.Operations <= 0 {
		return nil, errors.New("pipeline: no operations")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	if cfg.Policies.Default == (schedule.Policy{}) {
		cfg.Policies = schedule.DefaultPolicies()
	}
	// As genjobs local runs: with Ps to spare for the threads in fsync.
	if !cfg.KeepProcs {
		defer pipeline.RaiseProcs()()
	}
	dir, err := os.MkdirTemp(cfg.Dir, "genjobs-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	clk := clock.Real{}
	st, err := bolt.Open(filepath.Join(dir, "genjobs.db"))
	if err != nil {
		return nil, err
	}
	defer st.Close()
	models := map[string]genacesim.ModelConfig{}
	for i, t := range cfg.Renders {
		q := min(renderQueued, t)
		models[renderModel(i)] = genacesim.ModelConfig{Price: 1, QueueFor: q, RunFor: t - q, OutputCount: 1}
	}
	sim := genacesim.New(genacesim.Config{
		APIKey: "bench", Seed: 1, Models: models, RateLimitPerSecond: cfg.GenaceRateLimit,
		// A price: the zero model means the simulator's defaults.
		DefaultModel: genacesim.ModelConfig{Price: 1, QueueFor: cfg.QueueFor, RunFor: cfg.RunFor, OutputCount: 1},
	}, clk)
	load := &genaceLoad{}
	g, stopGenace, err := benchGenace(sim, cfg, load)
	if err != nil {
		return nil, err
	}
	defer stopGenace()

	local, err := topology.Stack.Local(topology.LocalConfig{Clock: clk})
	if err != nil {
		return nil, err
	}
	_, submitURL, _ := local.Consumed(topology.Submit)
	counters := map[string]*counter{topology.Submit: {}, topology.Observe: {}, topology.Deliver: {}, topology.Sweep: {}}
	app := &counter{}
	cache := &sync.Map{}
	var delivered, settled, lastDelivery atomic.Int64
	var stalled sync.Map
	done := make(chan struct{})
	var succeeded sync.Map // operation id → when its success was written
	var accepted sync.Map
	var observing atomic.Int64 // renders accepted, not yet succeeded
	onWritten := func(rec operation.Record) {
		if rec.Phase == operation.PhaseAccepted {
			if _, again := accepted.LoadOrStore(rec.OperationID, true); !again {
				observing.Add(1)
			}
		}
		if rec.Phase == operation.PhaseSucceeded {
			if _, again := succeeded.LoadOrStore(rec.OperationID, clk.Now()); !again {
				observing.Add(-1)
			}
		}
		settledNow := false
		if rec.Phase == operation.PhaseDelivered {
			lastDelivery.Store(time.Now().UnixNano())
			delivered.Add(1)
			settledNow = true
		}
		if rec.Phase == operation.PhaseStalled {
			// Past its polling budget: parked for review, which is where
			// automation ends for it.
			if _, again := stalled.LoadOrStore(rec.OperationID, true); !again {
				settledNow = true
			}
		}
		if settledNow && settled.Add(1) == int64(cfg.Operations) { // true once
			close(done)
		}
	}
	disps := map[string]*schedule.Dispatcher{}
	for fn, c := range counters {
		disps[fn], err = schedule.NewDispatcher(schedule.Config{
			Queues: local.Targets(),
			// The embedded queue carries any delay.
			MaxQueueDelay: 365 * 24 * time.Hour,
		}, countingSender{next: local.Broker, c: c}, nil, clk)
		if err != nil {
			return nil, err
		}
	}
	pack, err := localpack.New(filepath.Join(dir, "artifacts"))
	if err != nil {
		return nil, err
	}
	defer pack.Close()
	invs := map[string]*Invocations{}
	for _, f := range local.Topology.Functions {
		invs[f.Name] = &Invocations{MemoryMB: f.MemoryMB}
	}
	var d *draws
	if cfg.Virtual != nil {
		d = newDraws(cfg.Seed)
	}
	delays := schedule.NewObservation(cfg.Policies)
	var tel *Telemetry
	if cfg.Virtual != nil {
		tel = newTelemetry()
	}
	hs, err := local.Handlers(func(f topology.Function) (stack.Deps, bool) {
		c, ok := counters[f.Name]
		log, emf := slog.New(slog.DiscardHandler), io.Discard
		if tel != nil {
			log, emf = tel.Log(f.Name), tel.EMF(f.Name)
		}
		d := stack.Deps{
			Config: config.Config{Concurrency: pipelineConcurrency},
			Store:  &countingStore{Store: st, c: c, cache: cache, onWritten: onWritten}, Genace: g, Artifacts: countingArtifacts{next: pack, c: c}, Extender: countingExtender{next: local.Broker, c: c},
			Sender: disps[f.Name], Delays: delays, Clock: clk, Log: log, Metrics: metrics.New(emf, f.Name, clk), Events: countingSink{c},
			Receiver: fed(local.Feed(f.Name), c, cfg.Virtual, d, local.Broker.ShownAt),
		}
		if f.Name == topology.Sweep {
			// A virtual run sweeps on the template's cadence, which fits
			// observe's concurrency to the load as deployed.
			d = local.Fitting(d)
		}
		return d, ok
	})
	if err != nil {
		return nil, err
	}
	local.Consume(topology.ConsumeConfig{
		Handlers:          topology.Batches(hs),
		Workers:           func(_ topology.Function, m topology.Mapping) int { return m.MaxConcurrency },
		NoBatchingWindows: true,
		Wrap: func(fn string, _ *eventsource.Mapping, h eventsource.Handler) eventsource.Handler {
			return timed(invs[fn], cfg.Virtual, d, local.Broker.ShownAt, h)
		},
	})

	// The application's records (not timed), then its dispatches.
	appStore := &countingStore{Store: st, c: app, cache: cache}
	envs := make([][]byte, cfg.Operations)
	for i := range cfg.Operations {
		now := clk.Now()
		model := "bench-model"
		if len(cfg.Renders) > 0 {
			model = renderModel(i)
		}
		rec, err := appStore.Create(ctx, operation.Record{
			OperationID: fmt.Sprintf("bench-%06d", i), SpecRevision: 1, Phase: operation.PhasePrepared, UserID: "bench-user",
			Model: model, Input: []byte(`{"prompt_ref":"bench"}`), Authorized: true, AuthorizedSpecRevision: 1,
			BudgetCredits: 100, Timestamps: operation.Timestamps{Created: now, Updated: now},
		})
		if err != nil {
			return nil, err
		}
		envs[i], err = message.Envelope{Action: message.ActionSubmitGeneration, OperationID: rec.OperationID, ExpectedRevision: rec.Revision}.Encode()
		if err != nil {
			return nil, err
		}
	}

	if cfg.Virtual != nil {
		// The stack ran FittedTo renders before, and its sweep fitted
		// observe's concurrency to them.
		if err := local.Capacity(topology.Observe).SetMaxConcurrency(ctx,
			sweep.Fit(queue.Depth{InFlight: cfg.FittedTo}, observe.DefaultHold, local.Topology.MaxConcurrency(topology.Observe))); err != nil {
			return nil, err
		}
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	pollCtx, stopPolling := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	idle := pipelineIdle
	if cfg.Virtual != nil {
		idle = virtualIdle
	}
	wg.Go(func() { _ = local.Run(pollCtx, idle) })
	var mem MemorySample
	var fitted concurrencyTrace
	if cfg.Virtual != nil {
		wg.Go(func() { mem.sample(pollCtx, &observing) })
		sweepFn, _ := local.Topology.Function(topology.Sweep)
		every, _ := sweepFn.Cadence()
		wg.Go(func() { fitted.run(pollCtx, every, hs[topology.Sweep].Scheduled, local.Capacity(topology.Observe)) })
	}
	cpu0, syncs0 := cpuTime(), st.Syncs()+pack.Syncs()
	start := time.Now()
	sender := countingSender{next: local.Broker, c: app}
	var runErr error
	for _, body := range envs {
		if _, runErr = sender.Send(runCtx, submitURL, body, 0); runErr != nil {
			break
		}
		time.Sleep(cfg.Spacing)
	}
	if runErr == nil {
		select {
		case <-done:
		case <-runCtx.Done():
			runErr = fmt.Errorf("pipeline: %d of %d operations delivered (%d settled) before %w", delivered.Load(), cfg.Operations, settled.Load(), runCtx.Err())
		}
	}
	end := time.Unix(0, lastDelivery.Load())
	cpu, syncs := cpuTime()-cpu0, st.Syncs()+pack.Syncs()-syncs0
	stopPolling()
	wg.Wait()
	if runErr != nil {
		return nil, runErr
	}

	res := &PipelineResult{
		Operations: cfg.Operations, Delivered: int(delivered.Load()), Elapsed: end.Sub(start), CPU: cpu, Syncs: syncs,
		Functions: map[string]FunctionStats{}, App: app.snapshot(),
		GenaceGETs: sim.TotalGets(), GenacePOSTs: sim.TotalPosts(), Telemetry: tel,
	}
	for fn, s := range local.Stats() {
		req := counters[fn].snapshot()
		req.SQSReceive += float64(s.Invocations)
		req.SQSDelete += float64(s.Invocations)
		req.LambdaInvocations += float64(s.Invocations)
		res.Functions[fn] = FunctionStats{Actions: s.Records, Batches: s.Invocations, Requests: req}
	}
	res.DeadLettered = local.DeadLetterDepth()
	res.Invocations = invs
	stalled.Range(func(any, any) bool { res.Stalled++; return true })
	if cfg.Virtual != nil {
		mem.End = readMemory()
	}
	res.Memory = mem
	res.ObserveConcurrency, res.SweepFailures = fitted.levels, fitted.failures
	res.GenacePeakPerSecond, res.Genace429 = load.peak, load.r429
	for _, j := range sim.Jobs() {
		m, ok := models[j.Model]
		if !ok {
			continue
		}
		r := RenderResult{Length: m.QueueFor + m.RunFor, Queued: m.QueueFor, GETs: sim.GetCount(j.ID), Created: j.CreatedAt}
		if at, ok := succeeded.Load(j.OperationID); ok {
			r.Detection = at.(time.Time).Sub(j.CreatedAt.Add(r.Length))
		}
		_, r.Parked = stalled.Load(j.OperationID)
		if cfg.Virtual != nil {
			r.Blind = blind(load.reads[j.ID], j.CreatedAt.Add(r.Length))
		}
		res.Renders = append(res.Renders, r)
	}
	return res, nil
}

// concurrencyTrace runs the sweep on its cadence and notes observe's
// concurrency after each run.
type concurrencyTrace struct {
	levels   []int
	failures []string
}

func (c *concurrencyTrace) run(ctx context.Context, every time.Duration, sweep func(context.Context) error, capacity *topology.LocalCapacity) {
	if every <= 0 || sweep == nil {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// A failed run is the next one's to retry, as deployed; the
			// result keeps its error, which a benchmark must not hide.
			if err := sweep(ctx); err != nil && ctx.Err() == nil {
				c.failures = append(c.failures, err.Error())
			}
			if n, err := capacity.MaxConcurrency(ctx); err == nil {
				c.levels = append(c.levels, n)
			}
		}
	}
}

// MemorySample is the Go heap and goroutine stacks in use (after a
// collection), sampled on the run's clock: at the sample with the most
// renders under observation, and once every render is delivered, when
// the simulator and the store still hold every job and record but
// nothing is observed.
type MemorySample struct {
	// Peak is the bytes at the sample with the most renders Observing, End
	// the bytes after the run.
	Peak, End uint64
	Observing int64
}

// PerRender is the bytes holding one render under observation costs:
// its chain, polls, lease and message, not its job's or record's state.
func (m MemorySample) PerRender() float64 {
	if m.Observing <= 0 || m.Peak < m.End {
		return 0
	}
	return float64(m.Peak-m.End) / float64(m.Observing)
}

func readMemory() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

func (m *MemorySample) sample(ctx context.Context, observing *atomic.Int64) {
	t := time.NewTicker(15 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n := observing.Load(); n > m.Observing {
				m.Observing, m.Peak = n, readMemory()
			}
		}
	}
}

// renderQueued is how long a render of PipelineConfig.Renders stays
// queued at most (the simulator's default).
const renderQueued = 2 * time.Second

func renderModel(i int) string { return fmt.Sprintf("render-%06d", i) }

// virtualIdle is a virtual run's wait after an empty receive: on the
// bubble's clock every poller's wake costs CPU, and Latency.Pickup adds
// the receive's own delay.
const virtualIdle = 100 * time.Millisecond

// benchGenace is the Genace the run's handlers call: the simulator on
// loopback, or in this process for a virtual run.
func benchGenace(sim *genacesim.Simulator, cfg PipelineConfig, load *genaceLoad) (*genace.Client, func(), error) {
	if cfg.Virtual != nil {
		g, err := genace.New("http://genace.invalid", "bench", &http.Client{Transport: inProcess{h: sim, lat: *cfg.Virtual, d: newDraws(cfg.Seed + 1), c: load}})
		return g, func() {}, err
	}
	base, stopSim, err := sim.Start("127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 64
	g, err := genace.New(base, "bench", &http.Client{Transport: transport})
	if err != nil {
		stopSim()
		return nil, nil, err
	}
	return g, func() { transport.CloseIdleConnections(); stopSim() }, nil
}

// timed counts and times h's invocations into inv and, for a virtual
// run, waits lat's pickup and start before each.
func timed(inv *Invocations, lat *Latency, d *draws, shown shownAt, h eventsource.Handler) eventsource.Handler {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		if lat != nil {
			time.Sleep(pickupLeft(ev.Records, d.draw(lat.Pickup), shown) + d.draw(lat.Start))
		}
		payload := 0
		for _, r := range ev.Records {
			payload += len(r.Body) + len(r.MessageId) + len(r.ReceiptHandle) + 200 // attributes
		}
		ctx = inv.begin(ctx, len(ev.Records), payload)
		start := time.Now()
		defer func() { inv.end(ctx, start) }()
		return h(ctx, ev)
	}
}

// shownAt is when a received message became visible (the broker's
// ShownAt, by its receipt handle).
type shownAt func(receiptHandle string) (time.Time, bool)

// pickupLeft is what is left of a pickup delay for a batch whose oldest
// message became visible a while ago: a message is received no sooner
// than pickup after it became visible (its send, its delay's end, or its
// visibility timeout's), and a backlog's receives are not slowed further
// (SQS answers a receive on a non-empty queue at once). A message whose
// visible time is unknown counts from its send.
func pickupLeft(msgs []events.SQSMessage, pickup time.Duration, shown shownAt) time.Duration {
	oldest := time.Now()
	for _, m := range msgs {
		if at, ok := shown(m.ReceiptHandle); ok {
			oldest = minTime(oldest, at)
		} else if ms, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64); err == nil {
			oldest = minTime(oldest, time.UnixMilli(ms))
		}
	}
	return max(0, pickup-time.Since(oldest))
}

// fed is a function's own receiver (observe's feed; nil for the others)
// counting its SQS requests into c (a receive per call, empty ones
// included, a delete per acknowledged record) and what each invocation
// receives into its records and, for a virtual run, taking lat's pickup
// for each receive that returns any.
func fed(r observe.Receiver, c *counter, lat *Latency, d *draws, shown shownAt) observe.Receiver {
	if r == nil {
		return nil
	}
	return &countedFeed{Receiver: r, c: c, lat: lat, d: d, shown: shown}
}

type countedFeed struct {
	observe.Receiver
	c     *counter
	lat   *Latency
	d     *draws
	shown shownAt
}

func (f *countedFeed) Receive(ctx context.Context, max int, wait time.Duration) ([]events.SQSMessage, error) {
	msgs, err := f.Receiver.Receive(ctx, max, wait)
	if f.c != nil {
		f.c.add(func(r *Requests) { r.SQSReceive++ })
	}
	if len(msgs) > 0 {
		if f.lat != nil {
			time.Sleep(pickupLeft(msgs, f.d.draw(f.lat.Pickup), f.shown))
		}
		if inv, ok := ctx.Value(invocationKey{}).(*invocation); ok {
			inv.records.Add(int64(len(msgs)))
		}
	}
	return msgs, err
}

func (f *countedFeed) Delete(ctx context.Context, receiptHandle string) error {
	if f.c != nil {
		f.c.add(func(r *Requests) { r.SQSDelete++ })
	}
	return f.Receiver.Delete(ctx, receiptHandle)
}

// cpuTime is the process's user+system CPU time so far. (The package is
// unix-only already: localpack locks with flock.)
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
