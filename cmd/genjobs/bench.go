package main

import (
	"context"
	"io"

	"github.com/spf13/pflag"

	"github.com/genjobs/genjobs/internal/dev/benchmark"
	"github.com/genjobs/genjobs/internal/operator"
)

// cmdBench runs the comparative benchmarks (internal/dev/benchmark): the
// observation model against the floor and the rivals, AWS requests and
// dollars per render, the scale table and its simulation, handler
// throughput and a real-time run through the local pipeline, and cold
// starts under the Lambda Runtime Interface Emulator. It prints the
// Markdown table and writes it, with its plots, under --out.
func cmdBench(fs *pflag.FlagSet) operator.RunFunc {
	out := fs.String("out", "bench", "folder for "+benchmark.ResultsFile+", "+benchmark.PlotFile+", "+benchmark.CostLatencyFile+" and "+benchmark.GETsFloorFile)
	renders := fs.Int("renders", 2000, "renders in the model's workload")
	seed := fs.Uint64("seed", 1, "seed of the model's workload and jitter")
	quick := fs.Bool("quick", false, "small pipeline runs, a small scale simulation, no real-time run and no cold starts (for tests)")
	scaleSim := fs.Int("scale-sim", benchmark.DefaultScaleSim, "renders in flight in the virtual-time simulation that backs the scale table (100000 takes ~13 min and ~2 GB)")
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		var err error
		switch {
		case len(args) > 0:
			return usagef("unexpected argument %q", args[0])
		case *renders < 1:
			return usagef("--renders must be at least 1")
		case *out == "":
			return usagef("--out must name a folder")
		case *scaleSim < 1:
			return usagef("--scale-sim must be at least 1")
		}
		_, err = benchmark.Run(ctx, benchmark.Options{Out: *out, Renders: *renders, Seed: *seed, Quick: *quick, ScaleSim: *scaleSim, Progress: stderr}, stdout)
		return err
	}
}
