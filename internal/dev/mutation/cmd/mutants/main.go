// Command mutants runs genjobs' mutation check (make mutants): it applies
// each mutant of the list to a private copy of the module, one at a time,
// runs the test layers on it, prints which layers killed it, and fails
// when a mutant survives every layer, a mutant is invalid, or the
// simulation alone kills fewer than -min-sim. With --check it only
// verifies that every anchor applies, which takes a second.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/genjobs/genjobs/internal/dev/modroot"
	"github.com/genjobs/genjobs/internal/dev/mutation"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes: 1 the check failed, 2 the list or the flags are wrong.
const (
	exitFailed = 1
	exitUsage  = 2
)

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mutants", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	list := fs.String("list", "testdata/mutants/mutants.txt", "the mutant list, relative to the module root")
	check := fs.Bool("check", false, "only verify that every anchor applies exactly once and the result parses; run no test")
	only := fs.String("run", "", "run only the mutants whose id matches this regular expression")
	layersF := fs.String("layers", "unit,faultsim", "layers to run: unit, faultsim, integration (DynamoDB Local; store mutants only)")
	fs.IntVar(&cfg.jobs, "j", 1, "mutants run in parallel, each in its own copy of the module")
	minSim := fs.Int("min-sim", 0, "fail when the simulation alone kills fewer mutants than this: of the core set (core: yes) run, or of all run when none is core")
	fs.StringVar(&cfg.goCmd, "go", "go", "the go command")
	fs.StringVar(&cfg.logs, "logs", "", "write each command's full output to this folder")
	fs.BoolVar(&cfg.baseline, "baseline", true, "first run the layers on the unmutated copy (a failure there makes every verdict meaningless)")
	// DurationVar, not Duration: internal/dev/templatecheck reads every
	// Duration("name", ...) call as a metric.
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Minute, "go test -timeout of each layer; a command is killed 5 minutes after it")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./internal/dev/mutation/cmd/mutants [flags]")
		fs.PrintDefaults()
	}
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, "mutants: "+format+"\n", args...)
		return code
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	layers, err := mutation.ParseLayers(*layersF)
	if err != nil || cfg.jobs < 1 || cfg.timeout <= 0 || *minSim < 0 {
		return fail(exitUsage, "bad flags: -layers %q (%v), -j %d, -timeout %s, -min-sim %d", *layersF, err, cfg.jobs, cfg.timeout, *minSim)
	}
	if *minSim > 0 && !slices.Contains(layers, mutation.Faultsim) {
		return fail(exitUsage, "-min-sim needs the faultsim layer")
	}
	root, err := modroot.Find("")
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	ms, err := mutation.Load(filepath.Join(root, *list))
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			return fail(exitUsage, "-run: %v", err)
		}
		ms = slices.DeleteFunc(ms, func(m mutation.Mutant) bool { return !re.MatchString(m.ID) })
		if len(ms) == 0 {
			return fail(exitUsage, "no mutant id matches %q", *only)
		}
	}

	// Every run starts with the check: a rotted anchor stops it before
	// any test runs.
	if bad := checkAll(root, ms, stdout, *check); bad > 0 {
		return fail(exitUsage, "%d of %d mutants do not apply to %s: update their find/replace in %s", bad, len(ms), root, *list)
	}
	if *check {
		fmt.Fprintf(stdout, "all %d mutants apply\n", len(ms))
		return 0
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if slices.Contains(layers, mutation.Integration) {
		// Fetched once into the working tree's download cache, which every
		// copy links to.
		fetch := exec.CommandContext(ctx, "bash", ".ci/dynamodb-local.sh", "fetch")
		fetch.Dir, fetch.Stdout, fetch.Stderr = root, stderr, stderr
		if err := fetch.Run(); err != nil {
			return fail(exitFailed, "fetch DynamoDB Local: %v", err)
		}
	}
	if cfg.logs != "" {
		if err := os.MkdirAll(cfg.logs, 0o755); err != nil {
			return fail(exitUsage, "%v", err)
		}
	}

	results, err := runAll(ctx, root, ms, layers, cfg, stderr)
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	fmt.Fprintln(stdout)
	mutation.WriteTable(stdout, results, layers)
	sum := mutation.Summarize(results)
	fmt.Fprintln(stdout)
	sum.WriteSummary(stdout, layers)
	if problems := sum.Problems(layers, *minSim); len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stdout, "FAIL:", p)
		}
		return exitFailed
	}
	return 0
}

// checkAll verifies every anchor; it lists each mutant when verbose, and
// every one that fails always. It returns how many failed.
func checkAll(root string, ms []mutation.Mutant, w io.Writer, verbose bool) int {
	bad := 0
	for _, m := range ms {
		a, err := m.Mutate(root)
		switch {
		case err != nil:
			bad++
			fmt.Fprintf(w, "FAIL %s (list line %d): %v\n", m.ID, m.Line, err)
		case verbose:
			fmt.Fprintf(w, "ok   %-40s %s:%d\n", m.ID, m.File, a.Line)
		}
	}
	return bad
}

// config is the flags that shape a run of the layers.
type config struct {
	jobs        int
	timeout     time.Duration
	goCmd, logs string
	baseline    bool
}

// runAll runs the mutants on cfg.jobs copies of the module, in list order
// per copy, and returns the results in list order.
func runAll(ctx context.Context, root string, ms []mutation.Mutant, layers []mutation.Layer, cfg config, progress io.Writer) ([]mutation.Result, error) {
	n := min(cfg.jobs, len(ms))
	var spaces []*mutation.Workspace
	defer func() {
		for _, w := range spaces {
			if err := w.Close(); err != nil {
				fmt.Fprintln(progress, "mutants: remove copy:", err)
			}
		}
	}()
	for range n {
		w, err := mutation.NewWorkspace(root)
		if err != nil {
			return nil, err
		}
		w.Go, w.Timeout, w.Logs = cfg.goCmd, cfg.timeout, cfg.logs
		spaces = append(spaces, w)
	}
	if cfg.baseline {
		var pkgs []string
		for _, m := range ms {
			if !slices.Contains(pkgs, m.Tests()) {
				pkgs = append(pkgs, m.Tests())
			}
		}
		var need []mutation.Layer
		for _, l := range layers {
			if slices.ContainsFunc(ms, func(m mutation.Mutant) bool { return mutation.Applies(l, m) }) {
				need = append(need, l)
			}
		}
		start := time.Now()
		fmt.Fprintf(progress, "baseline: %v on the unmutated copy\n", need)
		if err := spaces[0].Baseline(ctx, need, pkgs); err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, "baseline passed in %s\n", time.Since(start).Round(time.Second))
	}

	results := make([]mutation.Result, len(ms))
	next := make(chan int, len(ms))
	for i := range ms {
		next <- i
	}
	close(next)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		done  int
		fatal []error
	)
	for _, w := range spaces {
		wg.Go(func() {
			for i := range next {
				if ctx.Err() != nil {
					return
				}
				res, err := w.Run(ctx, ms[i], layers)
				mu.Lock()
				results[i] = res
				done++
				if err != nil {
					fatal = append(fatal, err)
				}
				fmt.Fprintf(progress, "[%d/%d] %-40s %-9s %s\n", done, len(ms), ms[i].ID, res.Overall(), res.Duration.Round(time.Second))
				mu.Unlock()
				if err != nil {
					return // this copy can no longer be trusted
				}
			}
		})
	}
	wg.Wait()
	if len(fatal) > 0 {
		return nil, errors.Join(fatal...)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	return results, nil
}
