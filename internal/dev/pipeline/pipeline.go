// Package pipeline runs the whole genjobs pipeline on one machine: the
// very handlers lambda.Start runs, fed by an embedded queue per template
// queue and DLQ through pollers that play the Lambda event source mapping,
// on the embedded store (or DynamoDB), against the Genace simulator (or
// another Genace), with outputs copied into a local directory.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/deliver"
	"github.com/genjobs/genjobs/internal/dev/eventsource"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/localqueue"
	"github.com/genjobs/genjobs/internal/dev/workload"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/submit"
	"github.com/genjobs/genjobs/internal/sweep"
	"github.com/genjobs/genjobs/internal/triage"
	"github.com/genjobs/genjobs/internal/worker"
)

// The queues, named as the template names them.
const (
	QueueDispatch = "genjobs-dispatch"
	QueueObserve  = "genjobs-observe"
	QueueDeliver  = "genjobs-deliver"
	dlqSuffix     = "-dlq"
	// MaxReceiveCount matches the template's redrive policies.
	MaxReceiveCount = 5
)

// Config describes one local run.
type Config struct {
	// StateDir holds the embedded store file and the artifacts. A run
	// starts it afresh and leaves it for `genjobs reviews|plan|replay|audit`.
	StateDir string
	Workload []workload.Item
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
	// Progress receives a status line every ProgressEvery (nil: none).
	Progress      io.Writer
	ProgressEvery time.Duration
	// Log receives the handlers' logs (nil: discarded).
	Log *slog.Logger
	// LongPoll and Accounting set the observation long poll and the
	// accounting budget (0: 10 s each, a local time scale).
	LongPoll   time.Duration
	Accounting time.Duration
}

// DBPath is the embedded store file in a state dir.
func DBPath(stateDir string) string { return filepath.Join(stateDir, "genjobs.db") }

// ArtifactDir is where delivered outputs go in a state dir.
func ArtifactDir(stateDir string) string { return filepath.Join(stateDir, "artifacts") }

// ReportPath is where a run keeps its JSON report.
func ReportPath(stateDir string) string { return filepath.Join(stateDir, "report.json") }

// sweepConfig runs the sweep on a local time scale.
func sweepConfig() sweep.Config {
	return sweep.Config{ClaimTimeout: time.Minute, OverdueAfter: 20 * time.Second}
}

// localPolicies keep the deployed shape (back-to-back long polls while the
// job is young, then backoff) on a local time scale.
func localPolicies(longPoll time.Duration) schedule.Policies {
	ps := schedule.DefaultPolicies()
	ps.Default.LongPoll = longPoll
	ps.Accounting = schedule.Backoff{Base: time.Second, Cap: 4 * time.Second, Multiplier: 2, Jitter: 0.2}
	return ps
}

// stack is one running pipeline.
type stack struct {
	cfg      Config
	clk      clock.Clock
	store    store.Store
	broker   *localqueue.Broker
	urls     map[string]string
	mappings map[string]*eventsource.Mapping
	sweeper  *sweep.Sweeper
	sweeps   int
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
		cfg.LongPoll = 10 * time.Second
	}
	if cfg.Accounting <= 0 {
		cfg.Accounting = 10 * time.Second
	}
	if len(cfg.Workload) == 0 {
		return nil, errors.New("local: the workload is empty")
	}
	s := &stack{cfg: cfg, clk: clock.Real{}, urls: map[string]string{}, mappings: map[string]*eventsource.Mapping{}}
	if err := s.openState(ctx); err != nil {
		return nil, err
	}
	defer s.store.Close()
	g, stopSim, err := s.genace()
	if err != nil {
		return nil, err
	}
	defer stopSim()
	if err := s.wire(g); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var wg sync.WaitGroup
	pollCtx, stopPolling := context.WithCancel(context.Background())
	for _, m := range s.mappings {
		wg.Add(1)
		go func(m *eventsource.Mapping) {
			defer wg.Done()
			_ = m.Run(pollCtx, 50*time.Millisecond)
		}(m)
	}
	if err := s.seed(runCtx); err != nil {
		stopPolling()
		wg.Wait()
		return nil, err
	}
	finished := s.wait(runCtx)
	stopPolling()
	wg.Wait()
	rep, err := s.report(context.Background(), time.Since(start), !finished)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	return rep, nil
}

func (s *stack) openState(ctx context.Context) error {
	if err := os.MkdirAll(s.cfg.StateDir, 0o755); err != nil {
		return fmt.Errorf("local: state dir: %w", err)
	}
	// A run starts afresh: the demo's operation ids repeat.
	for _, p := range []string{DBPath(s.cfg.StateDir), ArtifactDir(s.cfg.StateDir), ReportPath(s.cfg.StateDir)} {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("local: clear %s: %w", p, err)
		}
	}
	if s.cfg.Table != "" {
		client, err := store.NewDynamoClient(ctx)
		if err != nil {
			return err
		}
		if err := store.EnsureTable(ctx, client, s.cfg.Table); err != nil {
			return fmt.Errorf("local: table %s: %w", s.cfg.Table, err)
		}
		s.store = store.NewDynamo(client, s.cfg.Table)
		return nil
	}
	st, err := store.OpenBolt(DBPath(s.cfg.StateDir))
	if err != nil {
		return err
	}
	s.store = st
	return nil
}

func (s *stack) genace() (*genace.Client, func(), error) {
	url, key, stop := s.cfg.GenaceURL, s.cfg.GenaceKey, func() {}
	if s.cfg.Sim != nil {
		base, stopSim, err := s.cfg.Sim.Start("127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		url, stop = base, stopSim
	}
	c, err := genace.New(url, key, &http.Client{Transport: http.DefaultTransport})
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("local: genace client: %w", err)
	}
	return c, stop, nil
}

// wire builds the queues, the handlers and their pollers as the template
// wires the functions.
func (s *stack) wire(g *genace.Client) error {
	s.broker = localqueue.New(s.clk)
	visibility := map[string]time.Duration{QueueDispatch: 6 * time.Minute, QueueObserve: 6 * time.Minute, QueueDeliver: 6 * time.Minute}
	for _, q := range []string{QueueDispatch, QueueObserve, QueueDeliver} {
		dlqURL, err := s.broker.Create(q+dlqSuffix, localqueue.Config{Visibility: time.Minute})
		if err != nil {
			return err
		}
		s.urls[q+dlqSuffix] = dlqURL
		url, err := s.broker.Create(q, localqueue.Config{Visibility: visibility[q], MaxReceiveCount: MaxReceiveCount, DeadLetter: q + dlqSuffix})
		if err != nil {
			return err
		}
		s.urls[q] = url
	}
	disp, err := schedule.NewDispatcher(schedule.Config{
		Queues: map[message.Action]schedule.Target{
			message.ActionSubmitGeneration:  {URL: s.urls[QueueDispatch]},
			message.ActionObserveGeneration: {URL: s.urls[QueueObserve]},
			message.ActionDeliverArtifacts:  {URL: s.urls[QueueDeliver]},
		},
		// The embedded queue takes any delay, so no Scheduler is needed.
		MaxQueueDelay: 365 * 24 * time.Hour,
	}, s.broker, nil, s.clk)
	if err != nil {
		return err
	}
	dir, err := artifact.NewDir(ArtifactDir(s.cfg.StateDir))
	if err != nil {
		return err
	}
	delays := schedule.NewObservation(localPolicies(s.cfg.LongPoll))
	delays.DefaultBudgets = operation.Budgets{MaxObservations: 200, Polling: 30 * time.Minute, Accounting: s.cfg.Accounting}
	m := func(fn string) *metrics.Emitter { return metrics.New(io.Discard, fn, s.clk) }
	log := s.cfg.Log
	sub := submit.New(submit.Deps{Store: s.store, Genace: g, Extender: s.broker, Sender: disp, Clock: s.clk, Log: log.With("function", "submit"), Metrics: m("submit")}, submit.Config{QueueURL: s.urls[QueueDispatch], Visibility: visibility[QueueDispatch]})
	obs := observe.New(observe.Deps{Store: s.store, Genace: g, Delays: delays, Extender: s.broker, Sender: disp, Clock: s.clk, Log: log.With("function", "observe"), Metrics: m("observe")}, observe.Config{QueueURL: s.urls[QueueObserve], Visibility: visibility[QueueObserve]})
	del := deliver.New(deliver.Deps{Store: s.store, Genace: g, Artifacts: dir, Extender: s.broker, Sender: disp, Clock: s.clk, Log: log.With("function", "deliver"), Metrics: m("deliver")}, deliver.Config{QueueURL: s.urls[QueueDeliver], Visibility: visibility[QueueDeliver]})
	tri := triage.New(triage.Deps{Store: s.store, Clock: s.clk, Log: log.With("function", "triage"), Metrics: m("triage")}, triage.Config{Concurrency: 4})
	s.sweeper = sweep.New(sweep.Deps{Store: s.store, Sender: disp, Clock: s.clk, Log: log.With("function", "sweep"), Metrics: m("sweep")}, sweepConfig())
	add := func(queue string, h eventsource.Handler, workers int) {
		s.mappings[queue] = &eventsource.Mapping{Broker: s.broker, Queue: s.urls[queue], Handler: h, BatchSize: 10, Timeout: time.Minute, Clock: s.clk, Region: "local", Workers: workers}
	}
	add(QueueDispatch, sub.Handle, 2)
	// Observations hold long polls: enough workers that one slow render
	// does not hold up the others.
	add(QueueObserve, obs.Handle, 16)
	add(QueueDeliver, del.Handle, 2)
	for _, q := range []string{QueueDispatch, QueueObserve, QueueDeliver} {
		add(q+dlqSuffix, tri.Handle, 1)
	}
	return nil
}

// seed creates the operations and dispatches them, scripting the demo's
// scenarios into the simulator.
func (s *stack) seed(ctx context.Context) error {
	now := s.clk.Now()
	for _, it := range s.cfg.Workload {
		rec := operation.Record{
			OperationID: it.OperationID, SpecRevision: 1, Phase: operation.PhasePrepared, UserID: it.UserID, Model: it.Model,
			Input: it.Input, Authorized: true, AuthorizedSpecRevision: 1, BudgetCredits: it.BudgetCredits,
			EstimatedCredits: s.cfg.Prices[it.Model], Timestamps: operation.Timestamps{Created: now, Updated: now},
			// The dispatch this run owes is recorded with the record, so the
			// sweep re-sends it if the message is lost or goes stale.
			Schedule: &operation.NextAction{Action: string(message.ActionSubmitGeneration), Due: now},
		}
		if s.cfg.Sim != nil {
			switch it.Scenario {
			case workload.ScenarioSubmissionFailed:
				s.cfg.Sim.ScriptPOST(it.OperationID, genacesim.SubmissionFailed(502))
			case workload.ScenarioLostResponse:
				s.cfg.Sim.ScriptPOST(it.OperationID, genacesim.AcceptThenDrop())
			}
		}
		saved, err := s.store.Create(ctx, rec)
		if err != nil {
			return fmt.Errorf("local: create %s: %w", it.OperationID, err)
		}
		body, err := message.Envelope{Action: message.ActionSubmitGeneration, OperationID: saved.OperationID, ExpectedRevision: saved.Revision}.Encode()
		if err != nil {
			return err
		}
		if _, err := s.broker.Send(ctx, s.urls[QueueDispatch], body, 0); err != nil {
			return err
		}
	}
	return nil
}

// settled reports whether automation is done with an operation.
func settled(rec *operation.Record) bool { return rec.Terminal() || worker.NeedsReview(rec) }

// wait drives the demo's operator-side events (reconcile-jobs --fail),
// the sweep on a timer and the progress display, until every operation is
// settled or the context ends. It reports whether all settled.
func (s *stack) wait(ctx context.Context) bool {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	reconciled := map[string]bool{}
	lastProgress, lastSweep, lastLine := time.Time{}, time.Now(), ""
	for {
		recs := s.records(ctx)
		all := len(recs) == len(s.cfg.Workload)
		for _, it := range s.cfg.Workload {
			rec, ok := recs[it.OperationID]
			if !ok || !settled(&rec) {
				all = false
			}
			if ok && it.Scenario == workload.ScenarioReconcileFail && s.cfg.Sim != nil && rec.RemoteJobID != "" && !reconciled[it.OperationID] {
				// Genace's operators fail the job without a refund.
				s.cfg.Sim.Reconcile(rec.RemoteJobID)
				reconciled[it.OperationID] = true
			}
		}
		if s.cfg.Progress != nil && (time.Since(lastProgress) >= s.cfg.ProgressEvery || all) {
			// A line when something moved, and a heartbeat every 5 s.
			if line := s.progressLine(recs); line != lastLine || time.Since(lastProgress) >= 5*time.Second {
				fmt.Fprintf(s.cfg.Progress, "[%s] %s\n", time.Now().Format("15:04:05"), line)
				lastProgress, lastLine = time.Now(), line
			}
		}
		if all {
			return true
		}
		if time.Since(lastSweep) >= 5*time.Second {
			if _, err := s.sweeper.Sweep(ctx); err == nil {
				s.sweeps++
			}
			lastSweep = time.Now()
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

func (s *stack) records(ctx context.Context) map[string]operation.Record {
	out := make(map[string]operation.Record, len(s.cfg.Workload))
	for _, it := range s.cfg.Workload {
		if rec, err := s.store.Get(ctx, it.OperationID); err == nil {
			out[it.OperationID] = rec
		}
	}
	return out
}

func (s *stack) dlqDepth() int {
	n := 0
	for _, q := range []string{QueueDispatch, QueueObserve, QueueDeliver} {
		d := s.broker.Depth(s.urls[q+dlqSuffix])
		n += d.Visible + d.InFlight + d.Delayed
	}
	return n
}

func (s *stack) progressLine(recs map[string]operation.Record) string {
	counts := map[operation.Phase]int{}
	for _, r := range recs {
		counts[r.Phase]++
	}
	line := ""
	for _, p := range operation.Phases {
		if counts[p] > 0 {
			line += fmt.Sprintf("%s %d  ", p, counts[p])
		}
	}
	posts, gets := "-", "-"
	if s.cfg.Sim != nil {
		posts, gets = fmt.Sprint(s.cfg.Sim.TotalPosts()), fmt.Sprint(s.cfg.Sim.TotalGets())
	}
	return fmt.Sprintf("%s| POSTs %s  GETs %s  DLQ %d", line, posts, gets, s.dlqDepth())
}

// Names of the functions whose invocations the report counts.
func functionOf(queue string) string {
	switch queue {
	case QueueDispatch:
		return "submit"
	case QueueObserve:
		return "observe"
	case QueueDeliver:
		return "deliver"
	}
	return "triage"
}

func (s *stack) report(ctx context.Context, elapsed time.Duration, timedOut bool) (*Report, error) {
	rep := &Report{Elapsed: elapsed.Round(time.Millisecond).String(), TimedOut: timedOut, StateDir: s.cfg.StateDir,
		Totals: Totals{Invocations: map[string]int64{}, Records: map[string]int64{}, Sweeps: s.sweeps, DLQDepth: s.dlqDepth()}}
	if s.cfg.Sim != nil {
		rep.Totals.Posts, rep.Totals.Gets, rep.Totals.Downloads = s.cfg.Sim.TotalPosts(), s.cfg.Sim.TotalGets(), s.cfg.Sim.FileGets()
		rep.Totals.GenaceJobs = len(s.cfg.Sim.Jobs())
	}
	for q, m := range s.mappings {
		st := m.Stats()
		rep.Totals.Invocations[functionOf(q)] += st.Invocations
		rep.Totals.Records[functionOf(q)] += st.Records
	}
	open, err := s.store.OpenReviews(ctx)
	if err != nil {
		return nil, err
	}
	reviews := map[string][]review.Record{}
	for _, r := range open {
		reviews[r.OperationID] = append(reviews[r.OperationID], r)
	}
	for _, it := range s.cfg.Workload {
		rec, err := s.store.Get(ctx, it.OperationID)
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
			op.Artifacts = append(op.Artifacts, Artifact{Path: filepath.Join(ArtifactDir(s.cfg.StateDir), filepath.FromSlash(d.Key)), SizeBytes: d.SizeBytes, SHA256: d.SHA256})
		}
		sort.Slice(op.Artifacts, func(i, j int) bool { return op.Artifacts[i].Path < op.Artifacts[j].Path })
		for _, r := range reviews[rec.OperationID] {
			op.Reviews = append(op.Reviews, ReviewRef{ID: r.ID, Recommended: r.Recommended, Reason: r.Reason})
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
