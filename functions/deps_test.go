// Package functions_test checks what the deployed Lambdas link: the five
// composition roots under functions/ and nothing of the developer tooling.
package functions_test

import (
	"os/exec"
	"strings"
	"testing"
)

// forbidden names what must never be in a deployed function's dependency
// closure: the developer tooling under internal/dev (simulator, fault
// simulation, local stack, emulator runner, template check, benchmarks),
// the embedded store and the libraries only tooling needs.
var forbidden = []string{
	"github.com/genjobs/genjobs/internal/dev/",
	"github.com/genjobs/genjobs/internal/store/bolt",
	"github.com/genjobs/genjobs/internal/console",
	"github.com/chromedp/",
	"go.etcd.io/bbolt",
	"gonum.org/",
	"github.com/johannesboyne/gofakes3",
	"testing",
}

func TestFunctionsLinkNoTooling(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./functions/...: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps gave %d packages; expected the functions' whole closure", len(deps))
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f) && (strings.HasSuffix(f, "/") || strings.HasPrefix(d, f+"/")) {
				t.Errorf("a deployed function links %s (forbidden: %s); run `go list -deps ./functions/...` and move the import behind a narrower package", d, f)
			}
		}
	}
}
