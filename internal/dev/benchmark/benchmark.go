package benchmark

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/bolt"
)

// Options are `genjobs bench`'s flags.
type Options struct {
	// Out is the folder results.md and observation.png go to.
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
	// Progress receives a line per step (nil: none).
	Progress io.Writer
}

// Files the benchmark writes under Options.Out.
const (
	ResultsFile = "results.md"
	PlotFile    = "observation.png"
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
	// Workload, Overheads, Prices and Functions are the model's inputs.
	Workload  Workload
	Overheads Overheads
	Prices    Prices
	Functions Functions
	// Real, Variants, Fixed and Backoff are the model's outcomes: the
	// default policy, the same with other back-to-back windows, and the
	// two plain pollers. Batching is the default policy with a 1 s
	// batching window on the observe queue's event source mapping;
	// Unbounded is the back-to-back window that runs into the
	// observation budget.
	Real, Fixed, Backoff, Batching, Unbounded Outcome
	Variants                                  []Outcome
	// VariantImmediates are the Variants' back-to-back windows.
	VariantImmediates []time.Duration
	// Count is the pipeline run the per-action requests come from.
	Count *PipelineResult
	// PerRender holds genjobs' requests per render by strategy name, and
	// StepFunctions the Step Functions poller's.
	PerRender     map[string]Requests
	StepFunctions Requests
	// Throughput holds the instant-render runs.
	Throughput []ThroughputRun
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

// variantImmediates are the back-to-back windows the report compares
// with the default policy's (which is left out of them).
var variantImmediates = []time.Duration{15 * time.Minute, 30 * time.Minute, time.Hour}

// batchingWindow is the observe mapping's MaximumBatchingWindowInSeconds
// the sensitivity row tries.
const batchingWindow = time.Second

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
	res := &Results{Options: opts, Workload: DefaultWorkload(), Overheads: DefaultOverheads(), Prices: ListPrices(), Functions: DefaultFunctions()}
	res.Workload.Renders = opts.Renders

	opts.progress("model: %d renders, seed %d", opts.Renders, opts.Seed)
	res.model()

	opts.progress("pipeline: counting AWS requests per action")
	if err := res.count(ctx); err != nil {
		return nil, err
	}
	res.price()

	res.Load = map[string]string{"throughput": loadAverage()}
	opts.progress("pipeline: throughput with instant renders (load average %s)", res.Load["throughput"])
	if err := res.throughput(ctx); err != nil {
		return nil, err
	}

	switch root, err := coldStartRoot(opts.Root); {
	case opts.Quick:
		res.ColdStartSkipped = "--quick"
	case err != nil:
		res.ColdStartSkipped = err.Error()
	default:
		res.Load["cold starts"] = loadAverage()
		opts.progress("cold starts: building the bootstraps and starting them under the emulator (load average %s)", res.Load["cold starts"])
		cs, err := MeasureColdStarts(ctx, ColdStartConfig{Root: root, Functions: []string{"submit", "observe", "deliver", "triage", "sweep"},
			Invoke: []string{"submit", "observe", "deliver", "triage"}, Starts: 5})
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
	var png bytes.Buffer
	if err := WritePlot(&png, res.Plotted()); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(opts.Out, PlotFile), png.Bytes(), 0o644); err != nil {
		return nil, err
	}
	if _, err := stdout.Write(md.Bytes()); err != nil {
		return nil, err
	}
	opts.progress("wrote %s and %s in %s", filepath.Join(opts.Out, ResultsFile), filepath.Join(opts.Out, PlotFile), res.Elapsed.Round(time.Second))
	return res, nil
}

// Plotted are the outcomes the figure shows.
func (r *Results) Plotted() []Outcome {
	out := []Outcome{r.Real}
	if len(r.Variants) > 0 {
		out = append(out, r.Variants[0])
	}
	return append(out, r.Fixed, r.Backoff)
}

// model runs every strategy over the same seeded workload.
func (r *Results) model() {
	times := r.Workload.Sample(r.Options.Seed)
	seed := r.Options.Seed
	real := schedule.DefaultPolicies().Default
	r.Real = Simulate(NewGenjobs("genjobs, default policy (Immediate "+fmtDuration(real.Immediate)+")", real, seed), times, r.Workload.QueueFor, r.Overheads)
	r.Variants, r.VariantImmediates = nil, nil
	for _, imm := range variantImmediates {
		if imm == real.Immediate {
			continue
		}
		p := real
		p.Immediate = imm
		r.Variants = append(r.Variants, Simulate(NewGenjobs("genjobs, Immediate "+fmtDuration(imm), p, seed), times, r.Workload.QueueFor, r.Overheads))
		r.VariantImmediates = append(r.VariantImmediates, imm)
	}
	unbounded := real
	unbounded.Immediate = operation.DefaultBudgets.Polling
	r.Unbounded = Simulate(NewGenjobs("genjobs, Immediate "+fmtDuration(unbounded.Immediate), unbounded, seed), times, r.Workload.QueueFor, r.Overheads)
	r.Fixed = Simulate(Fixed{Interval: 5 * time.Second}, times, r.Workload.QueueFor, r.Overheads)
	r.Backoff = Simulate(Exponential{Base: time.Second, Cap: time.Minute}, times, r.Workload.QueueFor, r.Overheads)
	ov := r.Overheads
	ov.SQSLatency += batchingWindow
	r.Batching = Simulate(NewGenjobs(fmt.Sprintf("genjobs, default policy, %s batching window on observe", fmtDuration(batchingWindow)), real, seed), times, r.Workload.QueueFor, ov)
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

// price turns counts and model into requests per render.
func (r *Results) price() {
	r.PerRender = map[string]Requests{}
	for _, o := range append([]Outcome{r.Real, r.Fixed, r.Backoff}, r.Variants...) {
		r.PerRender[o.Strategy] = PerRender(r.Count, o, r.Functions)
	}
	r.StepFunctions = StepFunctionsPerRender(r.Count, r.Fixed, r.Functions, r.Overheads)
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
	n, repeats := 2000, 3
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
	}
	noSync := func(path string) (store.Store, error) {
		return bolt.OpenWith(path, bolt.Options{NoSync: true})
	}
	runs := []run{
		{"disk (bbolt group commit, each commit fsync'd), template concurrency", "", 1, n, instantPolicy(), true, repeats, nil},
		{"tmpfs (fsync ≈ free), template concurrency", tmpfs, 1, n, instantPolicy(), true, repeats, nil},
		{"disk, bbolt NoSync (the artifacts still fsync), template concurrency", "", 1, n, instantPolicy(), false, 1, noSync},
		{"disk, 2× pollers", "", 2, n, instantPolicy(), false, 1, nil},
		{"tmpfs, 2× pollers", tmpfs, 2, n, instantPolicy(), false, 1, nil},
		{"disk, template concurrency, default policy (25 s long polls)", "", 1, 200, schedule.DefaultPolicies(), false, 1, nil},
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
			res, err := RunPipeline(ctx, PipelineConfig{Operations: rn.ops, Dir: dir, Policies: rn.ps, WorkerScale: rn.scale, Open: rn.open, Timeout: 3 * time.Minute})
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

// coldStartRoot is the module to build the functions from: root, or the
// one around the working directory; the go command must be there too.
func coldStartRoot(root string) (string, error) {
	if _, err := exec.LookPath("go"); err != nil {
		return "", errors.New("no go command to build the functions")
	}
	if root != "" {
		return root, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", fmt.Errorf("the functions' sources are not here: %w", err)
	}
	if !isDir(filepath.Join(root, "functions")) {
		return "", errors.New("the functions' sources are not here (no functions/ folder)")
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
