// Package pipeline runs the whole genjobs pipeline on one machine: the
// very handlers lambda.Start runs, fed by an embedded queue per template
// queue and DLQ through pollers that play the Lambda event source mapping,
// on the embedded store (or DynamoDB), against the Genace simulator (or
// another Genace), with outputs copied into a local directory.
package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/genjobs/genjobs/client"
	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/deliver"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/localpack"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/dev/workload"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/notify"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/stack"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/bolt"
	"github.com/genjobs/genjobs/internal/store/dynamo"
	"github.com/genjobs/genjobs/internal/sweep"
	"github.com/genjobs/genjobs/internal/worker"
)

// Config describes one local run.
type Config struct {
	// StateDir holds the embedded store file and the artifacts; it must
	// not hold a run already. The run leaves it for `genjobs
	// reviews|plan|replay|audit`.
	StateDir string
	// Command is how the report's hints name the genjobs binary (default
	// "genjobs"), so a printed hint runs as printed.
	Command string
	// Addressing is what the hints add to name this run's store and
	// state, so that they still reach this run when a newer one exists.
	Addressing Addressing
	Workload   []workload.Item
	// Sim is the simulator to run against (started here on loopback); nil
	// means GenaceURL/GenaceKey name another Genace.
	Sim       *genacesim.Simulator
	GenaceURL string
	GenaceKey string
	// Prices estimate each model's credits for the budget check (0: none).
	Prices map[string]int64
	// Table, when set, stores operations in DynamoDB (endpoint from
	// AWS_ENDPOINT_URL_DYNAMODB) instead of the embedded store.
	Table   string
	Timeout time.Duration
	// Progress receives the run's Status every ProgressEvery (nil: none);
	// the caller decides how to show it.
	Progress      func(Status)
	ProgressEvery time.Duration
	// Resume continues the run already in StateDir, however it ended (a
	// SIGKILL included): its store is opened and names the operations
	// (Workload must be empty), nothing is seeded, claims are taken as
	// dead, and every active record's next action is sent again for its
	// due time, since no message outlived the run that wrote them.
	Resume bool
	// Trace, if set, receives one JSON line (TraceEvent) per message a
	// function receives and per message sent: what was carried out when.
	Trace io.Writer
	// GiveUpAfter ends the run when Genace has been unreachable this long
	// with no answer in between (0: 30 s).
	GiveUpAfter time.Duration
	// Log receives the handlers' logs (nil: discarded).
	Log *slog.Logger
	// LongPoll sets the observation long poll (0: the deployed policy's,
	// so local runs make production's GETs); Accounting the accounting
	// budget (0: 10 s, a local time scale).
	LongPoll   time.Duration
	Accounting time.Duration
	// Listen is the loopback address the run serves the intake API on
	// (default an ephemeral port): the workload is created through it, as
	// an application creates operations, and so is anything an
	// application sends while the run lasts.
	Listen string
	// Serve keeps the run going, serving the API, until the context ends
	// or Timeout, however settled its operations are; the workload may be
	// empty. OnServe, if set, gets the API's URL once it listens.
	Serve   bool
	OnServe func(url string)
	// OnEvent, if set, sees each completion event the run writes to
	// EventsPath, as it is written.
	OnEvent func(notify.Event)
}

// DBPath is the embedded store file in a state dir.
func DBPath(stateDir string) string { return filepath.Join(stateDir, "genjobs.db") }

// ArtifactDir is where delivered outputs go in a state dir.
func ArtifactDir(stateDir string) string { return filepath.Join(stateDir, "artifacts") }

// EventsPath is where a run's completion events go, one JSON line each
// (notify.File): the local stand-in for the deployed event bus.
func EventsPath(stateDir string) string { return filepath.Join(stateDir, "events.jsonl") }

// ReportPath is where a run keeps its JSON report.
func ReportPath(stateDir string) string { return filepath.Join(stateDir, "report.json") }

// workloadPath is where a run keeps its workload, written before its
// first record: a resumed run scripts the demo's scenarios as the run did,
// and creates what a run killed while seeding did not.
func workloadPath(stateDir string) string { return filepath.Join(stateDir, "workload.json") }

// localChain is how long a quiet local observation chain goes without
// writing: as many long polls as a deployed one (observe.DefaultChain of
// Genace's full windows), so that at the deployed long poll a local run
// makes production's writes, and a shorter one keeps the chain's renewal
// (and the sweep's threshold below) on the run's time scale. (A chain's
// Span is counted in full windows too, so a local chain holds at most as
// many polls as a deployed one of Span.)
func localChain(longPoll time.Duration) time.Duration {
	return observe.DefaultChain / genace.MaxWait * longPoll
}

// sweepConfig runs the sweep on a local time scale. A quiet chain writes
// only every chain, so a next action counts as overdue only 20 s after
// the chain's next write was due.
func sweepConfig(chain time.Duration) sweep.Config {
	return sweep.Config{ClaimTimeout: time.Minute, OverdueAfter: chain + 20*time.Second}
}

// localPolicies keep the deployed shape (back-to-back long polls while the
// job is young, then backoff) with the given long poll, and settle
// refunds on a local time scale.
func localPolicies(longPoll time.Duration) schedule.Policies {
	ps := schedule.DefaultPolicies()
	ps.Default.LongPoll = longPoll
	ps.Accounting = schedule.Backoff{Base: time.Second, Cap: 4 * time.Second, Multiplier: 2, Jitter: 0.2}
	return ps
}

// localDeliverRetry is the delivery's backoff between failed copies on a
// local time scale: the deployed one (10 s doubling to 15 min) put four
// failed downloads in a row 150 s apart, longer than a run with read
// faults has.
var localDeliverRetry = schedule.Backoff{Base: time.Second, Cap: 10 * time.Second, Multiplier: 2, Jitter: 0.2}

// localRun is one running pipeline.
type localRun struct {
	cfg   Config
	start time.Time
	wire2 *wireWatch
	clk   clock.Clock
	store store.Store
	// artifacts is the delivered outputs' store, open while the run is.
	artifacts *localpack.Dir
	local     *topology.Local
	// sweeper and resumer run the sweep: on the run's time scale, and once
	// when a run resumes.
	sweeper func(context.Context) error
	resumer func(context.Context) error
	// follow sends a record's next action as the handlers do (a resume).
	follow *worker.Emitter
	// unseeded are a resumed run's operations its store lacks.
	unseeded []workload.Item
	trace    *tracer
	sweeps   int
	// sender sends as the handlers do; api is the intake API, served
	// while the run lasts.
	sender worker.Sender
	events *localEvents
	api    *api
}

// Run seeds the workload, runs the pipeline until every operation is
// terminal or waiting for review (or the timeout), and reports.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	start := time.Now()
	if cfg.Timeout <= 0 {
		cfg.Timeout = 3 * time.Minute
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.LongPoll <= 0 {
		cfg.LongPoll = schedule.DefaultPolicies().Default.LongPoll
	}
	if cfg.Accounting <= 0 {
		cfg.Accounting = 10 * time.Second
	}
	cfg.GiveUpAfter = cmp.Or(cfg.GiveUpAfter, 30*time.Second)
	switch {
	case cfg.Resume && len(cfg.Workload) > 0:
		return nil, errors.New("local: a resumed run's operations come from its store; give no workload")
	case !cfg.Resume && len(cfg.Workload) == 0 && !cfg.Serve:
		return nil, errors.New("local: the workload is empty")
	}
	defer RaiseProcs()()
	s := &localRun{cfg: cfg, clk: clock.Real{}, start: start, wire2: &wireWatch{}, trace: newTracer(cfg.Trace)}
	if err := s.openState(ctx); err != nil {
		return nil, err
	}
	defer s.store.Close()
	if cfg.Resume {
		if err := s.operations(ctx); err != nil {
			return nil, err
		}
	}
	g, stopSim, err := s.genace()
	if err != nil {
		return nil, err
	}
	defer stopSim()
	// The run's end by Ctrl-C or timeout is the functions' sandboxes
	// dying: invocations in flight (observation chains holding long polls)
	// end with it, and what they wrote stays for --resume.
	runCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := s.wire(g, runCtx); err != nil {
		return nil, err
	}
	defer s.artifacts.Close()
	if err := s.startAPI(s.sender); err != nil {
		return nil, err
	}
	defer s.api.stop()
	var wg sync.WaitGroup
	pollCtx, stopPolling := context.WithCancel(context.Background())
	wg.Go(func() { _ = s.local.Run(pollCtx, 50*time.Millisecond) })
	seed := s.seed
	if cfg.Resume {
		seed = s.rearm
	}
	if err := seed(runCtx); err != nil && ctx.Err() == nil {
		stopPolling()
		wg.Wait()
		return nil, err
	}
	// Interrupted while seeding: the report below says what was created,
	// and a resume creates the rest from the workload kept.
	finished, stopErr := s.wait(runCtx)
	stopPolling()
	wg.Wait()
	interrupted := ctx.Err() != nil
	// A serving run ends by its timeout or Ctrl-C, as planned.
	rep, err := s.report(context.Background(), time.Since(start), !finished && !interrupted && stopErr == nil && !cfg.Serve)
	if err != nil {
		return nil, err
	}
	if _, _, all := s.current(context.Background()); interrupted && cfg.Serve && all {
		// Ctrl-C is how a serving run ends: with nothing left running,
		// it is no interruption.
		interrupted = false
	}
	rep.Interrupted = interrupted
	switch {
	case interrupted:
		return rep, ctx.Err()
	case stopErr != nil:
		rep.Stopped = stopErr.Error()
		return rep, stopErr
	}
	return rep, nil
}

func (s *localRun) openState(ctx context.Context) error {
	if err := os.MkdirAll(s.cfg.StateDir, 0o755); err != nil {
		return fmt.Errorf("local: state dir: %w", err)
	}
	// A run never reuses or clears another run's state: the demo's
	// operation ids repeat, and mixed records, artifacts and audit trails
	// would mislead an operator. Only a resume continues one.
	if s.cfg.Resume {
		if _, err := os.Lstat(DBPath(s.cfg.StateDir)); err != nil && s.cfg.Table == "" {
			return fmt.Errorf("local: nothing to resume in %s: %w", s.cfg.StateDir, err)
		}
	} else {
		for _, p := range []string{DBPath(s.cfg.StateDir), ArtifactDir(s.cfg.StateDir), ReportPath(s.cfg.StateDir)} {
			if _, err := os.Lstat(p); err == nil {
				return fmt.Errorf("local: %s already holds a run (%s exists); give a new state directory", s.cfg.StateDir, p)
			}
		}
	}
	if s.cfg.Table != "" {
		client, err := dynamo.NewClient(ctx)
		if err != nil {
			return err
		}
		if err := dynamo.EnsureTable(ctx, client, s.cfg.Table); err != nil {
			return fmt.Errorf("local: table %s: %w", s.cfg.Table, err)
		}
		s.store = dynamo.New(client, s.cfg.Table)
		return nil
	}
	st, err := bolt.Open(DBPath(s.cfg.StateDir))
	if err != nil {
		return err
	}
	s.store = st
	return nil
}

func (s *localRun) genace() (*genace.Client, func(), error) {
	url, key, stop := s.cfg.GenaceURL, s.cfg.GenaceKey, func() {}
	if s.cfg.Sim != nil {
		base, stopSim, err := s.cfg.Sim.Start("127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		url, stop = base, stopSim
	}
	c, err := genace.New(url, key, &http.Client{Transport: s.wire2.wrap(http.DefaultTransport)})
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("local: genace client: %w", err)
	}
	return c, stop, nil
}

// wire builds the queues, the handlers and their event source mappings
// as the template wires the functions (topology.Local), the invocations
// running until sandbox ends.
func (s *localRun) wire(g *genace.Client, sandbox context.Context) error {
	local, err := topology.Stack.Local(topology.LocalConfig{Clock: s.clk})
	if err != nil {
		return err
	}
	s.local = local
	disp, err := schedule.NewDispatcher(schedule.Config{
		Queues: local.Targets(),
		// The embedded queue takes any delay, so no Scheduler is needed.
		MaxQueueDelay: 365 * 24 * time.Hour,
	}, local.Broker, nil, s.clk)
	if err != nil {
		return err
	}
	sender := s.trace.sender(disp, "send")
	s.sender = sender
	dir, err := localpack.New(ArtifactDir(s.cfg.StateDir))
	if err != nil {
		return err
	}
	s.artifacts = dir
	delays := schedule.NewObservation(localPolicies(s.cfg.LongPoll))
	delays.DefaultBudgets = operation.Budgets{MaxObservations: 200, Polling: 30 * time.Minute, Accounting: s.cfg.Accounting}
	m := func(fn string) *metrics.Emitter { return metrics.New(io.Discard, fn, s.clk) }
	log := s.cfg.Log
	chain := localChain(s.cfg.LongPoll)
	sw := sweepConfig(chain)
	events := &localEvents{file: &notify.File{Path: EventsPath(s.cfg.StateDir)}, artifacts: dir, on: s.cfg.OnEvent}
	s.events = events
	deps := func(f topology.Function, tune ...stack.Option) stack.Deps {
		return stack.Deps{
			Events: events,
			Config: config.Config{SweepClaimTimeout: sw.ClaimTimeout, SweepOverdue: sw.OverdueAfter},
			Store:  s.store, Genace: g, Artifacts: dir, Extender: local.Broker, Sender: sender, Delays: delays,
			// Observe receives from its own queue while it runs, as deployed.
			Receiver: s.trace.receiver(f.Name, local.Feed(f.Name)),
			Clock:    s.clk, Log: log.With("function", f.Name), Metrics: m(f.Name),
			// The embedded queue costs nothing to poll: a short receive,
			// so the run's end does not wait out an idle feed's 20 s.
			Tune: append(tune, stack.Tune(func(c *observe.Config) { c.Chain, c.FeedWait = chain, time.Second }),
				stack.Tune(func(c *deliver.Config) { c.Retry = localDeliverRetry })),
		}
	}
	hs, err := local.Handlers(func(f topology.Function) (stack.Deps, bool) {
		if f.Name == topology.Sweep {
			return local.Fitting(deps(f)), true
		}
		return deps(f), true
	})
	if err != nil {
		return err
	}
	s.sweeper = hs[topology.Sweep].Scheduled
	// A resumed run's first sweep takes every claim as dead (no worker
	// outlived the run before it) and re-arms nothing: rearm re-creates
	// each next action for its own due time instead.
	resume, err := local.Handlers(func(f topology.Function) (stack.Deps, bool) {
		return deps(f, stack.Tune(func(c *sweep.Config) {
			*c = sweep.Config{ClaimTimeout: time.Nanosecond, OverdueAfter: 100 * 365 * 24 * time.Hour}
		})), f.Name == topology.Sweep
	})
	if err != nil {
		return err
	}
	s.resumer = resume[topology.Sweep].Scheduled
	s.follow = &worker.Emitter{Sender: s.trace.sender(disp, "resend"), Reviews: s.store, Clock: s.clk, Metrics: m("sweep"), Source: review.SourceSweep}
	batches := topology.Batches(hs)
	for fn, h := range batches {
		batches[fn] = s.trace.handler(fn, h)
	}
	local.Consume(topology.ConsumeConfig{
		Handlers: batches,
		Log:      log,
		Sandbox:  sandbox,
	})
	return nil
}

// seed creates the operations and dispatches them, scripting the demo's
// scenarios into the simulator.
func (s *localRun) seed(ctx context.Context) error {
	if err := writeWorkload(s.cfg.StateDir, s.cfg.Workload); err != nil {
		return err
	}
	return s.create(ctx, s.cfg.Workload)
}

// create creates each item's operation through the intake API, as an
// application does: the API writes the record and sends its dispatch.
func (s *localRun) create(ctx context.Context, items []workload.Item) error {
	for _, it := range items {
		s.script(it)
		req := client.CreateRequest{OperationID: it.OperationID, UserID: it.UserID, Model: it.Model, Input: it.Input, BudgetCredits: it.BudgetCredits}
		_, _, err := s.api.client.Create(ctx, req)
		if apiErr := (*client.Error)(nil); errors.As(err, &apiErr) && apiErr.Status < 500 && apiErr.Status != http.StatusTooManyRequests {
			// Refused as an application would be: reported, and the run
			// goes on with the rest.
			s.api.refuse(it.OperationID, apiErr.Error())
			continue
		}
		if err != nil {
			return fmt.Errorf("local: create %s: %w", it.OperationID, err)
		}
	}
	return nil
}

// operationIDs are the run's operations: the workload's, then those
// applications created through the API, in the order created.
func (s *localRun) operationIDs() []string {
	ids := make([]string, 0, len(s.cfg.Workload))
	seen := map[string]bool{}
	for _, it := range s.cfg.Workload {
		ids, seen[it.OperationID] = append(ids, it.OperationID), true
	}
	if s.api != nil {
		s.api.mu.Lock()
		defer s.api.mu.Unlock()
		for _, id := range s.api.ids {
			if !seen[id] {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// script tells the simulator what its demo scenario does to an
// operation's POST.
func (s *localRun) script(it workload.Item) {
	if s.cfg.Sim == nil {
		return
	}
	switch it.Scenario {
	case workload.ScenarioSubmissionFailed:
		s.cfg.Sim.ScriptPOST(it.OperationID, genacesim.SubmissionFailed(502))
	case workload.ScenarioLostResponse:
		s.cfg.Sim.ScriptPOST(it.OperationID, genacesim.AcceptThenDrop())
	}
}

// settled reports whether automation is done with an operation: it is
// terminal, waits for review, or is a prepared operation whose dispatch
// was dropped because a precondition fails (only a person moves it).
func settled(rec *operation.Record) bool {
	return rec.Terminal() || worker.NeedsReview(rec) || rec.Phase == operation.PhasePrepared && rec.Schedule == nil
}

// wait drives the demo's operator-side events (reconcile-jobs --fail),
// the sweep on a timer and the progress display, until every operation is
// settled or the context ends. It reports whether all settled, and why it
// stopped early when Genace refuses our credentials or stays unreachable.
func (s *localRun) wait(ctx context.Context) (bool, error) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	reconciled := map[string]bool{}
	lastProgress, lastSweep := time.Time{}, time.Now()
	for {
		ids, recs, all := s.current(ctx)
		all = all && !s.cfg.Serve
		for _, it := range s.cfg.Workload {
			rec, ok := recs[it.OperationID]
			if ok && it.Scenario == workload.ScenarioReconcileFail && s.cfg.Sim != nil && rec.RemoteJobID != "" && !reconciled[it.OperationID] {
				// Genace's operators fail the job without a refund.
				s.cfg.Sim.Reconcile(rec.RemoteJobID)
				reconciled[it.OperationID] = true
			}
		}
		if s.cfg.Progress != nil && (time.Since(lastProgress) >= s.cfg.ProgressEvery || all) {
			s.cfg.Progress(s.status(recs, len(ids)))
			lastProgress = time.Now()
		}
		// Genace refusing our key makes every outcome so far suspect:
		// stop before taking the run as finished.
		if err := s.wire2.fatal(s.cfg.GiveUpAfter); err != nil {
			if s.cfg.Progress != nil {
				s.cfg.Progress(s.status(recs, len(ids)))
			}
			return false, err
		}
		if all {
			return true, nil
		}
		if time.Since(lastSweep) >= 5*time.Second {
			if err := s.sweeper(ctx); err == nil {
				s.sweeps++
			}
			lastSweep = time.Now()
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-tick.C:
		}
	}
}

// current reads the run's operations (those the API did not refuse):
// their ids, the records found, and whether every one is settled.
func (s *localRun) current(ctx context.Context) ([]string, map[string]operation.Record, bool) {
	ids := slices.DeleteFunc(s.operationIDs(), s.api.refusedID)
	recs := s.records(ctx, ids)
	all := len(recs) == len(ids)
	for _, r := range recs {
		if !settled(&r) {
			all = false
		}
	}
	return ids, recs, all
}

func (s *localRun) records(ctx context.Context, ids []string) map[string]operation.Record {
	out := make(map[string]operation.Record, len(ids))
	for _, id := range ids {
		if rec, err := s.store.Get(ctx, id); err == nil {
			out[id] = rec
		}
	}
	return out
}

func (s *localRun) status(recs map[string]operation.Record, total int) Status {
	st := Status{Elapsed: time.Since(s.start), Total: total, Done: map[operation.Phase]int{}, Pending: map[operation.Phase]int{}, Blocked: map[string]string{},
		Posts: -1, Gets: -1, DLQ: s.local.DeadLetterDepth(), Genace: s.wire2.problem()}
	for id, r := range recs {
		if settled(&r) {
			st.Settled++
			st.Done[r.Phase]++
		} else {
			st.Pending[r.Phase]++
		}
		switch c, bad := operation.FailedCheck(operation.SubmitChecks(&r)); {
		case r.Parked != nil && !r.Terminal():
			st.Blocked[id] = r.Parked.Reason
		case r.Phase == operation.PhasePrepared && bad:
			st.Blocked[id] = fmt.Sprintf("precondition %s failed (%s)", c.Name, c.Detail)
		}
	}
	if s.cfg.Sim != nil {
		st.Posts, st.Gets = s.cfg.Sim.TotalPosts(), s.cfg.Sim.TotalGets()
	}
	return st
}

func (s *localRun) report(ctx context.Context, elapsed time.Duration, timedOut bool) (*Report, error) {
	rep := &Report{Elapsed: elapsed.Round(time.Millisecond).String(), TimedOut: timedOut, StateDir: s.cfg.StateDir, Command: s.cfg.Command, Addressing: s.cfg.Addressing,
		Totals: Totals{Invocations: map[string]int64{}, Records: map[string]int64{}, Sweeps: s.sweeps, DLQDepth: s.local.DeadLetterDepth()}}
	if s.cfg.Sim != nil {
		rep.Totals.Posts, rep.Totals.Gets, rep.Totals.Downloads = s.cfg.Sim.TotalPosts(), s.cfg.Sim.TotalGets(), s.cfg.Sim.FileGets()
		rep.Totals.GenaceJobs = len(s.cfg.Sim.Jobs())
	}
	for fn, st := range s.local.Stats() {
		rep.Totals.Invocations[fn] += st.Invocations
		rep.Totals.Records[fn] += st.Records
	}
	open, err := s.store.OpenReviews(ctx)
	if err != nil {
		return nil, err
	}
	reviews := map[string][]review.Record{}
	for _, r := range open {
		reviews[r.OperationID] = append(reviews[r.OperationID], r)
	}
	items := map[string]workload.Item{}
	for _, it := range s.cfg.Workload {
		items[it.OperationID] = it
	}
	for _, id := range s.operationIDs() {
		it := items[id]
		it.OperationID = id
		if why := s.api.why(id); why != "" {
			rep.Operations = append(rep.Operations, OpReport{OperationID: id, Scenario: string(it.Scenario), Model: it.Model, Refused: why})
			rep.Totals.Refused++
			continue
		}
		rec, err := s.store.Get(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			// Interrupted while seeding: never created, nothing sent.
			rep.Operations = append(rep.Operations, OpReport{OperationID: it.OperationID, Scenario: string(it.Scenario), Model: it.Model, NotCreated: true})
			rep.Totals.NotCreated++
			continue
		}
		if err != nil {
			return nil, err
		}
		op := OpReport{OperationID: rec.OperationID, Scenario: string(it.Scenario), Model: rec.Model, Phase: rec.Phase, Revision: rec.Revision,
			RemoteJobID: rec.RemoteJobID, Settlement: rec.Settlement, Posts: rec.Posts, Terminal: rec.Terminal()}
		if rec.Remote != nil {
			op.RemoteState = rec.Remote.State
			op.Credits = &rec.Remote.Credits
		}
		if s.cfg.Sim != nil {
			op.GenaceJobs = s.cfg.Sim.JobsForOperation(rec.OperationID)
		}
		for _, d := range rec.Deliveries {
			// A plain copy of each output for people to open; the pack
			// stays the durable one.
			a := Artifact{Path: filepath.Join(ArtifactDir(s.cfg.StateDir), filepath.FromSlash(d.Key)), SizeBytes: d.SizeBytes, SHA256: d.SHA256}
			if _, err := s.artifacts.Export(ctx, d.Key); err != nil {
				a.ExportError = err.Error()
			}
			op.Artifacts = append(op.Artifacts, a)
		}
		slices.SortFunc(op.Artifacts, func(a, b Artifact) int { return strings.Compare(a.Path, b.Path) })
		for _, r := range reviews[rec.OperationID] {
			op.Reviews = append(op.Reviews, ReviewRef{ID: r.ID, Recommended: r.Recommended, Reason: r.Reason, Category: r.ErrorCategory})
		}
		rep.Operations = append(rep.Operations, op)
		rep.Totals.Phases = addPhase(rep.Totals.Phases, rec.Phase)
	}
	return rep, nil
}

func addPhase(m map[operation.Phase]int, p operation.Phase) map[operation.Phase]int {
	if m == nil {
		m = map[operation.Phase]int{}
	}
	m[p]++
	return m
}

// localEvents is a local run's event sink: the events go to the run's
// events file, after the outputs a delivered event names are exported as
// plain files (so every path an event leads a consumer to exists when it
// reads the event), and are shown to Config.OnEvent.
type localEvents struct {
	file      *notify.File
	artifacts *localpack.Dir
	on        func(notify.Event)
}

// Publish implements notify.Sink.
func (l *localEvents) Publish(ctx context.Context, events []notify.Event) error {
	for _, ev := range events {
		for _, o := range ev.Detail.Outputs {
			if _, err := l.artifacts.Export(ctx, o.Key); err != nil {
				return fmt.Errorf("events: export %s: %w", o.Key, err)
			}
		}
	}
	if err := l.file.Publish(ctx, events); err != nil {
		return err
	}
	if l.on != nil {
		for _, ev := range events {
			l.on(ev)
		}
	}
	return nil
}
