// Package lambdatest ties internal/dev/emulator and invoke's local stacks
// to a test (skips, failures, t.Cleanup): a function runs as Lambda runs
// it, against a stack stood up from template.yaml. Without the emulator
// (`bash .ci/rie.sh install`) the tests skip (fail when
// GENJOBS_REQUIRE_INTEGRATION=1).
package lambdatest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/genjobs/genjobs/internal/dev/emulator"
	"github.com/genjobs/genjobs/internal/dev/modroot"
	"github.com/genjobs/genjobs/internal/dev/testenv"
)

// Root returns the module root. Tests run in their package's folder, so
// the answer does not depend on which package calls it.
func Root(t testing.TB) string {
	t.Helper()
	root, err := modroot.Find("")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// Event returns the sample event events/NAME from the module root: the
// same files README's `sam local invoke -e events/...` uses, so the tests
// keep them working.
func Event(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Root(t), "events", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Start builds cfg.Function (once per test binary) and starts it under
// the emulator, in the module's root. t.Cleanup stops it and logs its
// output when the test failed.
func Start(t testing.TB, cfg emulator.Config) *emulator.Emulator {
	t.Helper()
	cfg.Root = Root(t)
	emu, err := emulator.Start(context.Background(), cfg)
	if errors.Is(err, emulator.ErrNotInstalled) {
		testenv.Skip(t, err.Error())
	}
	if err != nil {
		t.Fatalf("lambdatest: %v", err)
	}
	t.Cleanup(func() {
		emu.Stop()
		if t.Failed() {
			t.Logf("%s: function output (emulator stdout):\n%s", cfg.Function, emulator.Tail(emu.Stdout(), 16<<10))
			t.Logf("%s: emulator log (stderr):\n%s", cfg.Function, emulator.Tail(emu.Stderr(), 8<<10))
		}
	})
	return emu
}
