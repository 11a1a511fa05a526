// Package functions_test checks what ships: the five composition roots
// under functions/ and the operator's commands (internal/operator) link
// nothing of the developer tooling, and the tooling stays in proportion
// to them (lines_test.go).
package functions_test

import (
	"os/exec"
	"strings"
	"testing"
)

// tooling names what never ships, in a deployed function or on the
// operator's path to a table: the developer tooling under internal/dev
// (simulator, fault simulation, local stack, emulator runner, template
// check, benchmarks) and the libraries only tooling needs.
var tooling = []string{
	"github.com/genjobs/genjobs/internal/dev/",
	"github.com/chromedp/",
	"gonum.org/",
	"github.com/johannesboyne/gofakes3",
	"testing",
}

// shipped is each shipping path and what it must not link: a deployed
// function also no embedded store and no console, which only the
// operator runs.
var shipped = []struct {
	pkgs      string
	forbidden []string
}{
	{"./...", append([]string{"github.com/genjobs/genjobs/internal/store/bolt", "github.com/genjobs/genjobs/internal/console", "go.etcd.io/bbolt"}, tooling...)},
	{"../internal/operator", tooling},
}

func TestShippedCodeLinksNoTooling(t *testing.T) {
	t.Parallel()
	for _, s := range shipped {
		deps := goList(t, s.pkgs)
		for _, d := range deps {
			for _, f := range s.forbidden {
				if d == f || strings.HasPrefix(d, f) && (strings.HasSuffix(f, "/") || strings.HasPrefix(d, f+"/")) {
					t.Errorf("%s links %s (forbidden: %s); run `go list -deps %s` and move the import behind a narrower package", s.pkgs, d, f, s.pkgs)
				}
			}
		}
	}
}

// goList is `go list -deps` of pkgs: every package they link.
func goList(t *testing.T, pkgs string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkgs).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkgs, err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps %s gave %d packages; expected a whole closure", pkgs, len(deps))
	}
	return deps
}
