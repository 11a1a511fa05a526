package benchmark

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/dev/faultsim"
	"github.com/genjobs/genjobs/internal/dev/modroot"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/bolt"
)

// Options are `genjobs bench`'s flags.
type Options struct {
	// Out is the folder results.md and the plots go to.
	Out string
	// Renders is the model workload's size.
	Renders int
	// Seed makes the model deterministic.
	Seed uint64
	// Quick shrinks the measurements (small pipeline runs, no cold
	// starts) for tests; the model runs in full.
	Quick bool
	// Root is the module root, for building the functions ("" finds it
	// from the working directory).
	Root string
	// ScaleSim is how many renders in flight the virtual-time simulation
	// behind the scale table runs (0: DefaultScaleSim; --quick: 500).
	ScaleSim int
	// Progress receives a line per step (nil: none).
	Progress io.Writer
}

// Files the benchmark writes under Options.Out.
const (
	ResultsFile     = "results.md"
	PlotFile        = "observation.png"
	CostLatencyFile = "cost-latency.png"
	GETsFloorFile   = "gets-floor.png"
)

// ThroughputRun is one measured pipeline run with instant renders.
type ThroughputRun struct {
	// Name says what was run: store medium, pollers, policy.
	Name string
	// Result is the best of Runs measurements (the most operations per
	// second); Rates are every measurement's operations per second, in
	// the order they ran.
	Result *PipelineResult
	Runs   int
	Rates  []float64
	// Skipped says why the run did not happen, if it did not.
	Skipped string
}

// OpsPerSecond is the run's delivered operations per second.
func (t ThroughputRun) OpsPerSecond() float64 {
	if t.Result == nil || t.Result.Elapsed <= 0 {
		return 0
	}
	return float64(t.Result.Delivered) / t.Result.Elapsed.Seconds()
}

// ActionsPerSecond is the run's handler actions per second.
func (t ThroughputRun) ActionsPerSecond() float64 {
	if t.Result == nil || t.Result.Elapsed <= 0 {
		return 0
	}
	return float64(t.Result.Actions()) / t.Result.Elapsed.Seconds()
}

// Utilisation is how many CPUs the process kept busy on average.
func (t ThroughputRun) Utilisation() float64 {
	if t.Result == nil || t.Result.Elapsed <= 0 {
		return 0
	}
	return t.Result.CPU.Seconds() / t.Result.Elapsed.Seconds()
}

// CPUPerAction is the process's CPU time per handler action.
func (t ThroughputRun) CPUPerAction() time.Duration {
	if t.Result == nil || t.Result.Actions() == 0 {
		return 0
	}
	return t.Result.CPU / time.Duration(t.Result.Actions())
}

// Results are every figure of one benchmark run.
type Results struct {
	// Options are the run's options, with defaults filled in.
	Options Options
	// Workload, Latencies, Prices and Functions are the model's inputs.
	Workload  Workload
	Latencies Latencies
	Prices    Prices
	Functions Functions
	// Genjobs is the observe handler's outcome, NoOverlap the same
	// without overlapping polls, Floor the floor's.
	Genjobs, NoOverlap, Floor Outcome
	// Standard and PerPoll are Step Functions loops calling the observe
	// Lambda for a chain and for a single poll per invocation (Express
	// runs the chain one); Fixed5 the fixed 5 s poller and FixedMatch the
	// longest interval whose p99 reaches genjobs' (or 1 s, when none
	// does: MatchReached false).
	Standard, PerPoll, Fixed5, FixedMatch Outcome
	MatchReached                          bool
	// Sensitivity holds genjobs over the round-trip × pickup grid.
	Sensitivity []Sensitivity
	// Count is the pipeline run the per-action requests and the batch
	// occupancy come from.
	Count *PipelineResult
	// Designs are the priced designs, side by side; Designs[0] is
	// genjobs, the last one the floor.
	Designs []Design
	// Throughput holds the instant-render runs.
	Throughput []ThroughputRun
	// Scale is the scale table on paper, ScaleSim the simulation behind
	// it.
	Scale    []ScaleRow
	ScaleSim *faultsim.Result
	// Local is the real-time `genjobs local` run, or LocalSkipped says
	// why there is none.
	Local        *LocalRun
	LocalSkipped string
	// ColdStarts holds the functions' sizes and first invokes, or
	// ColdStartSkipped says why there are none.
	ColdStarts       []ColdStart
	ColdStartSkipped string
	// Load is the machine's 1-minute load average before the throughput
	// runs and before the cold starts ("" where unknown): other work on
	// the machine inflates those measurements.
	Load map[string]string
	// Elapsed is the whole benchmark's wall time.
	Elapsed time.Duration
}

// Sensitivity is genjobs' outcome at one round-trip and pickup median.
type Sensitivity struct {
	RoundTrip, Pickup time.Duration
	Outcome           Outcome
}

// Design is one observation design priced per render: Low at one record
// per invocation, Busy at the counting run's batch occupancy (the same
// for designs that do not batch).
type Design struct {
	Name      string
	Outcome   Outcome
	Low, Busy Requests
}

// Grid of the sensitivity table.
var (
	sensitivityRTT    = []time.Duration{50 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond}
	sensitivityPickup = []time.Duration{20 * time.Millisecond, 500 * time.Millisecond, time.Second}
)

// The target's conditions: detection p99 at this round trip and pickup.
const (
	targetRTT    = 200 * time.Millisecond
	targetPickup = 500 * time.Millisecond
)

func (o Options) progress(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "bench: "+format+"\n", args...)
	}
}

// Run runs the benchmark, writes Options.Out/results.md and
// Options.Out/observation.png, and prints the Markdown table to stdout.
func Run(ctx context.Context, opts Options, stdout io.Writer) (*Results, error) {
	begin := time.Now()
	if opts.Renders <= 0 {
		opts.Renders = DefaultWorkload().Renders
	}
	if opts.Out == "" {
		opts.Out = "bench"
	}
	if opts.Root == "" {
		root, err := modroot.Find("")
		if err != nil {
			return nil, fmt.Errorf("run it inside a clone of genjobs, whose template.yaml gives the functions' memory: %w", err)
		}
		opts.Root = root
	}
	fns, err := TemplateFunctions(opts.Root)
	if err != nil {
		return nil, err
	}
	res := &Results{Options: opts, Workload: DefaultWorkload(), Latencies: DefaultLatencies(), Prices: ListPrices(), Functions: fns}
	res.Workload.Renders = opts.Renders

	opts.progress("model: %d renders, seed %d", opts.Renders, opts.Seed)
	res.model()

	opts.progress("pipeline: counting AWS requests per action")
	if err := res.count(ctx); err != nil {
		return nil, err
	}
	res.price()

	res.Scale = ScaleTable(DefaultScaleInputs(res.Functions, res.Designs[0].Low), scaleInFlight...)
	n := cmp.Or(opts.ScaleSim, DefaultScaleSim)
	if opts.Quick {
		n = 500
	}
	opts.progress("scale: the virtual-time simulation with %d renders in flight", n)
	if res.ScaleSim, err = RunScaleSimulation(ctx, n, opts.Seed, nil); err != nil {
		return nil, fmt.Errorf("scale simulation: %w", err)
	}

	res.Load = map[string]string{"throughput": loadAverage()}
	opts.progress("pipeline: throughput with instant renders (load average %s)", res.Load["throughput"])
	if err := res.throughput(ctx); err != nil {
		return nil, err
	}

	if opts.Quick {
		res.LocalSkipped = "--quick"
	} else {
		opts.progress("real time: %d renders of %s through genjobs local's defaults", localRenders, localQueueFor+localRunFor)
		dir, err := TempDir("")
		if err != nil {
			return nil, err
		}
		l, err := MeasureLocal(ctx, localRenders, dir)
		os.RemoveAll(dir)
		if err != nil {
			return nil, err
		}
		res.Local = &l
	}

	switch root, err := coldStartRoot(opts.Root); {
	case opts.Quick:
		res.ColdStartSkipped = "--quick"
	case err != nil:
		res.ColdStartSkipped = err.Error()
	default:
		res.Load["cold starts"] = loadAverage()
		opts.progress("cold starts: building the bootstraps and starting them under the emulator (load average %s)", res.Load["cold starts"])
		// Every function; the SQS-fed ones are invoked with an empty batch.
		var fns, sqsFed []string
		for _, f := range topology.Stack.Functions {
			fns = append(fns, f.Name)
			if len(f.Mappings) > 0 {
				sqsFed = append(sqsFed, f.Name)
			}
		}
		cs, err := MeasureColdStarts(ctx, ColdStartConfig{Root: root, Functions: fns, Invoke: sqsFed, Starts: 5})
		if err != nil {
			return nil, err
		}
		res.ColdStarts = cs
	}
	if res.ColdStartSkipped != "" {
		opts.progress("cold starts: skipped (%s)", res.ColdStartSkipped)
	}
	res.Elapsed = time.Since(begin)

	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	var md bytes.Buffer
	res.WriteMarkdown(&md)
	if err := os.WriteFile(filepath.Join(opts.Out, ResultsFile), md.Bytes(), 0o644); err != nil {
		return nil, err
	}
	for _, p := range []struct {
		file string
		draw func(io.Writer) error
	}{
		{PlotFile, func(w io.Writer) error { return WritePlot(w, res.Plotted()) }},
		{CostLatencyFile, func(w io.Writer) error { return WriteCostLatency(w, res.CostPoints()) }},
		{GETsFloorFile, func(w io.Writer) error { return WriteGETsFloor(w, res.Genjobs, res.Workload.QueueFor) }},
	} {
		var png bytes.Buffer
		if err := p.draw(&png); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(opts.Out, p.file), png.Bytes(), 0o644); err != nil {
			return nil, err
		}
	}
	if _, err := stdout.Write(md.Bytes()); err != nil {
		return nil, err
	}
	opts.progress("wrote %s and the plots in %s", filepath.Join(opts.Out, ResultsFile), res.Elapsed.Round(time.Second))
	return res, nil
}

// Plotted are the outcomes the detection figure shows.
func (r *Results) Plotted() []Outcome {
	return []Outcome{r.Genjobs, r.NoOverlap, r.Standard, r.Fixed5}
}

// CostPoints are the designs' cost per 1,000 renders (at one record per
// invocation) against their p99 detection latency.
func (r *Results) CostPoints() []CostPoint {
	out := make([]CostPoint, len(r.Designs))
	for i, d := range r.Designs {
		out[i] = CostPoint{Name: d.Name, Dollars: r.per1000(d.Low), P99: d.Outcome.P99}
	}
	return out
}

// matchIntervals are the fixed pollers' intervals tried against genjobs'
// p99, longest first: SQS delays come in whole seconds.
var matchIntervals = []time.Duration{30 * time.Second, 10 * time.Second, 5 * time.Second, 2 * time.Second, time.Second}

// model plays every design over the same seeded workload and latencies.
func (r *Results) model() {
	times := r.Workload.Sample(r.Options.Seed)
	seed, q, lat := r.Options.Seed, r.Workload.QueueFor, r.Latencies
	g := GenjobsChains()
	r.Genjobs = Simulate(g, times, q, lat, seed)
	no := g
	no.Label, no.Overlap = "genjobs without overlap", 0
	r.NoOverlap = Simulate(no, times, q, lat, seed)
	r.Floor = Floor(times, q, lat, seed)
	sfn := g
	sfn.Label, sfn.Orchestrated = "Step Functions loop, a chain per task", true
	r.Standard = Simulate(sfn, times, q, lat, seed)
	poll := sfn
	poll.Label, poll.Chain = "Step Functions loop, one poll per task", genace.MaxWait
	r.PerPoll = Simulate(poll, times, q, lat, seed)
	r.Fixed5 = Simulate(Fixed{Interval: 5 * time.Second}, times, q, lat, seed)
	r.MatchReached = false
	for _, iv := range matchIntervals {
		o := Simulate(Fixed{Interval: iv}, times, q, lat, seed)
		r.FixedMatch = o
		if o.P99 <= r.Genjobs.P99 {
			r.MatchReached = true
			break
		}
	}
	r.Sensitivity = nil
	for _, rtt := range sensitivityRTT {
		for _, pick := range sensitivityPickup {
			l := lat
			l.RoundTrip.Median, l.Pickup.Median = rtt, pick
			r.Sensitivity = append(r.Sensitivity, Sensitivity{RoundTrip: rtt, Pickup: pick, Outcome: Simulate(g, times, q, l, seed)})
		}
	}
}

// AtTarget is genjobs' outcome at the target's round trip and pickup.
func (r *Results) AtTarget() (Outcome, bool) {
	for _, s := range r.Sensitivity {
		if s.RoundTrip == targetRTT && s.Pickup == targetPickup {
			return s.Outcome, true
		}
	}
	return Outcome{}, false
}

// The counting run's render: queued long enough that the first long poll
// surely arrives before the job runs, even on a slow machine.
const (
	countQueueFor = time.Second
	countRunFor   = time.Second
)

// count runs the pipeline on short renders (queued then running, so each
// render has one observation that finds it active and one that finds it
// finished), trickling the dispatches so that actions come one per batch
// as at low traffic.
func (r *Results) count(ctx context.Context) error {
	n := 200
	if r.Options.Quick {
		n = 40
	}
	dir, err := TempDir("")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	r.Count, err = RunPipeline(ctx, PipelineConfig{Operations: n, QueueFor: countQueueFor, RunFor: countRunFor,
		Dir: dir, Spacing: 5 * time.Millisecond, Timeout: 2 * time.Minute})
	if err != nil {
		return fmt.Errorf("counting run: %w", err)
	}
	return nil
}

// price turns counts and model into requests per render, design by
// design.
func (r *Results) price() {
	pr, fns, occ := r.Count, r.Functions, r.Count.Measured()
	through := func(o Outcome) Design {
		return Design{Name: o.Strategy, Outcome: o, Low: PerRender(pr, o, fns, OneRecord), Busy: PerRender(pr, o, fns, occ)}
	}
	same := func(name string, o Outcome, req Requests) Design {
		return Design{Name: name, Outcome: o, Low: req, Busy: req}
	}
	match := "fixed poller reaching genjobs' p99: " + r.FixedMatch.Strategy
	if !r.MatchReached {
		match = "fixed poller at SQS's shortest delay (none reaches genjobs' p99): " + r.FixedMatch.Strategy
	}
	fixedMatch := through(r.FixedMatch)
	fixedMatch.Name = match
	times := r.Workload.Sample(r.Options.Seed)
	r.Designs = []Design{
		through(r.Genjobs),
		same("Step Functions Standard, a 4 min chain per task", r.Standard, StandardPerRender(pr, r.Standard, fns)),
		same("Step Functions Standard, one 30 s poll per task", r.PerPoll, StandardPerRender(pr, r.PerPoll, fns)),
		same("Step Functions Express, a 4 min chain per execution", r.Standard, ExpressPerRender(pr, r.Standard, fns)),
		through(r.Fixed5),
		fixedMatch,
		same("floor", r.Floor, FloorPerRender(times, fns)),
	}
}

// instantPolicy reads at once: with renders that finish on acceptance
// there is nothing to wait for, and it measures the handlers rather than
// Genace's hold.
func instantPolicy() schedule.Policies {
	ps := schedule.DefaultPolicies()
	ps.Default = schedule.Policy{Base: time.Second, Cap: time.Minute, Multiplier: 2, Jitter: 0.2}
	return ps
}

// tmpfs is where the store goes for the runs without a real fsync.
const tmpfs = "/dev/shm"

func (r *Results) throughput(ctx context.Context) error {
	// Five rounds: on a 2-core machine shared with other work a single
	// run swings by a fifth either way, and the best of five is close to
	// what the machine does unloaded.
	n, repeats := 2000, 5
	if r.Options.Quick {
		n, repeats = 200, 1
	}
	type run struct {
		name    string
		parent  string
		scale   int
		ops     int
		ps      schedule.Policies
		quickly bool
		repeats int
		open    func(string) (store.Store, error)
		keep    bool // GOMAXPROCS not raised
	}
	noSync := func(path string) (store.Store, error) {
		return bolt.OpenWith(path, bolt.Options{NoSync: true})
	}
	runs := []run{
		{"disk (bbolt group commit, each commit fsync'd), template concurrency", "", 1, n, instantPolicy(), true, repeats, nil, false},
		{"tmpfs (fsync ≈ free), template concurrency", tmpfs, 1, n, instantPolicy(), true, repeats, nil, false},
		{"disk, bbolt NoSync (the artifacts still fsync), template concurrency", "", 1, n, instantPolicy(), false, 1, noSync, false},
		{"disk, 2× pollers", "", 2, n, instantPolicy(), false, 1, nil, false},
		{"tmpfs, 2× pollers", tmpfs, 2, n, instantPolicy(), false, 1, nil, false},
		{"disk, template concurrency, default policy (chained 30 s long polls)", "", 1, 200, schedule.DefaultPolicies(), false, 1, nil, false},
		{"disk, template concurrency, GOMAXPROCS not raised (the CPUs only)", "", 1, n, instantPolicy(), false, repeats, nil, true},
	}
	r.Throughput = make([]ThroughputRun, len(runs))
	for i, rn := range runs {
		t := &r.Throughput[i]
		t.Name = rn.name
		switch {
		case r.Options.Quick && !rn.quickly:
			t.Skipped = "--quick"
		case rn.parent != "" && !isDir(rn.parent):
			t.Skipped = rn.parent + " not available"
		}
	}
	// The best of a few runs: other work on a shared machine only ever
	// slows a run down. Round by round, so that the disk and tmpfs runs
	// whose ratio is a target alternate and share the machine's mood.
	for round := range repeats {
		for i, rn := range runs {
			t := &r.Throughput[i]
			if t.Skipped != "" || round >= rn.repeats {
				continue
			}
			dir, err := TempDir(rn.parent)
			if err != nil {
				return err
			}
			r.Options.progress("  %s: %d operations", rn.name, rn.ops)
			res, err := RunPipeline(ctx, PipelineConfig{Operations: rn.ops, Dir: dir, Policies: rn.ps, WorkerScale: rn.scale, Open: rn.open, KeepProcs: rn.keep, Timeout: 3 * time.Minute})
			os.RemoveAll(dir)
			if err != nil {
				return fmt.Errorf("throughput %s: %w", rn.name, err)
			}
			rate := (ThroughputRun{Result: res}).OpsPerSecond()
			t.Runs++
			t.Rates = append(t.Rates, rate)
			if t.Result == nil || rate > t.OpsPerSecond() {
				t.Result = res
			}
		}
	}
	return nil
}

// coldStartRoot is the module to build the functions from (Run has found
// it): usable when the go command is here too.
func coldStartRoot(root string) (string, error) {
	if _, err := exec.LookPath("go"); err != nil {
		return "", errors.New("no go command to build the functions")
	}
	return root, nil
}

// loadAverage is the 1-minute load average, where /proc tells it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return ""
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
