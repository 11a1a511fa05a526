// Package benchmark produces genjobs' figures measured on the real code
// (`genjobs bench`, `make bench`): AWS requests per render counted on the
// real handlers, throughput of the local pipeline, a real-time run
// through `genjobs local`, and cold starts and peak memory of the real
// function binaries under the Lambda Runtime Interface Emulator. Every
// figure is a measurement of this machine.
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
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/genjobs/genjobs/internal/dev/modroot"
	"github.com/genjobs/genjobs/internal/dev/samlocal"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/schedule"
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

// Results are every figure of one benchmark run.
type Results struct {
	// Options are the run's options, with defaults filled in.
	Options Options
	// Memory is template.yaml's MemorySize per function, by folder name.
	Memory map[string]int
	// Count is the pipeline run whose AWS requests per render and records
	// per invocation the report gives.
	Count *PipelineResult
	// Throughput holds the paired instant-render rounds.
	Throughput Throughput
	// Local are the real-time `genjobs local` runs, one per length of
	// LocalRenders, or LocalSkipped says why there are none.
	Local        []LocalRun
	LocalSkipped string
	// ColdStarts holds the functions' sizes and first invokes, or
	// ColdStartSkipped says why there are none.
	ColdStarts       []ColdStart
	ColdStartSkipped string
	// Load is the 1-minute load average before the cold starts ("" where
	// unknown); Throughput has its own.
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

	res.Load = map[string]string{}
	if err := res.throughput(ctx); err != nil {
		return nil, err
	}

	if opts.Quick {
		res.LocalSkipped = "--quick"
	} else {
		// The lengths run at once: they are waits on the wall clock, not
		// work, and each has its own simulator, store and queue.
		res.Local = make([]LocalRun, len(LocalRenders))
		errs := make([]error, len(LocalRenders))
		var wg sync.WaitGroup
		for i, r := range LocalRenders {
			opts.progress("real time: %d renders of %s through genjobs local's defaults", localRenders, r.QueueFor+r.RunFor)
			wg.Go(func() { res.Local[i], errs[i] = MeasureLocal(ctx, localRenders, r.QueueFor, r.RunFor) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
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

// tmpfs is where the state goes for the runs without a real fsync.
const tmpfs = "/dev/shm"

// syncProbe is how long a round measures the fsync rate.
const syncProbe = 300 * time.Millisecond

// throughput runs the paired rounds: disk, tmpfs and the fsync rate back
// to back, so that each round's ratio compares runs that shared the
// machine's load (one run on a shared 2-core machine swings by a fifth).
func (r *Results) throughput(ctx context.Context) error {
	n, rounds := 2000, 5
	if r.Options.Quick {
		n, rounds = 200, 2
	}
	t := &r.Throughput
	if !isDir(tmpfs) {
		t.Skipped = tmpfs + " not available"
		return nil
	}
	t.LoadBefore = loadAverage()
	r.Options.progress("pipeline: throughput, %d paired rounds of %d instant renders (load average %s)", rounds, n, t.LoadBefore)
	for i := range rounds {
		var rd Round
		for _, run := range []struct {
			dir string
			res **PipelineResult
		}{{"", &rd.Disk}, {tmpfs, &rd.Tmpfs}} {
			res, err := RunPipeline(ctx, PipelineConfig{Operations: n, Dir: run.dir, Policies: instantPolicy(), Timeout: 3 * time.Minute})
			if err != nil {
				return fmt.Errorf("throughput round %d (%s): %w", i+1, cmp.Or(run.dir, "disk"), err)
			}
			*run.res = res
		}
		rate, err := syncRate("")
		if err != nil {
			return fmt.Errorf("throughput round %d: %w", i+1, err)
		}
		rd.SyncsPerSecond, rd.Cores = rate, runtime.NumCPU()
		t.Rounds = append(t.Rounds, rd)
		r.Options.progress("  round %d: disk %.0f ops/s, limit %.0f ops/s (%.2f)", i+1, OpsPerSecond(rd.Disk), rd.Limit(), rd.Ratio())
	}
	t.LoadAfter = loadAverage()
	return nil
}

// syncRate is how many small writes, each fdatasync'd, dir's file system
// ("" for the system's temporary folder, where the disk runs keep their
// state) takes per second: 4 KiB written over a file's start, then
// fdatasync, for syncProbe. It is the cheapest durable write there, so
// the fsync limit it gives is the most generous.
func syncRate(dir string) (float64, error) {
	f, err := os.CreateTemp(dir, "genjobs-bench-sync-")
	if err != nil {
		return 0, fmt.Errorf("fsync rate: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	step := func() error {
		if _, err := f.WriteAt(buf, 0); err != nil {
			return fmt.Errorf("fsync rate: %w", err)
		}
		if err := fdatasync(f); err != nil {
			return fmt.Errorf("fsync rate: fdatasync %s: %w", f.Name(), err)
		}
		return nil
	}
	if err := step(); err != nil { // allocates the block: not timed
		return 0, err
	}
	n, start := 0, time.Now()
	for ; n == 0 || time.Since(start) < syncProbe; n++ {
		if err := step(); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
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
