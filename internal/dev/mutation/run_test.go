package mutation

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	exit := errors.New("exit status 1")
	for _, tc := range []struct {
		name     string
		err      error
		timedOut bool
		out      string
		want     Verdict
	}{
		{"passed", nil, false, "ok  \tx\t0.1s\n", Survived},
		{"test failed", exit, false, "--- FAIL: TestA (0.00s)\nFAIL\nFAIL\tx\t0.1s\n", Killed},
		{"panicked", exit, false, "panic: boom\n\ngoroutine 1\nFAIL\tx\t0.1s\n", Killed},
		{"go test timeout", exit, false, "panic: test timed out after 1s\nFAIL\tx\t1.0s\n", Killed},
		{"killed by the runner", exit, true, "", TimedOut},
		{"compile error", exit, false, "# x\n./x.go:3:9: undefined: y\nFAIL\tx [build failed]\nFAIL\n", BuildFailed},
		{"setup failed", exit, false, "FAIL\tx [setup failed]\n", BuildFailed},
		{"no failing test", exit, false, "dynamodb-local: java not found\n", Broken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Classify(tc.err, tc.timedOut, []byte(tc.out)); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestFailedTests(t *testing.T) {
	t.Parallel()
	out := "--- FAIL: TestA (0.1s)\n    --- FAIL: TestA/sub (0.0s)\n--- FAIL: TestB (0.0s)\n--- FAIL: TestA (0.1s)\n"
	if got, want := FailedTests([]byte(out)), []string{"TestA", "TestA/sub", "TestB"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func result(id string, vs map[Layer]Verdict, expect ...Layer) Result {
	return Result{Mutant: Mutant{ID: id, Expect: expect}, Verdicts: vs}
}

func TestSummary(t *testing.T) {
	t.Parallel()
	results := []Result{
		result("a", map[Layer]Verdict{Unit: Killed, Faultsim: Killed}),
		result("b", map[Layer]Verdict{Unit: Survived, Faultsim: TimedOut}),
		result("c", map[Layer]Verdict{Unit: Survived, Faultsim: Survived, Integration: Killed}),
		result("d", map[Layer]Verdict{Unit: Survived, Faultsim: Survived}, Faultsim),
		result("e", map[Layer]Verdict{Unit: BuildFailed}),
		result("f", map[Layer]Verdict{Unit: Survived, Faultsim: Broken}),
	}
	results[0].Failed = map[Layer][]string{Faultsim: {"TestSimulation", "TestOther"}}
	// b fell to a check's own unit test in the faultsim package, not to a simulation.
	results[1].Failed = map[Layer][]string{Faultsim: {"TestCheckWrite"}}
	s := Summarize(results)
	if s.SimulationItself != 1 {
		t.Errorf("TestSimulation itself killed %d, want 1", s.SimulationItself)
	}
	if s.Total != 6 || s.Killed != 3 || s.ByLayer[Unit] != 1 || s.ByLayer[Faultsim] != 2 || s.ByLayer[Integration] != 1 || s.Ran[Integration] != 1 {
		t.Errorf("summary %+v", s)
	}
	if !reflect.DeepEqual(s.Survivors, []string{"d"}) || !reflect.DeepEqual(s.Invalid, []string{"e"}) || !reflect.DeepEqual(s.Broken, []string{"f"}) {
		t.Errorf("survivors %v invalid %v broken %v", s.Survivors, s.Invalid, s.Broken)
	}
	layers := []Layer{Unit, Faultsim, Integration}
	problems := strings.Join(s.Problems(layers, 3), "\n")
	for _, want := range []string{"survived every layer: d", "INVALID", "could not be measured", "simulation alone killed 2 of 6 mutants, fewer than the 3 required"} {
		if !strings.Contains(problems, want) {
			t.Errorf("problems %q lack %q", problems, want)
		}
	}
	if p := Summarize(results[:3]).Problems(layers, 2); len(p) != 0 {
		t.Errorf("a run where every mutant died and the simulation met its bar has problems: %v", p)
	}

	var out strings.Builder
	s.WriteSummary(&out, layers)
	if got, want := out.String(), "all together: 3/6 killed; unit tests: 1/6; simulation alone: 2/6 (TestSimulation itself: 1); integration: 1/1 (the mutants it applies to)\n"; got != want {
		t.Errorf("summary line\n got %q\nwant %q", got, want)
	}
	// With a core set, the simulation's bar is measured on it alone: a
	// and b are core, and the simulation killed both.
	results[0].Mutant.Core, results[1].Mutant.Core = true, true
	core := Summarize(results)
	if core.Core != 2 || core.CoreSim != 2 {
		t.Errorf("core %d, killed by the simulation %d; want 2, 2", core.Core, core.CoreSim)
	}
	if p := strings.Join(core.Problems(layers, 2), "\n"); strings.Contains(p, "simulation alone") {
		t.Errorf("the core set met its bar of 2, yet: %s", p)
	}
	if p := strings.Join(core.Problems(layers, 3), "\n"); !strings.Contains(p, "killed 2 of the 2 core mutants, fewer than the 3 required") {
		t.Errorf("problems with a bar of 3 over a core of 2: %s", p)
	}
	out.Reset()
	core.WriteSummary(&out, layers)
	if !strings.Contains(out.String(), "simulation alone: 2/6, core set 2/2 (TestSimulation itself: 1)") {
		t.Errorf("summary line with a core set: %q", out.String())
	}
	out.Reset()
	WriteTable(&out, results, layers)
	for _, want := range []string{"d       survived  survived!  -            SURVIVED", "e       build", "INVALID", "f       survived  error", "ERROR"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

// TestWorkspaceRun applies mutants to a copy of a tiny module and runs its
// tests for real: one is killed, one survives, one does not compile, and
// the source module is never written.
func TestWorkspaceRun(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the go command")
	}
	src := t.TempDir()
	files := map[string]string{
		"go.mod":           "module example.com/tiny\n\ngo 1.22\n",
		"x/x.go":           "package x\n\n// Less is a < b.\nfunc Less(a, b int) bool { return a < b }\n\n// Unused is never tested.\nfunc Unused() int { return 1 }\n",
		"x/x_test.go":      "package x\n\nimport \"testing\"\n\nfunc TestLess(t *testing.T) {\n\tif Less(1, 1) {\n\t\tt.Fatal(\"1 < 1\")\n\t}\n}\n",
		".git/HEAD":        "not copied\n",
		".cache/big.jar":   "linked, not copied\n",
		"testdata/keep.md": "copied\n",
	}
	for name, body := range files {
		path := filepath.Join(src, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := NewWorkspace(src)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Timeout, w.Grace = 2*time.Minute, time.Minute
	if _, err := os.Stat(filepath.Join(w.Dir, ".git")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf(".git was copied: %v", err)
	}
	if link, err := os.Readlink(filepath.Join(w.Dir, ".cache")); err != nil || link != filepath.Join(src, ".cache") {
		t.Errorf(".cache is not a link to the source's: %q, %v", link, err)
	}
	if _, err := os.Stat(filepath.Join(w.Dir, "testdata", "keep.md")); err != nil {
		t.Errorf("testdata not copied: %v", err)
	}

	ctx := context.Background()
	for _, tc := range []struct {
		m    Mutant
		want Verdict
		test string
	}{
		{Mutant{ID: "killed", File: "x/x.go", Find: "return a < b", Replace: "return a <= b"}, Killed, "TestLess"},
		{Mutant{ID: "survives", File: "x/x.go", Find: "return 1", Replace: "return 2"}, Survived, ""},
		{Mutant{ID: "invalid", File: "x/x.go", Find: "return a < b", Replace: "return a < c"}, BuildFailed, ""},
	} {
		res, err := w.Run(ctx, tc.m, []Layer{Unit})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Overall(); got != tc.want {
			t.Errorf("%s: overall %s, want %s (%+v)", tc.m.ID, got, tc.want, res)
		}
		if tc.test != "" && !reflect.DeepEqual(res.Failed[Unit], []string{tc.test}) {
			t.Errorf("%s: failed tests %v, want %s", tc.m.ID, res.Failed[Unit], tc.test)
		}
		// The copy is put back after each mutant.
		if got, _ := os.ReadFile(filepath.Join(w.Dir, "x", "x.go")); string(got) != files["x/x.go"] {
			t.Errorf("%s: the copy was not restored: %q", tc.m.ID, got)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(src, "x", "x.go")); string(got) != files["x/x.go"] {
		t.Errorf("the source module was written: %q", got)
	}
	if err := w.Baseline(ctx, []Layer{Unit}, []string{"./x"}); err != nil {
		t.Errorf("baseline of the unmutated copy: %v", err)
	}
}

// TestWorkspaceLinkedCache: a module whose .cache is itself a link (the
// shared download cache, as the working rules set it up) still gets a
// copy, whose .cache links to the source's.
func TestWorkspaceLinkedCache(t *testing.T) {
	t.Parallel()
	src, shared := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module example.com/tiny\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(shared, filepath.Join(src, ".cache")); err != nil {
		t.Fatal(err)
	}
	w, err := NewWorkspace(src)
	if err != nil {
		t.Fatalf("NewWorkspace with a linked .cache: %v", err)
	}
	defer w.Close()
	if link, err := os.Readlink(filepath.Join(w.Dir, ".cache")); err != nil || link != filepath.Join(src, ".cache") {
		t.Errorf(".cache is not a link to the source's: %q, %v", link, err)
	}
	if _, err := os.Stat(filepath.Join(w.Dir, "go.mod")); err != nil {
		t.Errorf("go.mod not copied: %v", err)
	}
}
