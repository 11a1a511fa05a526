// Package benchmark produces genjobs' figures measured on the real code
// (`genjobs bench`, `make bench`): AWS requests per render counted on the
// real handlers, throughput of the local pipeline, a real-time run
// through `genjobs local`, and cold starts and peak memory of the real
// function binaries under the Lambda Runtime Interface Emulator. Every
// figure is a measurement of this machine.
package benchmark

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/dev/modroot"
	"github.com/genjobs/genjobs/internal/dev/samlocal"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/bolt"
)

// Options are `genjobs bench`'s flags.
type Options struct {
	// Out is the folder results.md goes to.
	Out string
	// Quick shrinks the measurements (small pipeline runs, no real-time
	// run, no cold starts) for tests.
	Quick bool
	// Progress receives a line per step (nil: none).
	Progress io.Writer
}

// ResultsFile is the file the benchmark writes under Options.Out.
const ResultsFile = "results.md"

// ThroughputRun is one measured pipeline run with instant renders.
type ThroughputRun struct {
	// Name says what was run: store medium, pollers, policy.
	Name string
	// Result is the best of the measurements (the most operations per
	// second); Rates are every measurement's operations per second, in
	// the order they ran.
	Result *PipelineResult
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
	// Memory is template.yaml's MemorySize per function, by folder name.
	Memory map[string]int
	// Count is the pipeline run whose AWS requests per render and records
	// per invocation the report gives.
	Count *PipelineResult
	// Throughput holds the instant-render runs.
	Throughput []ThroughputRun
	// Local is the real-time `genjobs local` run, or LocalSkipped says
	// why there is none.
	Local        *LocalRun
	LocalSkipped string
	// ColdStarts holds the functions' sizes and first invokes, or
	// ColdStartSkipped says why there are none.
	ColdStarts       []ColdStart
	ColdStartSkipped string
	// Load is the 1-minute load average before the throughput runs and
	// before the cold starts ("" where unknown).
	Load map[string]string
}

func (o Options) progress(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "bench: "+format+"\n", args...)
	}
}

// Run runs the benchmark, writes Options.Out/results.md and prints it to
// stdout.
func Run(ctx context.Context, opts Options, stdout io.Writer) (*Results, error) {
	begin := time.Now()
	if opts.Out == "" {
		opts.Out = "bench"
	}
	root, err := modroot.Find("")
	if err != nil {
		return nil, fmt.Errorf("run it inside a clone of genjobs, whose template.yaml gives the functions' memory: %w", err)
	}
	mem, err := templateMemory(root)
	if err != nil {
		return nil, err
	}
	res := &Results{Options: opts, Memory: mem}

	// Short renders (one observation finds each active, one finished),
	// the dispatches trickled so that actions come about one per batch as
	// at low traffic.
	opts.progress("pipeline: counting AWS requests per render")
	n := 200
	if opts.Quick {
		n = 40
	}
	if res.Count, err = RunPipeline(ctx, PipelineConfig{Operations: n, QueueFor: countQueueFor, RunFor: countRunFor,
		Spacing: 5 * time.Millisecond, Timeout: 2 * time.Minute}); err != nil {
		return nil, fmt.Errorf("counting run: %w", err)
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
		l, err := MeasureLocal(ctx, localRenders)
		if err != nil {
			return nil, err
		}
		res.Local = &l
	}

	_, noGo := exec.LookPath("go")
	switch {
	case opts.Quick:
		res.ColdStartSkipped = "--quick"
	case noGo != nil:
		res.ColdStartSkipped = "no go command to build the functions"
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

	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	var md bytes.Buffer
	res.WriteMarkdown(&md)
	if err := os.WriteFile(filepath.Join(opts.Out, ResultsFile), md.Bytes(), 0o644); err != nil {
		return nil, err
	}
	if _, err := stdout.Write(md.Bytes()); err != nil {
		return nil, err
	}
	opts.progress("wrote %s in %s", filepath.Join(opts.Out, ResultsFile), time.Since(begin).Round(time.Second))
	return res, nil
}

// The counting run's render: queued long enough that the first long poll
// surely arrives before the job runs, even on a slow machine.
const (
	countQueueFor = time.Second
	countRunFor   = time.Second
)

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
	// Five rounds: on a shared 2-core machine one run swings by a fifth
	// either way; the best of five is close to the machine unloaded.
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
	// Round by round, so that the disk and tmpfs runs whose ratio is a
	// target alternate and share the machine's mood.
	for round := range repeats {
		for i, rn := range runs {
			t := &r.Throughput[i]
			if t.Skipped != "" || round >= rn.repeats {
				continue
			}
			r.Options.progress("  %s: %d operations", rn.name, rn.ops)
			res, err := RunPipeline(ctx, PipelineConfig{Operations: rn.ops, Dir: rn.parent, Policies: rn.ps, WorkerScale: rn.scale, Open: rn.open, KeepProcs: rn.keep, Timeout: 3 * time.Minute})
			if err != nil {
				return fmt.Errorf("throughput %s: %w", rn.name, err)
			}
			rate := (ThroughputRun{Result: res}).OpsPerSecond()
			t.Rates = append(t.Rates, rate)
			if t.Result == nil || rate > t.OpsPerSecond() {
				t.Result = res
			}
		}
	}
	return nil
}

// loadAverage is the 1-minute load average, where /proc tells it.
func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	avg, _, _ := strings.Cut(string(b), " ")
	return avg
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// templateMemory is the MemorySize template.yaml under root gives each
// function, by folder name: the bound a cold start's peak RSS must fit.
func templateMemory(root string) (map[string]int, error) {
	t, err := samlocal.Load(filepath.Join(root, samlocal.TemplateFile))
	if err != nil {
		return nil, err
	}
	mb := map[string]int{}
	for _, fn := range t.Functions {
		mb[fn.Dir()] = fn.MemoryMB
	}
	return mb, nil
}
