package main

import (
	"context"
	"io"

	"github.com/spf13/pflag"

	"github.com/genjobs/genjobs/internal/dev/benchmark"
	"github.com/genjobs/genjobs/internal/operator"
)

// cmdBench runs internal/dev/benchmark's measurements, prints the
// Markdown table and writes it under --out.
func cmdBench(fs *pflag.FlagSet) operator.RunFunc {
	out := fs.String("out", "bench", "folder for "+benchmark.ResultsFile)
	quick := fs.Bool("quick", false, "small pipeline runs, no real-time run and no cold starts (for tests)")
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		switch {
		case len(args) > 0:
			return usagef("unexpected argument %q", args[0])
		case *out == "":
			return usagef("--out must name a folder")
		}
		_, err := benchmark.Run(ctx, benchmark.Options{Out: *out, Quick: *quick, Progress: stderr}, stdout)
		return err
	}
}
