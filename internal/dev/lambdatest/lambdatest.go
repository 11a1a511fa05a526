// Package lambdatest runs a genjobs function in a test the way AWS Lambda
// runs it: built as for deployment and started under the AWS Lambda
// Runtime Interface Emulator (internal/dev/emulator), against a local
// stack stood up from template.yaml (Stack). This package ties them to a
// test: skips, failures, t.Cleanup. The emulator is installed by `bash
// .ci/rie.sh install`; without it the tests skip (or fail when
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
// the emulator (emulator.Start; cfg.Root is the module's). t.Cleanup
// stops the emulator and the bootstrap, and logs their output when the
// test failed. When the emulator is not installed the test skips (fails
// under GENJOBS_REQUIRE_INTEGRATION=1).
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
