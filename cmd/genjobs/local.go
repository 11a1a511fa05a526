package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/spf13/pflag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/pipeline"
	"github.com/genjobs/genjobs/internal/dev/workload"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/operator"
)

func cmdLocal(fs *pflag.FlagSet) operator.RunFunc {
	workloadPath := fs.String("workload", "", "JSON Lines workload, one operation a line (default: the built-in demo)")
	reportPath := fs.String("report", "", "write the JSON report here (it is also kept in the run's directory)")
	timeout := fs.Duration("timeout", 3*time.Minute, "stop after this long even if operations are still running")
	state := fs.String("state", operator.DefaultStateRoot, "state root: each run gets its own directory runs/<run id> (store, artifacts, report, the simulator's jobs) and latest points at the newest; nothing is ever deleted")
	resume := fs.Bool("resume", false, "continue the newest run (or --run) instead of starting one, however it ended (kill -9 included): its operations from its store, every next action they hold sent again for its due time, against the same simulator")
	runDirFlag := fs.String("run", "", "with --resume: the run directory to continue (default: STATE/latest)")
	genaceURL := fs.String("genace-url", "", "use this Genace instead of the built-in simulator")
	genaceKey := fs.String("genace-key", os.Getenv("GENACE_API_KEY"), "API key for --genace-url (env GENACE_API_KEY)")
	table := fs.String("table", "", "store operations in this DynamoDB table instead of the embedded store")
	endpoint := fs.String("dynamodb-endpoint", "", "DynamoDB endpoint (sets AWS_ENDPOINT_URL_DYNAMODB), e.g. DynamoDB Local")
	longPoll := fs.Duration("long-poll", 30*time.Second, "observation long poll (default: the deployed policy's; Genace allows up to 30s)")
	accounting := fs.Duration("accounting-budget", 10*time.Second, "how long a failed job's refund is observed before it is left for accounting")
	giveUp := fs.Duration("give-up-after", 30*time.Second, "stop when Genace has been unreachable this long")
	quiet := fs.Bool("quiet", false, "no progress display")
	verbose := fs.BoolP("verbose", "v", false, "print the functions' logs to stderr")
	serve := fs.Bool("serve", false, "serve the intake API until Ctrl-C (or --timeout) for applications to use, as a local stack: no demo, only --workload's operations, if given")
	listen := fs.String("listen", "", "loopback address of the intake API (default 127.0.0.1:"+defaultServePort+" with --serve, else an ephemeral port)")
	tracePath := fs.String("trace", "", "append one JSON line per message a function receives and per follow-up sent (time, action, operation, revision, due) to this file")
	var sf simFlags
	sf.register(fs)
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		switch {
		case len(args) != 0:
			return usagef("local takes no arguments, got %q", args)
		case *timeout <= 0 || *giveUp <= 0:
			return usagef("--timeout and --give-up-after must be positive")
		case *longPoll <= 0 || *longPoll > 30*time.Second || *accounting <= 0:
			return usagef("--long-poll must be in (0, 30s] and --accounting-budget positive")
		}
		if err := sf.validate(); err != nil {
			return err
		}
		switch {
		case *genaceURL != "" && *genaceKey == "":
			return usagef("--genace-url needs --genace-key (or GENACE_API_KEY)")
		case *runDirFlag != "" && !*resume:
			return usagef("--run goes with --resume")
		case *resume && *workloadPath != "":
			return usagef("--resume continues a run's own operations; --workload starts a new run")
		case *endpoint != "" && *table == "":
			return usagef("--dynamodb-endpoint goes with --table")
		case *serve && *resume:
			return usagef("--serve starts a run; --resume continues one")
		}
		if *serve && *listen == "" {
			*listen = "127.0.0.1:" + defaultServePort
		}
		if *listen != "" {
			if err := pipeline.CheckLoopback(*listen); err != nil {
				return usagef("--listen: %v", err)
			}
		}
		if *serve && !fs.Changed("timeout") {
			*timeout = 100 * 365 * 24 * time.Hour // until Ctrl-C
		}
		if *endpoint != "" {
			if err := os.Setenv("AWS_ENDPOINT_URL_DYNAMODB", *endpoint); err != nil {
				return err
			}
		}
		cfg := pipeline.Config{Timeout: *timeout, Table: *table, ProgressEvery: time.Second, LongPoll: *longPoll, Accounting: *accounting,
			GiveUpAfter: *giveUp, Resume: *resume, Command: operator.Self(), Listen: *listen, Serve: *serve}
		cfg.OnServe = func(url string) {
			fmt.Fprintf(stdout, "genjobs local: intake API at %s (loopback; any SigV4 signature is accepted); completion events in %s\n",
				url, pipeline.EventsPath(cfg.StateDir))
		}
		if !*quiet {
			view := newProgressView(stdout)
			defer view.close()
			cfg.Progress, cfg.OnEvent = view.update, view.event
		}
		if *verbose {
			cfg.Log = slog.New(slog.NewTextHandler(stderr, nil))
		}
		if *tracePath != "" {
			f, err := os.OpenFile(*tracePath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
			if err != nil {
				return err
			}
			defer f.Close()
			cfg.Trace = f
		}
		var runDir, runID string
		if *resume {
			// The run's own directory, not the link to it: what the
			// report and the hints name must stay this run's when a newer
			// run moves latest.
			runDir = operator.Resolved(cmp.Or(*runDirFlag, filepath.Join(*state, operator.LatestLink)))
			if _, err := os.Stat(pipeline.DBPath(runDir)); err != nil && *table == "" {
				return fmt.Errorf("nothing to resume in %s (run genjobs local first): %w", runDir, err)
			}
			runID = filepath.Base(runDir)
		} else {
			if !*serve {
				cfg.Workload = workload.Demo()
			}
			if *workloadPath != "" {
				f, err := os.Open(*workloadPath)
				if err != nil {
					return err
				}
				cfg.Workload, err = workload.Read(f)
				f.Close()
				if err != nil {
					return err
				}
			}
			var err error
			if runDir, runID, err = newRunDir(*state, time.Now()); err != nil {
				return err
			}
		}
		unlock, err := lockState(runDir)
		if err != nil {
			return err
		}
		defer unlock()
		if !*resume {
			if err := pointLatest(*state, runID); err != nil {
				return err
			}
		}
		cfg.StateDir = runDir
		var saver *simSaver
		if *genaceURL == "" {
			key := localSimKey
			if *resume {
				if cfg.Sim, err = loadSim(runDir, key); err != nil {
					return err
				}
				sf.misbehave(cfg.Sim)
			} else {
				cfg.Sim = sf.simulator(key, clock.Real{})
			}
			// Genace outlives a crash of ours: every job the simulator
			// creates is on disk before its POST is answered.
			saver = &simSaver{dir: runDir, sim: cfg.Sim}
			cfg.Sim.OnChange(saver.saveOrLog(stderr))
			cfg.GenaceKey = key
			cfg.Prices = map[string]int64{}
			for name, m := range simModels(sf.runFor) {
				cfg.Prices[name] = m.Price
			}
			// The simulator serves the deployed catalog's models too, so
			// an application asks a local run for what it asks the stack.
			deployed, _ := config.ParseCatalog(config.DefaultModelCatalog)
			for name := range deployed {
				if _, ok := cfg.Prices[name]; !ok {
					cfg.Prices[name] = sf.price
				}
			}
			for _, it := range cfg.Workload {
				if _, ok := cfg.Prices[it.Model]; !ok && it.Model != "" {
					cfg.Prices[it.Model] = sf.price
				}
			}
		} else {
			cfg.GenaceURL, cfg.GenaceKey = *genaceURL, *genaceKey
			if slices.ContainsFunc(cfg.Workload, func(it workload.Item) bool { return it.Scenario != "" }) {
				fmt.Fprintln(stderr, "note: the demo's scripted faults need the built-in simulator; against another Genace they run as plain renders")
			}
		}
		if *resume {
			fmt.Fprintf(stdout, "genjobs local: resuming run %s, state in %s\n", runID, runDir)
		} else {
			fmt.Fprintf(stdout, "genjobs local: %d operations, run %s, state in %s\n", len(cfg.Workload), runID, runDir)
		}
		cfg.Addressing = pipeline.Addressing(operator.Address(runDir, *table, *endpoint))
		rep, err := pipeline.Run(ctx, cfg)
		if saver != nil {
			if serr := saver.save(); serr != nil && err == nil {
				err = serr
			}
		}
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
			fmt.Fprintf(stdout, "\nState kept in %s (%s points at the newest run).\nNext: %s reviews %s   (then plan, replay, audit with the same flags)\n",
				runDir, filepath.Join(*state, operator.LatestLink), operator.Self(), cfg.Addressing.Store)
			if rep.TimedOut && err == nil {
				err = errors.New("timed out: see the summary for the operations still running")
			}
		}
		if ctx.Err() != nil && !*serve {
			return operator.ErrInterrupted
		}
		if *serve && errors.Is(err, context.Canceled) {
			return nil // Ctrl-C is how a serving run ends
		}
		return err
	}
}

// defaultServePort is where `genjobs local --serve` listens unless told,
// so that an application's configuration (and the example program's
// default) names a stable URL.
const defaultServePort = "8790"

// localSimKey is the key a local run's simulator accepts (a local
// constant, not a secret).
const localSimKey = "local-sim-key"

// simStateFile is where a run keeps its simulator's jobs.
const simStateFile = "genace.json"

// simSaver saves a run's simulator, one save at a time (so an older state
// never renames over a newer one), and once for every change that arrived
// while a save ran: POSTs answered together share the next save.
type simSaver struct {
	mu  sync.Mutex // held for a save
	dir string
	sim *genacesim.Simulator
	// changes counts the calls of save; saved is the count the last
	// completed save covered (under mu).
	changes atomic.Int64
	saved   int64
}

// save returns once a save that began after the caller's change is on
// disk.
func (s *simSaver) save() error {
	mine := s.changes.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.saved >= mine {
		return nil
	}
	// Every change counted by now happened before this snapshot.
	covers := s.changes.Load()
	if err := saveSim(s.dir, s.sim); err != nil {
		return err
	}
	s.saved = covers
	return nil
}

// saveOrLog is save for the simulator's OnChange, which has no error to
// return: a failed save is said on w (the run's own save at its end
// tries again).
func (s *simSaver) saveOrLog(w io.Writer) func() {
	return func() {
		if err := s.save(); err != nil {
			fmt.Fprintf(w, "genjobs local: saving the simulator's jobs: %v\n", err)
		}
	}
}

// saveSim writes the simulator's jobs into the run directory (a new file
// renamed over the old), so the run's Genace outlives it.
func saveSim(runDir string, sim *genacesim.Simulator) error {
	tmp, err := os.CreateTemp(runDir, simStateFile+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := sim.Save(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(runDir, simStateFile))
}

// loadSim restores a run's simulator, or nil, nil when the run has none.
func loadSim(runDir, key string) (*genacesim.Simulator, error) {
	f, err := os.Open(filepath.Join(runDir, simStateFile))
	if err != nil {
		return nil, fmt.Errorf("the run in %s kept no simulator state (%w); pass --genace-url for another Genace", runDir, err)
	}
	defer f.Close()
	return genacesim.Restore(f, key, clock.Real{})
}

// localGenace is the operator commands' operator.LocalGenace: the
// simulator the local run that owns the store at db saved, served on
// loopback while the command runs, so replay and the console look job
// ids up where the run's jobs are; nil when db is no local run's (or its
// run used another Genace).
func localGenace(db string) (*operator.LocalRun, error) {
	runDir := filepath.Dir(db)
	sim, err := loadSim(runDir, localSimKey)
	if err != nil {
		return nil, nil
	}
	base, stopSim, err := sim.Start("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &operator.LocalRun{Search: sim, Save: (&simSaver{dir: runDir, sim: sim}).save}
	l.Stop = func() error { stopSim(); return l.Save() }
	c, err := genace.New(base, localSimKey, nil)
	if err != nil {
		_ = l.Stop()
		return nil, err
	}
	l.Reader = c
	return l, nil
}
