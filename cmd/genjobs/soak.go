package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/genjobs/genjobs/internal/dev/benchmark"
	"github.com/genjobs/genjobs/internal/dev/faultsim"
	"github.com/genjobs/genjobs/internal/operator"
)

// cmdSoak runs the deterministic fault-injection simulation
// (internal/dev/faultsim) on the deployed timing and prints its figures,
// the liveness bound and the longest time any operation took to reach
// it. Any invariant violation (a missed liveness bound among them), and
// any figure above its threshold (operations left uncertain per
// submission of genuinely unknown outcome above 1.00, reviews left open on
// terminal operations above 0), makes it fail, naming the seed and the
// command that replays the run.
func cmdSoak(fs *pflag.FlagSet) operator.RunFunc {
	ops := fs.Int("operations", 100000, "operations to create and drive to the end")
	seed := fs.Uint64("seed", 1, "seed of the run: the same seed replays the same run")
	faults := fs.String("faults", "all", "faults to inject: all (the persistent classes included), none, persistent, or a comma list of names (name=rate sets a rate; \"all,name=0\" drops one)")
	trace := fs.String("trace", "", "comma-separated operation ids whose full history to print")
	unrecorded := fs.Bool("unrecorded-dispatch", false, "the application sends the dispatch without recording it on the record (the old contract; strands operations whose dispatch goes stale)")
	jsonPath := fs.String("json", "", "also write the result as JSON to this file")
	quiet := fs.Bool("quiet", false, "no progress lines")
	scale := fs.Bool("scale", false, "scale run: standard render times (log-normal, median 60 s, 5 % over 10 min), every operation dispatched at once, no faults unless --faults says; prints the load per service")
	return func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		if len(args) != 0 {
			return usagef("soak takes no arguments, got %q", args)
		}
		if *ops <= 0 {
			return usagef("--operations must be positive")
		}
		selected, err := faultsim.ParseFaults(*faults)
		if err != nil {
			return usagef("--faults: %v", err)
		}
		cfg := faultsim.Config{Seed: *seed, Operations: *ops, Faults: selected, UnrecordedDispatch: *unrecorded}
		if *scale {
			cfg = scaleConfig(*ops, *seed)
			if fs.Changed("faults") {
				cfg.Faults = selected
			}
			cfg.UnrecordedDispatch = *unrecorded
		}
		if *trace != "" {
			cfg.Trace = strings.Split(*trace, ",")
		}
		if !*quiet {
			cfg.Progress = stdout
		}
		fmt.Fprintf(stdout, "genjobs soak: %d operations, seed %d, faults %s\n", *ops, *seed, cfg.Faults)
		res, err := faultsim.RunContext(ctx, cfg)
		if err != nil {
			return fmt.Errorf("seed %d: %w", *seed, err)
		}
		res.WriteSummary(stdout)
		if *scale {
			res.Scale.WriteScale(stdout, res.Operations)
		}
		if *jsonPath != "" {
			b, err := json.MarshalIndent(res, "", "  ")
			if err != nil {
				return err
			}
			if err := os.WriteFile(*jsonPath, append(b, '\n'), 0o644); err != nil {
				return err
			}
		}
		return verdict(res)
	}
}

// verdict fails a run that broke an invariant or asked operators more than
// it had to (faultsim.Result.Thresholds), naming the command that replays
// it.
func verdict(res *faultsim.Result) error {
	var fails []string
	if n := len(res.Violations); n > 0 {
		fails = append(fails, fmt.Sprintf("%d invariant violations", n))
	}
	fails = append(fails, res.Thresholds()...)
	if len(fails) == 0 {
		return nil
	}
	return fmt.Errorf("seed %d: %s; replay: %s", res.Seed, strings.Join(fails, "; "), res.Replay())
}

// scaleConfig is the fault simulation of inFlight standard renders
// dispatched at once, with no faults, counting the load
// (faultsim.Config.Scale).
func scaleConfig(inFlight int, seed uint64) faultsim.Config {
	return faultsim.Config{Seed: seed, Operations: inFlight, Renders: benchmark.StandardRenders(inFlight, seed), Faults: faultsim.Faults{}, Scale: true,
		Interval: time.Nanosecond} // every creation falls on the first virtual second
}
