package functions_test

import (
	"bytes"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// maxToolingRatio bounds the tooling's lines against what ships. The
// tooling is there to prove what ships; past a bound it is the bigger
// maintenance burden. Issue 21's target, 1.5, is met (22,404 against
// 14,941 after its cuts): tooling may not grow faster than what ships,
// and the bound only ever moves down.
const maxToolingRatio = 1.50

// TestToolingInProportion counts the non-test Go lines of what ships
// (every module package a deployed function or the operator's commands
// link) and of the tooling (internal/dev, the test-support packages named
// *test, and the local-only command code under cmd/), prints both and
// their ratio, and fails when the tooling outgrows maxToolingRatio.
func TestToolingInProportion(t *testing.T) {
	t.Parallel()
	mod := strings.TrimSpace(run(t, "go", "list", "-m"))
	shipping := map[string]bool{}
	for _, line := range strings.Split(run(t, "go", "list", "-deps", "-f", "{{.ImportPath}} {{.Dir}}", "./...", "../internal/operator"), "\n") {
		if pkg, dir, ok := strings.Cut(line, " "); ok && (pkg == mod || strings.HasPrefix(pkg, mod+"/")) {
			shipping[dir] = true
		}
	}
	var ship, tool int
	for dir := range shipping {
		ship += goLines(t, dir)
	}
	for _, line := range strings.Split(run(t, "go", "list", "-f", "{{.ImportPath}} {{.Dir}}", mod+"/..."), "\n") {
		pkg, dir, ok := strings.Cut(line, " ")
		if !ok || shipping[dir] {
			continue
		}
		rel := strings.TrimPrefix(pkg, mod+"/")
		if strings.HasPrefix(rel, "internal/dev/") || strings.HasPrefix(rel, "cmd/") || strings.HasSuffix(path.Base(rel), "test") {
			tool += goLines(t, dir)
		}
	}
	if ship < 5000 {
		t.Fatalf("shipping code counted %d lines; expected the functions' and the operator's whole closure", ship)
	}
	ratio := float64(tool) / float64(ship)
	t.Logf("non-test Go lines: shipping %d, tooling %d, ratio %.2f (limit %.2f)", ship, tool, ratio, maxToolingRatio)
	if ratio > maxToolingRatio {
		t.Errorf("tooling is %.2f× the shipping code (%d against %d lines), over %.2f×: cut tooling before adding more", ratio, tool, ship, maxToolingRatio)
	}
}

// goLines counts the lines of the non-test Go files in dir, whatever
// their build constraints.
func goLines(t *testing.T, dir string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n += bytes.Count(b, []byte("\n"))
	}
	return n
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}
