// Package functions_test checks what ships: the composition roots under
// functions/, one per function of the table (internal/stack), and the
// operator's commands (internal/operator) link nothing of the developer
// tooling, and the tooling stays in proportion to them (lines_test.go).
package functions_test

import (
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/genjobs/genjobs/internal/stack"
)

// tooling names what never ships, in a deployed function or on the
// operator's path to a table: the developer tooling under internal/dev
// (simulator, fault simulation, local stack, local artifact pack, emulator
// runner, template check, benchmarks) and the libraries only tooling needs.
var tooling = []string{
	"github.com/genjobs/genjobs/internal/dev/",
	"github.com/chromedp/",
	"gonum.org/",
	"testing",
}

// forbidden is what a deployed function must not link besides the
// tooling: the embedded store and the console, which only the operator
// runs.
var forbidden = append([]string{
	"github.com/genjobs/genjobs/internal/store/bolt",
	"github.com/genjobs/genjobs/internal/console",
	"go.etcd.io/bbolt",
}, tooling...)

// linksAny reports the entry of list that package d is or lies under.
func linksAny(d string, list []string) (string, bool) {
	for _, f := range list {
		if d == f || strings.HasPrefix(d, f) && (strings.HasSuffix(f, "/") || strings.HasPrefix(d, f+"/")) {
			return f, true
		}
	}
	return "", false
}

// TestOperatorLinksNoTooling: the operator's commands, run against the
// production table, carry no simulator and no local tooling.
func TestOperatorLinksNoTooling(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "../internal/operator").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ../internal/operator: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps ../internal/operator gave %d packages; expected a whole closure", len(deps))
	}
	for _, d := range deps {
		if f, bad := linksAny(d, tooling); bad {
			t.Errorf("internal/operator links %s (forbidden: %s); run `go list -deps ./internal/operator` and move the import behind a narrower package", d, f)
		}
	}
}

// localOnly names, by their last path element wherever they live, the
// local-only stores: the artifact pack of local runs and the group commit
// behind it and the embedded store. A deployed deliver writes to S3 only.
var localOnly = []string{"groupcommit", "localpack"}

func TestFunctionsLinkNoTooling(t *testing.T) {
	t.Parallel()
	// One line per function: its import path, then its whole closure.
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list ./functions/...: %v\n%s", err, out)
	}
	var listed []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fn, deps, _ := strings.Cut(line, " ")
		if !strings.HasPrefix(fn, "github.com/genjobs/genjobs/functions/") {
			continue
		}
		listed = append(listed, path.Base(fn))
		if n := len(strings.Fields(deps)); n < 50 {
			t.Errorf("%s links %d packages; expected its whole closure", fn, n)
		}
		for _, d := range strings.Fields(deps) {
			if f, bad := linksAny(d, forbidden); bad {
				t.Errorf("%s links %s (forbidden: %s); run `go list -deps ./%s` and move the import behind a narrower package", fn, d, f, strings.TrimPrefix(fn, "github.com/genjobs/genjobs/"))
			}
			if slices.Contains(localOnly, path.Base(d)) {
				t.Errorf("%s links %s, a local-only store: the deployed functions use S3 and DynamoDB", fn, d)
			}
		}
	}
	if want := tableNames(); !slices.Equal(slices.Sorted(slices.Values(listed)), want) {
		t.Errorf("go list found the functions %v, the table (internal/stack) has %v", listed, want)
	}
}

// TestEachFolderIsInTheTable: functions/ holds one folder per function of
// the composition table, the one list of functions (the Makefile builds
// every folder; the topology and template.yaml are held to the table).
func TestEachFolderIsInTheTable(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	if want := tableNames(); !slices.Equal(dirs, want) {
		t.Errorf("functions/ holds %v, the table (internal/stack) lists %v", dirs, want)
	}
}

// tableNames are the table's functions, sorted.
func tableNames() []string {
	var out []string
	for _, f := range stack.Functions {
		out = append(out, f.Name)
	}
	return slices.Sorted(slices.Values(out))
}

// TestMakeBuildsTheTable: `make build` builds a bootstrap for each
// function of the table and for nothing else (functions/ holds this test
// file too, which the Makefile's list once took for a function).
func TestMakeBuildsTheTable(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("make", "-s", "-n", "-C", "..", "build").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, out)
	}
	_, loop, ok := strings.Cut(string(out), "for fn in ")
	list, _, _ := strings.Cut(loop, ";")
	if got := strings.Fields(list); !ok || !slices.Equal(slices.Sorted(slices.Values(got)), tableNames()) {
		t.Errorf("make build builds %q, the table (internal/stack) lists %v", list, tableNames())
	}
}
