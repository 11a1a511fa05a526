package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/genjobs/genjobs/internal/operator"
)

// call runs one command as run does and returns its error, for tests that
// check the error's kind.
func call(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	root := operator.NewRoot(ctx, stdout, stderr, commands())
	root.SetArgs(append([]string{name}, args...))
	_, err := root.ExecuteC()
	return err
}

// TestEveryCommandExplainsItself: --help and -h print the command's usage,
// each flag with its description and default, and an example, on stdout
// with exit status 0.
func TestEveryCommandExplainsItself(t *testing.T) {
	t.Parallel()
	for _, c := range commands() {
		for _, h := range []string{"--help", "-h"} {
			code, out, errOut := genjobs(t, c.Name, h)
			if code != 0 || errOut != "" {
				t.Errorf("genjobs %s %s: exit %d, stderr %q; want 0 and nothing", c.Name, h, code, errOut)
			}
			for _, want := range []string{"Usage:", "genjobs " + c.Name, "Examples:", "Flags:", "-h, --help"} {
				if !strings.Contains(out, want) {
					t.Errorf("genjobs %s %s: output lacks %q:\n%s", c.Name, h, want, out)
				}
			}
		}
	}
	// The flags the issue found missing from the usage lines.
	for cmd, flags := range map[string][]string{
		"local":  {"--genace-key", "-v, --verbose", "--state", "--quiet", "--timeout duration", `(default 3m0s)`},
		"replay": {"--genace-key", "--operator", "--job-id", "--db", "--table"},
		"plan":   {"--db", "--json"},
	} {
		_, out, _ := genjobs(t, cmd, "--help")
		for _, f := range flags {
			if !strings.Contains(out, f) {
				t.Errorf("genjobs %s --help lacks %q:\n%s", cmd, f, out)
			}
		}
	}
}

// TestUsageErrorsAndHelp: the top-level help lists the operator's commands
// before the developer tooling; usage errors exit 2 with the command's usage
// on stderr; flags are accepted after positional arguments.
func TestUsageErrorsAndHelp(t *testing.T) {
	t.Parallel()
	code, out, _ := genjobs(t, "--help")
	op, dev := strings.Index(out, "Operator commands"), strings.Index(out, "developer tooling")
	if code != 0 || op < 0 || dev < op || strings.Index(out, "  replay") > dev || strings.Index(out, "  soak") < dev {
		t.Errorf("genjobs --help: exit %d, operator commands must come first:\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "a command is required"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"plan", "--no-such-flag", "op-1"}, "unknown flag: --no-such-flag"},
		{[]string{"plan"}, "want exactly one OPERATION_ID"},
		{[]string{"soak", "--operations", "x"}, `invalid argument "x"`},
	} {
		code, out, errOut := genjobs(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "Usage:") || out != "" {
			t.Errorf("genjobs %q: exit %d, stdout %q, stderr %q; want 2 with %q and the usage on stderr", tc.args, code, out, errOut, tc.want)
		}
	}
	var out2 bytes.Buffer
	if err := call(context.Background(), "plan", []string{"op-1", "--db", t.TempDir() + "/none.db"}, &out2, &out2); err == nil || !strings.Contains(err.Error(), "no embedded store") {
		t.Errorf("flags after the operation id: got %v, want the missing store reported", err)
	}
}
