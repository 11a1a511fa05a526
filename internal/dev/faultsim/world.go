package faultsim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/deliver"
	"github.com/genjobs/genjobs/internal/dev/eventsource"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/localpack"
	"github.com/genjobs/genjobs/internal/dev/localqueue"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/intake"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/replay"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/stack"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/bolt"
	"github.com/genjobs/genjobs/internal/submit"
	"github.com/genjobs/genjobs/internal/sweep"
	"github.com/genjobs/genjobs/internal/worker"
)

// simStart is the virtual clock's start, in the wall clock's future:
// net.Dialer refuses to dial under a deadline the wall clock has passed.
var simStart = time.Date(2030, 1, 7, 8, 0, 0, 0, time.UTC)

// The simulation's own settings, Genace's. Every timing of the stack
// itself is the deployed one, from topology.Stack (which a test holds
// against template.yaml), and the handlers run their own defaults.
const (
	apiKey       = "faultsim-key"
	urlTTL       = 30 * time.Second
	refundSettle = 20 * time.Second
)

// persistBudget is what submit keeps, after a POST, to persist its
// outcome: a POST needs its own timeout and this much more of its lease
// and of its function's deadline (invariant h).
var persistBudget = submit.Config{}.Defaults().PersistBudget

// sweepEvery is the sweep's cadence (its schedule in the template).
var sweepEvery = func() time.Duration {
	f, _ := topology.Stack.Function(topology.Sweep)
	d, ok := f.Cadence()
	if !ok {
		panic(fmt.Sprintf("faultsim: the sweep's schedule %q has no cadence", f.Schedule)) // topology's own tests hold it
	}
	return d
}()

// world is one simulation: the system under test, its fault wrappers and
// the driver's state.
type world struct {
	cfg     Config
	cleanup string
	clk     *clock.Manual
	// simClock is Genace's view of clk, which URLExpired skews for one
	// download at a time.
	simClock *skewClock
	order    *rand.Rand
	inj      *injector

	sim    *genacesim.Simulator
	wire   *wire
	relay  *relay
	client *genace.Client
	bolt   *bolt.Store // the store file, unless Config.Store is set
	db     store.Store // the store itself, without the wrappers
	rec    *recorder
	events *eventSink
	st     *faultStore
	arts   *artifacts
	local  *topology.Local
	broker *localqueue.Broker
	vis    map[string]time.Duration // each queue's visibility, by URL
	leases map[string]leaseTruth    // the queue's truth about each received message
	disp   *schedule.Dispatcher
	// svc is the intake the application calls (app.go).
	svc *intake.Service
	// replayer is the operator's replay (OperatorRace).
	replayer *replay.Replayer
	sweep    func(context.Context) error
	maps     []*topology.LocalMapping

	models   map[string]genacesim.ModelConfig
	delays   *schedule.Observation // the observation delays the handlers use
	ops      []opSpec
	timeline timeline
	seq      int
	planned  int // timeline events other than the sweep's

	// Driver state, touched by the driver goroutine only (handlers and
	// the wrappers run on goroutines it waits for).
	waitingFor   string
	sweeps       int
	sweepRearmed int
	sweepClaims  int
	sweepCrashes []time.Time // runs of the sweep that died before their end
	sweepArmed   bool
	opArmed      bool
	raceReplay   bool // the application writes inside the operator's next replay
	lastCreated  time.Time

	stormMu  sync.Mutex
	storms   map[int64]bool // storm minutes already counted
	checking atomic.Bool

	mu                 sync.Mutex
	tallies            map[string]*tally
	stops              map[string]int       // faults that end a chain by design, per operation
	failStops          map[string]int       // stops its handlers made themselves, by failing a message
	rearms             map[string]int       // messages the sweep sent, per operation
	inFlight           map[string]int       // POSTs in flight, per operation
	worked             map[string]bool      // operations the operator took up from the review queue
	unknownSubmissions int                  // Result.UnknownSubmissions
	unusable           int                  // ids UnusableJobID handed out
	madeUncertain      int                  // writes that made an operation uncertain
	resolvedUncertain  int                  // writes of automation that took one out of uncertain
	unknownOf          map[string]int       // unknown submissions per operation
	leftUncertain      map[string]int       // uncertain episodes no evidence resolved, per operation
	paths              map[string]int       // decisions the handlers logged (Result.Paths)
	persisting         map[string]bool      // operations a persistent fault acted on
	reconciledAt       map[string]time.Time // when Genace's operators failed each job (ReconcileFail)
	callers            map[string]*Caller   // the application's side of each operation (app.go)
	traceAll           bool
	traceOps           map[string]bool
	traces             map[string][]string
	violations         []Violation
	wallStart          time.Time
	scale              *scaleCounters // nil unless Config.Scale
	stepAt             atomic.Int64   // wall time of the driver's last step, for the watchdog
}

// tally is what the Genace wrapper saw of one operation's POSTs.
type tally struct {
	rateLimited int      // POSTs answered 429: nothing created
	returned    []string // job ids the client handed back to a live handler
	handedOut   []string // job ids Genace's answers carried to a live worker
	confirmed   int      // informed operator confirmations (Final.Confirmed)
}

func newWorld(cfg Config) (w *world, err error) {
	w = &world{
		cfg: cfg, vis: map[string]time.Duration{}, leases: map[string]leaseTruth{}, tallies: map[string]*tally{}, stops: map[string]int{}, failStops: map[string]int{}, rearms: map[string]int{}, inFlight: map[string]int{}, worked: map[string]bool{}, unknownOf: map[string]int{}, leftUncertain: map[string]int{}, paths: map[string]int{}, storms: map[int64]bool{}, persisting: map[string]bool{}, reconciledAt: map[string]time.Time{}, callers: map[string]*Caller{},
		traceAll: cfg.Operations <= TraceAllBelow, traceOps: map[string]bool{}, traces: map[string][]string{},
		wallStart: time.Now(),
	}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	for _, op := range cfg.Trace {
		w.traceOps[op] = true
	}
	base := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		base = "/dev/shm" // tmpfs: the artifact store's fsyncs cost nothing
	}
	dir, err := os.MkdirTemp(base, "faultsim-")
	if err != nil {
		if dir, err = os.MkdirTemp("", "faultsim-"); err != nil {
			return nil, fmt.Errorf("faultsim: temp dir: %w", err)
		}
	}
	w.cleanup = dir
	w.clk = clock.NewManual(simStart)
	w.order = rand.New(rand.NewPCG(cfg.Seed, 1))
	w.inj = newInjector(cfg.Seed, cfg.Faults)
	ms := models(rand.New(rand.NewPCG(cfg.Seed, 2)))
	if len(cfg.Renders) > 0 {
		ms = renderModels(cfg.Renders[:cfg.Operations])
	}
	w.models = ms
	w.ops = workload(cfg.Operations, cfg.Interval, rand.New(rand.NewPCG(cfg.Seed, 3)), ms, w.inj, len(cfg.Renders) > 0)
	if cfg.Scale {
		w.scale = newScaleCounters()
	}

	w.simClock = &skewClock{Clock: w.clk}
	w.sim = genacesim.New(genacesim.Config{APIKey: apiKey, Models: ms, RefundSettleAfter: refundSettle, SignedURLTTL: urlTTL, Seed: int64(cfg.Seed)}, w.simClock)
	w.sim.SetFaultFunc(w.simFault)
	w.wire = newWire(w, w.sim)
	base, hc, rl, err := startTLS(w.wire, w.wire)
	if err != nil {
		return nil, fmt.Errorf("faultsim: start the simulator: %w", err)
	}
	w.relay = rl
	if cfg.WrapTransport != nil {
		hc.Transport = cfg.WrapTransport(hc.Transport)
	}
	if w.client, err = genace.New(base, apiKey, hc); err != nil {
		return nil, err
	}

	w.db = cfg.Store
	if w.db == nil {
		if w.bolt, err = bolt.OpenWith(filepath.Join(dir, "genjobs.db"), bolt.Options{NoSync: true}); err != nil {
			return nil, err
		}
		w.db = w.bolt
	}
	under := w.db
	if cfg.WrapStore != nil {
		under = cfg.WrapStore(w.db)
	}
	w.rec = &recorder{Store: under, w: w, last: map[string]State{}, prev: map[string]State{}, hist: map[string]*revisions{}, claimOf: map[string]string{}, settles: map[string][]time.Time{}, resumed: map[string]time.Time{}, audited: map[string][]int64{}, closedFirst: map[string]string{}, answered: map[string]string{}, claimed: map[string]bool{}, creates: map[string]int{}}
	w.st = &faultStore{recorder: w.rec, w: w}
	w.events = newEventSink(w)
	d, err := localpack.New(filepath.Join(dir, "artifacts"))
	if err != nil {
		return nil, err
	}
	w.arts = &artifacts{w: w, d: d, puts: map[string]int{}, created: map[string]int{}, armed: map[string]bool{}}

	if err := w.wireUp(); err != nil {
		return nil, err
	}
	for i := range w.ops {
		op := &w.ops[i]
		at := simStart.Add(op.created)
		w.plan(at, evCreate, i)
		w.lastCreated = at
		for _, e := range []struct {
			after time.Duration
			kind  eventKind
		}{{op.changeAt, evChangeSpec}, {op.supersedeAt, evSupersede}, {op.reconcileAt, evReconcile}, {op.unauthorizedAt, evChangeUnauthorized}, {op.intakeChangeAt, evIntakeChange}, {op.cancelAt, evIntakeCancel}} {
			if e.after >= 0 { // in this order: it sets the events' planning order
				w.plan(at.Add(e.after), e.kind, i)
			}
		}
	}
	w.armSweep()
	w.armOperator()
	return w, nil
}

// wireUp builds the queues, the handlers and their mappings as the
// template wires the functions (topology.Local).
func (w *world) wireUp() error {
	local, err := topology.Stack.Local(topology.LocalConfig{Clock: w.clk})
	if err != nil {
		return err
	}
	w.local, w.broker = local, local.Broker
	for _, q := range topology.Stack.Queues {
		w.vis[local.URL(q.ID)] = local.Visibility(q.ID)
	}
	var queue schedule.QueueSender = &sender{w: w}
	if w.cfg.WrapQueue != nil {
		queue = w.cfg.WrapQueue(queue)
	}
	var records Records = w.st
	if w.cfg.WrapRecords != nil {
		records = w.cfg.WrapRecords(records)
	}
	disp, err := schedule.NewDispatcher(schedule.Config{
		Queues:        local.Targets(),
		MaxQueueDelay: 365 * 24 * time.Hour, // the embedded queue takes any delay
	}, queue, nil, w.clk)
	if err != nil {
		return err
	}
	w.disp = disp
	if err := w.newIntake(); err != nil {
		return err
	}
	jitter := rand.New(rand.NewPCG(w.cfg.Seed, 4))
	// LongPoll 0 and Immediate 0: no handler ever waits on the virtual
	// clock (see the package doc).
	delays := schedule.NewObservation(schedule.Policies{
		Default:    schedule.Policy{LongPoll: 0, Immediate: 0, Base: 3 * time.Second, Cap: 2 * time.Minute, Multiplier: 2, Jitter: 0.2},
		Accounting: schedule.Backoff{Base: 5 * time.Second, Cap: time.Minute, Multiplier: 2, Jitter: 0.2},
	})
	delays.DefaultBudgets = operation.Budgets{MaxObservations: 200, Polling: 6 * time.Hour, Accounting: 10 * time.Minute}
	delays.Reads = schedule.Backoff{Base: 2 * time.Second, Cap: time.Minute, Multiplier: 2, Jitter: 0.2}
	delays.Rand = jitter.Float64
	w.delays = delays
	var real Genace = w.client
	if w.cfg.WrapGenace != nil {
		real = w.cfg.WrapGenace(real)
	}
	g := &genaceClient{w: w, c: real}
	var ext worker.Extender = &extender{w: w}
	if w.cfg.WrapExtender != nil {
		ext = w.cfg.WrapExtender(ext)
	}
	log := slog.New(&traceLog{w: w})
	var arts deliver.Artifacts = w.arts
	if w.cfg.WrapArtifacts != nil {
		arts = w.cfg.WrapArtifacts(arts)
	}
	hs, err := local.Handlers(func(f topology.Function) (stack.Deps, bool) {
		return stack.Deps{
			// No overdue threshold in the handlers, as the simulation was
			// measured with; the sweep's is topology.Stack's.
			Config: config.Config{Concurrency: 1},
			Store:  records, Genace: g, Artifacts: arts, Extender: ext, Sender: w.disp, Delays: delays, Clock: w.clk, Log: log.With("function", f.Name),
			Events: w.events,
			Tune: []stack.Option{
				stack.Tune(func(c *submit.Config) {
					c.Worker = "submit"
					// The 429 jitter comes from the global source; one this
					// small never moves a whole-second Retry-After.
					c.RetryJitter = 1e-15
				}),
				stack.Tune(func(c *deliver.Config) {
					c.Retry = deliver.Config{}.Defaults().Retry
					c.Retry.Jitter = 0 // it comes from the global source
				}),
				stack.Tune(func(c *sweep.Config) { *c = topology.Stack.Sweep; c.Limit = w.cfg.SweepLimit }),
			},
		}, true
	})
	if err != nil {
		return err
	}
	var opStore replay.Store = w.rec
	if w.cfg.WrapOperator != nil {
		opStore = w.cfg.WrapOperator(opStore)
	}
	w.replayer = &replay.Replayer{Store: operatorStore{Store: opStore, w: w}, Sender: w.disp, Clock: w.clk, Genace: w.client}
	w.sweep = hs[topology.Sweep].Scheduled
	local.Consume(topology.ConsumeConfig{
		Handlers: topology.Batches(hs),
		// ReceiveGap plays the batching window (see lease.go).
		NoBatchingWindows: true,
		Wrap:              w.wrapHandler,
	})
	w.maps = local.Mappings
	return nil
}

func (w *world) close() {
	if w.sim != nil {
		w.sim.Close()
	}
	if w.relay != nil {
		w.relay.close()
	}
	if w.bolt != nil {
		_ = w.bolt.Close()
	}
	if w.arts != nil {
		_ = w.arts.d.Close()
	}
	if w.cleanup != "" {
		_ = os.RemoveAll(w.cleanup)
	}
}

// skewClock runs ahead of another clock by an adjustable skew: Genace
// runs on it, so one request can reach Genace late without moving the
// world's clock.
type skewClock struct {
	clock.Clock
	by atomic.Int64
}

func (c *skewClock) Now() time.Time { return c.Clock.Now().Add(time.Duration(c.by.Load())) }

func (c *skewClock) skew(d time.Duration) { c.by.Store(int64(d)) }

// eventKind is what a planned event does.
type eventKind int

const (
	evCreate eventKind = iota
	evChangeSpec
	evSupersede
	evReconcile
	evSweep
	evOperator
	// evOperatorOn is an operator working one operation (SecondJobID).
	evOperatorOn
	evChangeUnauthorized
	// The application's intake calls (app.go).
	evCreateRetry
	evIntakeChange
	evIntakeCancel
)

type event struct {
	at   time.Time
	seq  int
	kind eventKind
	op   int
}

// timeline is a min-heap of planned events by time, then planning order.
type timeline []event

func (t timeline) Len() int { return len(t) }
func (t timeline) Less(i, j int) bool {
	if !t[i].at.Equal(t[j].at) {
		return t[i].at.Before(t[j].at)
	}
	return t[i].seq < t[j].seq
}
func (t timeline) Swap(i, j int) { t[i], t[j] = t[j], t[i] }
func (t *timeline) Push(x any)   { *t = append(*t, x.(event)) }
func (t *timeline) Pop() any {
	old := *t
	e := old[len(old)-1]
	*t = old[:len(old)-1]
	return e
}

// plan adds an event at the whole second at or after at: whole seconds,
// like queue delays, bound how often the driver moves the clock.
func (w *world) plan(at time.Time, kind eventKind, op int) {
	if r := at.Sub(simStart) % time.Second; r > 0 {
		at = at.Add(time.Second - r)
	}
	w.seq++
	heap.Push(&w.timeline, event{at: at, seq: w.seq, kind: kind, op: op})
	if kind != evSweep && kind != evOperator {
		w.planned++
	}
}

// armOperator plans the operator's next round over the open reviews.
func (w *world) armOperator() {
	if !w.opArmed && w.cfg.Faults[OperatorRace] > 0 {
		w.opArmed = true
		w.plan(w.clk.Now().Add(operatorEvery), evOperator, -1)
	}
}

func (w *world) armSweep() {
	if !w.sweepArmed {
		w.sweepArmed = true
		w.plan(w.clk.Now().Add(sweepEvery), evSweep, -1)
	}
}

// maxVirtual bounds a run's virtual time after the last creation: an
// operation still unsettled then is reported, not waited for.
const maxVirtual = 48 * time.Hour

// handbackHorizon is when the liveness bound (checkLiveness's, plus one
// sweep) of the last hand-back to an operation still unsettled runs out.
func (w *world) handbackHorizon() time.Time {
	timing := DeployedLiveness(w.delays)
	w.rec.mu.Lock()
	resumed := maps.Clone(w.rec.resumed)
	for id := range resumed {
		if len(w.rec.settles[id])%2 == 1 {
			delete(resumed, id) // settled: nothing to wait for
		}
	}
	w.rec.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	var at time.Time
	for id, r := range resumed {
		if end := r.Add(timing.Bound(w.stops[id]-w.failStops[id]) + sweepEvery); end.After(at) {
			at = end
		}
	}
	return at
}

// drive runs the system until the queues are drained, nothing is planned
// and the sweep finds nothing to re-arm, or the virtual time limit.
func (w *world) drive(ctx context.Context) error {
	limit := w.lastCreated.Add(maxVirtual)
	extended := false // once: a hand-back during the extension waits no longer
	stop := w.watchdog()
	defer stop()
	lastProgress := time.Now()
	sameInstant := 0
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("faultsim: stopped at virtual %s: %w", w.at(w.clk.Now()), err)
		}
		if err := w.runDue(); err != nil {
			return err
		}
		n, err := w.step()
		if err != nil {
			return err
		}
		if w.cfg.Progress != nil && time.Since(lastProgress) >= 5*time.Second {
			lastProgress = time.Now()
			w.progress()
		}
		if n > 0 {
			sameInstant += n
			if sameInstant > 100000+20*len(w.ops) {
				return fmt.Errorf("faultsim: livelock: %d records handled at virtual %s without the clock moving", sameInstant, w.at(w.clk.Now()))
			}
			continue
		}
		next, ok := w.next()
		if !ok {
			return nil
		}
		if next.After(limit) {
			// An operator's late hand-back restarts that operation's
			// bound: the run gives it the whole bound before the checks
			// judge it, rather than ending it mid-way.
			if ext := w.handbackHorizon(); ext.After(limit) && !extended {
				limit, extended = ext, true
			} else {
				return nil // the checks report what is still unsettled
			}
		}
		w.clk.Set(next)
		sameInstant = 0
	}
}

// step polls every mapping once, in an order drawn from the seed, and
// returns how many records were handled.
func (w *world) step() (int, error) {
	w.stepAt.Store(time.Now().UnixNano())
	total := 0
	for _, i := range w.order.Perm(len(w.maps)) {
		n, err := w.maps[i].PollOnce(context.Background())
		if err != nil && !errors.Is(err, eventsource.ErrInvocation) {
			return total, fmt.Errorf("faultsim: poll %s: %w", w.maps[i].Function.Name, err)
		}
		total += n
	}
	return total, nil
}

// next is the earliest future event: a message becoming visible or a
// planned event.
func (w *world) next() (time.Time, bool) {
	at, ok := w.broker.NextEvent()
	if len(w.timeline) > 0 && (!ok || w.timeline[0].at.Before(at)) {
		at, ok = w.timeline[0].at, true
	}
	return at, ok
}

// runDue runs the planned events that are due.
func (w *world) runDue() error {
	now := w.clk.Now()
	for len(w.timeline) > 0 && !w.timeline[0].at.After(now) {
		e := heap.Pop(&w.timeline).(event)
		if e.kind != evSweep && e.kind != evOperator {
			w.planned--
		}
		var err error
		switch e.kind {
		case evCreate:
			w.create(&w.ops[e.op])
		case evCreateRetry:
			w.createAttempt(&w.ops[e.op])
		case evIntakeChange:
			w.change(&w.ops[e.op], when(w.ops[e.op].intakeChangeAt), nil)
		case evIntakeCancel:
			w.cancel(&w.ops[e.op], when(w.ops[e.op].cancelAt), nil)
		case evChangeSpec:
			err = w.changeSpec(&w.ops[e.op])
		case evSupersede:
			err = w.supersede(&w.ops[e.op])
		case evReconcile:
			w.reconcile(&w.ops[e.op])
		case evSweep:
			w.sweepArmed = false
			err = w.runSweep()
		case evOperator:
			w.opArmed = false
			if err = w.operatorRound(); err == nil && (w.planned > 0 || w.sweepArmed || !w.local.Empty()) {
				w.armOperator()
			}
		case evOperatorOn:
			w.operate(w.ops[e.op].id, "working the review queue", "")
			w.armSweep()
		case evChangeUnauthorized:
			w.changeUnauthorized(&w.ops[e.op])
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (w *world) dispatch(ctx context.Context, rec operation.Record) error {
	env := message.Envelope{Action: message.ActionSubmitGeneration, OperationID: rec.OperationID, ExpectedRevision: rec.Revision}
	if _, err := w.disp.Send(ctx, env, 0); err != nil {
		return fmt.Errorf("faultsim: dispatch %s: %w", rec.OperationID, err)
	}
	return nil
}

// changeSpec is the user changing a prepared request: the application
// writes the change with the user's renewed authorization and dispatches
// the new revision. Earlier dispatches become stale.
func (w *world) changeSpec(op *opSpec) error {
	ctx := withWriter(context.Background(), "user")
	saved, ok, err := w.userWrite(ctx, op, func(rec operation.Record) (operation.Record, bool) {
		if rec.Phase != operation.PhasePrepared || rec.RemoteJobID != "" {
			return rec, false
		}
		next, err := operation.ChangeSpec(rec, w.clk.Now())
		next.AuthorizedSpecRevision = next.SpecRevision
		return next, err == nil
	})
	if !ok {
		return err
	}
	w.inj.note(UserChangeSpec)
	w.authorize(saved)
	w.tracef(op.id, "FAULT %s: the user changed the request (spec r%d)", UserChangeSpec, saved.SpecRevision)
	return w.dispatch(ctx, saved)
}

// userWrite is the user's read-modify-write of op's record, tried three
// times at most on conflicts. change returns the next record, or false
// when the user no longer changes it so. It reports whether it wrote.
func (w *world) userWrite(ctx context.Context, op *opSpec, change func(operation.Record) (operation.Record, bool)) (operation.Record, bool, error) {
	for range 3 {
		rec, err := w.rec.Get(ctx, op.id)
		if err != nil {
			return rec, false, nil
		}
		next, ok := change(rec)
		if !ok {
			return rec, false, nil
		}
		saved, err := w.rec.Update(ctx, next, rec.Revision)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return saved, false, fmt.Errorf("faultsim: user write to %s: %w", op.id, err)
		}
		return saved, true, nil
	}
	return operation.Record{}, false, nil
}

// changeUnauthorized is the user changing a prepared request with a
// dispatch pending, whose re-authorization never follows: nothing is
// dispatched, and the recorded dispatch fails its precondition.
func (w *world) changeUnauthorized(op *opSpec) {
	saved, ok, _ := w.userWrite(withWriter(context.Background(), "user"), op, func(rec operation.Record) (operation.Record, bool) {
		if rec.Phase != operation.PhasePrepared || rec.RemoteJobID != "" || rec.Schedule == nil {
			return rec, false
		}
		next, err := operation.ChangeSpec(rec, w.clk.Now())
		return next, err == nil
	})
	if ok {
		w.inj.note(UnauthorizedChange)
		w.tracef(op.id, "FAULT %s: the user changed the request (spec r%d); no re-authorization follows", UnauthorizedChange, saved.SpecRevision)
	}
}

// supersede is the user replacing an accepted request.
func (w *world) supersede(op *opSpec) error {
	ctx := withWriter(context.Background(), "user")
	saved, ok, err := w.userWrite(ctx, op, func(rec operation.Record) (operation.Record, bool) {
		if rec.Phase != operation.PhaseAccepted {
			return rec, false
		}
		next, err := operation.Supersede(rec, w.clk.Now())
		return next, err == nil
	})
	if !ok {
		return err
	}
	// Ending the operation settles its open reviews, as every terminal
	// write through the handlers does (worker.Emitter).
	em := worker.Emitter{Reviews: w.rec, Clock: w.clk, Source: review.SourceHandler}
	if err := em.Emit(ctx, &saved, 0); err != nil {
		return fmt.Errorf("faultsim: supersede %s: close its reviews: %w", op.id, err)
	}
	w.inj.note(UserSupersede)
	w.tracef(op.id, "FAULT %s: the user replaced the request", UserSupersede)
	return nil
}

// reconcile is Genace's operators failing the operation's running job
// without a refund.
func (w *world) reconcile(op *opSpec) {
	if done := w.sim.Reconcile(w.sim.JobsForOperation(op.id)...); len(done) > 0 {
		w.mu.Lock()
		w.reconciledAt[done[0]] = w.clk.Now()
		w.mu.Unlock()
		w.inj.note(ReconcileFail)
		w.tracef(op.id, "FAULT %s: Genace failed job %s without refund", ReconcileFail, done[0])
	}
}

// runSweep runs the sweep function once (it may crash like any worker)
// and re-arms its timer while anything could still need it.
func (w *world) runSweep() error {
	inv := &invocation{fn: "sweep"}
	ctx := context.WithValue(context.Background(), invKey, inv)
	func() {
		defer func() {
			if p := recover(); p != nil {
				if _, ok := p.(crashPanic); !ok {
					panic(p)
				}
				w.sweepCrashes = append(w.sweepCrashes, w.clk.Now())
			}
		}()
		// The next run retries failed records; what it did is counted
		// from its writes (recorder.observe).
		_ = w.sweep(ctx)
	}()
	w.sweeps++
	due, err := w.db.Due(context.Background(), simStart.Add(100*365*24*time.Hour), 1)
	if err != nil {
		return fmt.Errorf("faultsim: due: %w", err)
	}
	if w.planned > 0 || len(due) > 0 || !w.local.Empty() {
		w.armSweep()
	}
	return nil
}

// watchdog panics with a stack dump if a handler ever waits on the
// virtual clock, rather than hang.
func (w *world) watchdog() func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if since := time.Since(time.Unix(0, w.stepAt.Load())); w.stepAt.Load() != 0 && since > 2*time.Minute {
					debug.SetTraceback("all")
					panic(fmt.Sprintf("faultsim: the driver has been stuck in one step for %s at virtual %s: a handler waits on the virtual clock", since.Round(time.Second), w.at(w.clk.Now())))
				}
			}
		}
	}()
	return func() { close(done) }
}

func (w *world) progress() {
	created := 0
	for _, op := range w.ops {
		if !simStart.Add(op.created).After(w.clk.Now()) {
			created++
		}
	}
	var inv int64
	for _, m := range w.maps {
		inv += m.Stats().Invocations
	}
	fmt.Fprintf(w.cfg.Progress, "[%s wall] virtual %s: %d/%d created, %d invocations, %d writes\n",
		time.Since(w.wallStart).Round(time.Second), w.at(w.clk.Now()), created, len(w.ops), inv, w.rec.writes)
}

// simFault is the simulator's fault function: 429 storms, and the POST,
// GET and download faults only the server side can produce.
func (w *world) simFault(r genacesim.RequestInfo) genacesim.Fault {
	if w.checking.Load() {
		return genacesim.NoFault()
	}
	storm := w.storm(w.clk.Now())
	rateLimited := func() genacesim.Fault {
		w.inj.note(RateLimited)
		return genacesim.RateLimited(time.Duration(1+w.inj.intn(RateLimitStorm, 5)) * time.Second)
	}
	switch r.Kind {
	case genacesim.KindPost:
		if storm && w.inj.intn(RateLimitStorm, 10) < 8 {
			return rateLimited()
		}
		switch {
		case w.inj.hit(PostAcceptThenDrop):
			return genacesim.AcceptThenDrop()
		case w.inj.hit(Post502JobID):
			return genacesim.SubmissionFailed(502)
		case w.inj.hit(Post5xxNoJob):
			return genacesim.ServerErrorNoJob(503)
		case w.inj.hit(Post5xxJobCreated):
			return genacesim.ServerErrorJobCreated(500)
		case w.inj.hit(PostReject):
			return genacesim.Reject(400, "")
		case w.inj.hit(H2Reset):
			// The job is created and answered; the relay swallows the
			// answer and resets the stream.
			code := http2.ErrCodeRefusedStream
			if w.inj.intn(H2Reset, 2) == 1 {
				code = http2.ErrCodeProtocol
			}
			w.wire.resetNext(r.OperationID, uint32(code))
			w.tracef(r.OperationID, "FAULT %s: Genace read the POST, created the job and reset the stream (%s)", H2Reset, code)
			return genacesim.NoFault()
		case w.inj.hit(BodyDrift):
			v := w.inj.intn(BodyDrift, len(driftNames))
			w.wire.driftNext(r.OperationID, v)
			if v >= driftKinds202 {
				return genacesim.SubmissionFailed(502)
			}
			return genacesim.NoFault()
		case w.inj.hit(Post408):
			w.tracef(r.OperationID, "FAULT %s: Genace created the job and answered 408", Post408)
			return genacesim.TimeoutAfterCreate()
		case w.inj.hit(UnusableJobID):
			id := w.unusableID(r.OperationID)
			w.tracef(r.OperationID, "FAULT %s: Genace names the job it creates %q", UnusableJobID, id)
			return genacesim.NoFault().WithJobID(id)
		}
	case genacesim.KindGet:
		if op := w.opOfJob(r.JobID); w.persistentOf(op) == PersistentGet5xx {
			w.struck(op, PersistentGet5xx, "GET "+r.JobID+" answers 500, as every GET of it will")
			return genacesim.ServerErrorNoJob(500)
		}
		if storm && w.inj.intn(RateLimitStorm, 10) < 3 {
			return rateLimited()
		}
		if w.inj.hit(Get5xx) {
			return genacesim.ServerErrorNoJob([]int{500, 502, 503}[w.inj.intn(Get5xx, 3)])
		}
	case genacesim.KindFile:
		if w.inj.hit(Download5xx) {
			return genacesim.ServerErrorNoJob(502)
		}
	}
	return genacesim.NoFault()
}

// persistentOf is the persistent fault that strikes op ("" none).
func (w *world) persistentOf(op string) Fault {
	if i := w.opIndex(op); i >= 0 && !w.checking.Load() && w.cfg.Faults[w.ops[i].persistent] > 0 {
		return w.ops[i].persistent
	}
	return ""
}

// struck notes that the persistent fault f acted on op: counted once per
// operation, traced every time.
func (w *world) struck(op string, f Fault, what string) {
	w.mu.Lock()
	first := !w.persisting[op]
	w.persisting[op] = true
	w.mu.Unlock()
	if first {
		w.inj.note(f)
	}
	w.tracef(op, "FAULT %s: %s", f, what)
}

// storm reports whether a 429 storm rages at t. Storms are a property of
// virtual time, not traffic: each virtual minute starts one with
// RateLimitStorm's rate, at a seeded second, for 10–40 s.
func (w *world) storm(t time.Time) bool {
	p := w.cfg.Faults[RateLimitStorm]
	if p <= 0 {
		return false
	}
	minute := int64(t.Sub(simStart) / time.Minute)
	for m := max(0, minute-1); m <= minute; m++ {
		r := rand.New(rand.NewPCG(w.cfg.Seed^0x73746f726d, uint64(m)))
		if r.Float64() >= p {
			continue
		}
		from := simStart.Add(time.Duration(m)*time.Minute + time.Duration(r.IntN(60))*time.Second)
		until := from.Add(time.Duration(10+r.IntN(31)) * time.Second)
		if !t.Before(from) && t.Before(until) {
			w.stormMu.Lock()
			if !w.storms[m] {
				w.storms[m] = true
				w.inj.note(RateLimitStorm)
			}
			w.stormMu.Unlock()
			return true
		}
	}
	return false
}

// unknownSubmission counts a submission of op whose outcome was
// genuinely unknown (Result.UnknownSubmissions).
func (w *world) unknownSubmission(op string) {
	w.mu.Lock()
	w.unknownSubmissions++
	w.unknownOf[op]++
	w.mu.Unlock()
}

// countPath counts one decision a handler logged.
func (w *world) countPath(key string) {
	w.mu.Lock()
	w.paths[key]++
	w.mu.Unlock()
}

// chainStop counts a fault that ends an operation's chain by design (see
// SweepBound).
func (w *world) chainStop(op string) {
	if op == "" {
		return
	}
	w.mu.Lock()
	w.stops[op]++
	w.mu.Unlock()
}

// tally returns the POST tally of an operation.
func (w *world) tally(op string) *tally {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.tallies[op]
	if !ok {
		t = &tally{}
		w.tallies[op] = t
	}
	return t
}

// opOfJob is the operation a job was created for, by Genace's truth.
func (w *world) opOfJob(jobID string) string {
	if j, ok := w.sim.Job(jobID); ok {
		return j.OperationID
	}
	return ""
}

func (w *world) traced(op string) bool {
	return op != "" && (w.traceAll || w.traceOps[op])
}

// tracef adds a line to the operation's history, stamped with the virtual
// time since the start.
func (w *world) tracef(op, format string, args ...any) {
	if !w.traced(op) {
		return
	}
	line := fmt.Sprintf("%10s  ", w.at(w.clk.Now())) + fmt.Sprintf(format, args...)
	w.mu.Lock()
	w.traces[op] = append(w.traces[op], line)
	w.mu.Unlock()
}

// at formats a virtual time as the offset from the start.
func (w *world) at(t time.Time) string {
	return "+" + t.Sub(simStart).Round(time.Millisecond).String()
}

func (w *world) violate(inv Invariant, op, detail string) {
	w.mu.Lock()
	w.violations = append(w.violations, Violation{Invariant: inv, OperationID: op, Detail: detail})
	w.mu.Unlock()
}
