package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/spf13/pflag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/pipeline"
	"github.com/genjobs/genjobs/internal/dev/workload"
)

func cmdLocal(fs *pflag.FlagSet) runFunc {
	workloadPath := fs.String("workload", "", "JSON Lines workload, one operation a line (default: the built-in demo)")
	reportPath := fs.String("report", "", "write the JSON report here (it is also kept in the state dir)")
	timeout := fs.Duration("timeout", 3*time.Minute, "stop after this long even if operations are still running")
	state := fs.String("state", defaultStateRoot, "state root: each run gets its own directory runs/<run id> (store, artifacts, report) and latest points at the newest; nothing is ever deleted")
	genaceURL := fs.String("genace-url", "", "use this Genace instead of the built-in simulator")
	genaceKey := fs.String("genace-key", os.Getenv("GENACE_API_KEY"), "API key for --genace-url (env GENACE_API_KEY)")
	table := fs.String("table", "", "store operations in this DynamoDB table instead of the embedded store")
	endpoint := fs.String("dynamodb-endpoint", "", "DynamoDB endpoint (sets AWS_ENDPOINT_URL_DYNAMODB), e.g. DynamoDB Local")
	longPoll := fs.Duration("long-poll", 10*time.Second, "observation long poll (Genace allows up to 30s)")
	accounting := fs.Duration("accounting-budget", 10*time.Second, "how long a failed job's refund is observed before it is left for accounting")
	quiet := fs.Bool("quiet", false, "no progress lines")
	verbose := fs.BoolP("verbose", "v", false, "print the functions' logs to stderr")
	var sf simFlags
	sf.register(fs)
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		pos := args
		if len(pos) != 0 {
			return usagef("local takes no arguments, got %q", pos)
		}
		if *timeout <= 0 {
			return usagef("--timeout must be positive")
		}
		if *longPoll <= 0 || *longPoll > 30*time.Second || *accounting <= 0 {
			return usagef("--long-poll must be in (0, 30s] and --accounting-budget positive")
		}
		if err := sf.validate(); err != nil {
			return err
		}
		if *genaceURL != "" && *genaceKey == "" {
			return usagef("--genace-url needs --genace-key (or GENACE_API_KEY)")
		}
		if *endpoint != "" {
			if *table == "" {
				return usagef("--dynamodb-endpoint goes with --table")
			}
			if err := os.Setenv("AWS_ENDPOINT_URL_DYNAMODB", *endpoint); err != nil {
				return err
			}
		}
		items := workload.Demo()
		if *workloadPath != "" {
			f, err := os.Open(*workloadPath)
			if err != nil {
				return err
			}
			items, err = workload.Read(f)
			f.Close()
			if err != nil {
				return err
			}
		}
		cfg := pipeline.Config{Workload: items, Timeout: *timeout, Table: *table, Progress: stdout, ProgressEvery: time.Second,
			LongPoll: *longPoll, Accounting: *accounting}
		if *quiet {
			cfg.Progress = nil
		}
		if *verbose {
			cfg.Log = slog.New(slog.NewTextHandler(stderr, nil))
		}
		if *genaceURL == "" {
			const key = "local-sim-key"
			cfg.Sim, cfg.GenaceKey = sf.simulator(key, clock.Real{}), key
			cfg.Prices = map[string]int64{}
			for name, m := range simModels(sf.runFor) {
				cfg.Prices[name] = m.Price
			}
			for _, it := range items {
				if _, ok := cfg.Prices[it.Model]; !ok {
					cfg.Prices[it.Model] = sf.price
				}
			}
		} else {
			cfg.GenaceURL, cfg.GenaceKey = *genaceURL, *genaceKey
			for _, it := range items {
				if it.Scenario != "" {
					fmt.Fprintln(stderr, "note: the demo's scripted faults need the built-in simulator; against another Genace they run as plain renders")
					break
				}
			}
		}
		runDir, runID, err := newRunDir(*state, time.Now())
		if err != nil {
			return err
		}
		unlock, err := lockState(runDir)
		if err != nil {
			return err
		}
		defer unlock()
		if err := pointLatest(*state, runID); err != nil {
			return err
		}
		cfg.StateDir, cfg.Command = runDir, self()
		fmt.Fprintf(stdout, "genjobs local: %d operations, run %s, state in %s\n", len(items), runID, runDir)
		rep, err := pipeline.Run(ctx, cfg)
		if rep != nil {
			fmt.Fprintln(stdout)
			rep.WriteSummary(stdout)
			if werr := rep.WriteJSON(pipeline.ReportPath(runDir)); werr != nil && err == nil {
				err = werr
			}
			if *reportPath != "" {
				if werr := rep.WriteJSON(*reportPath); werr != nil && err == nil {
					err = werr
				}
			}
			fmt.Fprintf(stdout, "\nState kept in %s (%s points at it).\nNext: %s reviews   (then plan, replay, audit; --db %s for this run once a newer one exists)\n",
				runDir, filepath.Join(*state, latestLink), self(), pipeline.DBPath(runDir))
			if rep.TimedOut && err == nil {
				err = errors.New("timed out: see the summary for the operations still running")
			}
		}
		return err
	}
}
