package mutation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Verdict is what one layer made of one mutant.
type Verdict string

// The verdicts.
const (
	// NotRun: the layer was not asked for, or does not apply.
	NotRun Verdict = ""
	// Killed: a test failed.
	Killed Verdict = "killed"
	// TimedOut: the run did not end within the timeout; it counts as
	// killed (a hang is noticed), but is shown apart.
	TimedOut Verdict = "timeout"
	// Survived: every test passed.
	Survived Verdict = "survived"
	// BuildFailed: the mutant does not compile. It is a bad mutant, not a
	// killed one: the list must be fixed.
	BuildFailed Verdict = "build"
	// Broken: the command failed without a failing test or a build error
	// (DynamoDB Local did not start, say): nothing was measured.
	Broken Verdict = "error"
)

// Dead reports whether the verdict kills the mutant.
func (v Verdict) Dead() bool { return v == Killed || v == TimedOut }

var (
	failLine    = regexp.MustCompile(`(?m)^(--- FAIL: |FAIL\s|panic: )`)
	failedTest  = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)
	buildFailed = regexp.MustCompile(`(?m)^FAIL\s.*\[(build|setup) failed\]`)
)

// Classify reads a go test run: its error (nil when it exited 0), whether
// it ran out of time, and its combined output.
func Classify(runErr error, timedOut bool, out []byte) Verdict {
	switch {
	case runErr == nil:
		return Survived
	case buildFailed.Match(out):
		return BuildFailed
	case timedOut:
		return TimedOut
	case failLine.Match(out):
		return Killed
	}
	return Broken
}

// FailedTests lists the tests a run reports as failed, outermost first,
// without repeats.
func FailedTests(out []byte) []string {
	var names []string
	for _, m := range failedTest.FindAllSubmatch(out, -1) {
		if n := string(m[1]); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// Workspace is a private copy of the module that mutants are applied to,
// one at a time; the developer's working tree is never written.
type Workspace struct {
	// Dir is the copy's root.
	Dir string
	// Go is the go command; Timeout bounds each test binary (go test
	// -timeout), and a command is killed after Timeout plus Grace.
	Go             string
	Timeout, Grace time.Duration
	// Logs, if set, receives each command's full output as
	// <mutant>.<layer>.log.
	Logs string
}

// skipDirs are not copied, as folders or links to them: history,
// download caches and local output.
var skipDirs = []string{".git", ".cache", "build", ".genjobs", "node_modules"}

// NewWorkspace copies the module at src into a fresh temporary folder,
// its .cache a link to src's so downloads (DynamoDB Local) are shared.
func NewWorkspace(src string) (*Workspace, error) {
	dir, err := os.MkdirTemp("", "genjobs-mutants-")
	if err != nil {
		return nil, err
	}
	if err := copyTree(src, dir); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("copy module: %w", err)
	}
	if abs, err := filepath.Abs(filepath.Join(src, ".cache")); err == nil {
		if _, err := os.Stat(abs); err == nil {
			if err := os.Symlink(abs, filepath.Join(dir, ".cache")); err != nil {
				os.RemoveAll(dir)
				return nil, err
			}
		}
	}
	return &Workspace{Dir: dir, Go: "go", Timeout: 10 * time.Minute, Grace: 5 * time.Minute}, nil
}

// Close removes the copy.
func (w *Workspace) Close() error { return os.RemoveAll(w.Dir) }

func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir() && rel != "." && slices.Contains(skipDirs, d.Name()):
			return filepath.SkipDir
		case d.Type()&fs.ModeSymlink != 0 && slices.Contains(skipDirs, d.Name()):
			return nil // a linked .cache (the shared download cache) is linked anew below
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case !d.Type().IsRegular():
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
}

// Command is the argv that runs layer l (the unit layer on pkgs).
// -trimpath keeps compiled packages independent of the copy's folder, so
// every copy and run shares the build cache.
func (w *Workspace) Command(l Layer, pkgs []string) []string {
	test := []string{w.Go, "test", "-count=1", "-vet=off", "-trimpath", "-timeout", w.Timeout.String()}
	switch l {
	case Unit:
		return append(test, pkgs...)
	case Faultsim:
		return append(test, "./internal/dev/faultsim")
	case Integration:
		return append([]string{"bash", ".ci/dynamodb-local.sh", "run", "--", "env", "GENJOBS_REQUIRE_INTEGRATION=1"},
			append(test, "-tags", "integration", "./internal/store/...")...)
	}
	return nil
}

// Applies reports whether layer l runs for m: the integration layer only
// for the store's mutants and those the list expects it to kill.
func Applies(l Layer, m Mutant) bool {
	if l != Integration {
		return true
	}
	return strings.HasPrefix(m.File, "internal/store/") || m.Expects(Integration)
}

// Result is what the layers made of one mutant.
type Result struct {
	Mutant   Mutant
	Verdicts map[Layer]Verdict
	// Failed names the tests that killed it, per layer.
	Failed map[Layer][]string
	// Problem explains an Invalid or Broken result.
	Problem  string
	Duration time.Duration
}

// Overall is the mutant's verdict over every layer that ran: Killed if any
// killed it, BuildFailed if it did not compile (an invalid mutant), Broken
// if a layer could not be measured, Survived otherwise.
func (r Result) Overall() Verdict {
	vs := slices.Collect(maps.Values(r.Verdicts))
	switch {
	case slices.Contains(vs, BuildFailed):
		return BuildFailed
	case slices.ContainsFunc(vs, Verdict.Dead):
		return Killed
	case slices.Contains(vs, Broken):
		return Broken
	}
	return Survived
}

// Run applies m to the copy, runs each of layers that applies to it, and
// puts the file back. Its error means the copy could not be put back and
// must not be used again.
func (w *Workspace) Run(ctx context.Context, m Mutant, layers []Layer) (res Result, err error) {
	start := time.Now()
	res = Result{Mutant: m, Verdicts: map[Layer]Verdict{}, Failed: map[Layer][]string{}}
	defer func() { res.Duration = time.Since(start) }()
	a, merr := m.Mutate(w.Dir)
	if merr != nil {
		res.Verdicts[Unit], res.Problem = BuildFailed, merr.Error()
		return res, nil
	}
	path := filepath.Join(w.Dir, filepath.FromSlash(m.File))
	if err := os.WriteFile(path, a.Mutated, 0o644); err != nil {
		return res, fmt.Errorf("mutant %s: write %s: %w", m.ID, path, err)
	}
	defer func() {
		if rerr := os.WriteFile(path, a.Orig, 0o644); rerr != nil {
			err = fmt.Errorf("mutant %s: restore %s: %w", m.ID, path, rerr)
		}
	}()
	// A mutant that does not compile is told apart before any layer runs.
	if out, _, err := w.exec(ctx, []string{w.Go, "build", "-trimpath", m.Package()}); err != nil {
		res.Verdicts[Unit], res.Problem = BuildFailed, lastLines(out, 10)
		w.log(m.ID, "build", out)
		return res, nil
	}
	for _, l := range layers {
		if !Applies(l, m) {
			continue
		}
		out, timedOut, err := w.exec(ctx, w.Command(l, []string{m.Tests()}))
		w.log(m.ID, string(l), out)
		v := Classify(err, timedOut, out)
		res.Verdicts[l] = v
		switch v {
		case Killed, TimedOut:
			res.Failed[l] = FailedTests(out)
		case BuildFailed, Broken:
			res.Problem = fmt.Sprintf("%s: %s", l, lastLines(out, 10))
		}
		if ctx.Err() != nil {
			break
		}
	}
	return res, nil
}

// Baseline runs the layers on the unmutated copy: a failure there would
// make every mutant look killed, so it stops the run.
func (w *Workspace) Baseline(ctx context.Context, layers []Layer, unitPkgs []string) error {
	for _, l := range layers {
		out, timedOut, err := w.exec(ctx, w.Command(l, unitPkgs))
		w.log("baseline", string(l), out)
		if v := Classify(err, timedOut, out); v != Survived {
			return fmt.Errorf("the unmutated module fails the %s layer (%s): %s", l, v, lastLines(out, 15))
		}
	}
	return nil
}

// exec runs argv in the copy and returns its combined output and whether
// it was killed for running past Timeout+Grace.
func (w *Workspace) exec(ctx context.Context, argv []string) ([]byte, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, w.Timeout+w.Grace)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = w.Dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	killGroup(cmd)
	// A grandchild (DynamoDB Local's java) may hold the output open.
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	return out.Bytes(), errors.Is(ctx.Err(), context.DeadlineExceeded), err
}

func (w *Workspace) log(id, layer string, out []byte) {
	if w.Logs == "" {
		return
	}
	_ = os.WriteFile(filepath.Join(w.Logs, id+"."+layer+".log"), out, 0o644)
}

func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
