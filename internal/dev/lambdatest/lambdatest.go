// Package lambdatest runs a genjobs function the way AWS Lambda runs it:
// the function's package is built into a `bootstrap` executable exactly
// as for deployment (linux, no cgo, -tags lambda.norpc, stripped), and
// that executable is started under the AWS Lambda Runtime Interface
// Emulator (aws-lambda-rie). The emulator is what `sam local invoke` runs
// inside its container: it serves the Lambda Runtime API to the bootstrap
// and accepts invocations over HTTP, so a test exercises the real
// composition root (environment parsing, cold-start client construction,
// lambda.Start, JSON in and out, exit codes) and not just the handler.
//
// A test gets one emulator process per Start, on two free loopback ports
// of its own, so tests may run in parallel. The emulator is installed by
// `bash .ci/rie.sh install`; without it the tests skip (or fail when
// GENJOBS_REQUIRE_INTEGRATION=1). The build and the emulator are
// internal/dev/emulator's; this package ties them to a test (skips, failures,
// t.Cleanup).
package lambdatest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/emulator"
	"github.com/genjobs/genjobs/internal/dev/testenv"
)

// InvokePath is the emulator's invocation endpoint. The emulator serves
// one function, and only under the name "function".
const InvokePath = emulator.InvokePath

// RIEPath is where `bash .ci/rie.sh install` puts the emulator, relative
// to the module root.
const RIEPath = emulator.Path

// Defaults for the function's configuration. The timeout is the
// template's (a submit must keep 25 s in hand before it POSTs), the
// memory size Lambda's smallest.
const (
	DefaultTimeout  = 60 * time.Second
	DefaultMemoryMB = 128
	DefaultRegion   = "us-east-1"
)

// Root returns the module root (the nearest folder with a go.mod, from the
// working directory up). Tests run in their package's folder, so the
// answer does not depend on which package calls it.
func Root(t testing.TB) string {
	t.Helper()
	root, err := findRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("lambdatest: working directory: %w", err)
	}
	root, err := emulator.FindRoot(dir)
	if err != nil {
		return "", fmt.Errorf("lambdatest: %w", err)
	}
	return root, nil
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

// Build builds a function's bootstrap for the host's architecture (Lambda
// runs linux; deployment builds arm64 elsewhere, but the tests run the
// binary here) and returns its path. name is a folder under functions/,
// or a module-relative package path starting with "./". The bootstrap is
// .cache/lambdatest/OS_ARCH/PKG/bootstrap, built once per test binary run
// (emulator.Build); every caller gets its result.
func Build(t testing.TB, name string) string {
	t.Helper()
	pkg := name
	if !strings.HasPrefix(pkg, "./") {
		pkg = "./functions/" + name
	}
	root := Root(t)
	slug := strings.NewReplacer("./", "", "/", "_").Replace(pkg)
	path, err := emulator.Build(context.Background(), root, pkg, filepath.Join(root, ".cache", "lambdatest", "linux_"+runtime.GOARCH, slug))
	if err != nil {
		t.Fatalf("lambdatest: %v", err)
	}
	return path
}

// Config describes one function instance.
type Config struct {
	// Function is a folder under functions/ (or a "./"-prefixed package
	// path), built with Build.
	Function string
	// Env is the function's environment: the variables template.yaml
	// would set, endpoints and credentials. Nothing of the test process's
	// own environment reaches the function, so a variable missing here is
	// missing there, as in a real deployment. Lambda's reserved variables
	// (set from the fields below) win over entries here, as Lambda does
	// not let a template set them either.
	Env map[string]string
	// Timeout is AWS_LAMBDA_FUNCTION_TIMEOUT (whole seconds;
	// DefaultTimeout when zero). The emulator turns it into each
	// invocation's deadline.
	Timeout time.Duration
	// MemoryMB is AWS_LAMBDA_FUNCTION_MEMORY_SIZE (DefaultMemoryMB when
	// zero). The emulator does not enforce it; the function may read it.
	MemoryMB int
	// Region is AWS_REGION and AWS_DEFAULT_REGION (DefaultRegion when
	// empty); Env may not override it, so there is one place to set it.
	Region string
}

// emulatorConfig is cfg for emulator.Start, the defaults filled in.
func (cfg Config) emulatorConfig(rieBin, bootstrap string) emulator.Config {
	out := emulator.Config{
		RIE: rieBin, Bootstrap: bootstrap, Name: filepath.Base(cfg.Function), Env: cfg.Env,
		Timeout: cfg.Timeout, MemoryMB: cfg.MemoryMB, Region: cfg.Region,
	}
	if out.Timeout <= 0 {
		out.Timeout = DefaultTimeout
	}
	if out.MemoryMB <= 0 {
		out.MemoryMB = DefaultMemoryMB
	}
	if out.Region == "" {
		out.Region = DefaultRegion
	}
	return out
}

// Function is one running emulator with its bootstrap. Its methods are
// safe for concurrent use.
type Function struct {
	name string
	emu  *emulator.Emulator
}

// Start builds cfg.Function (once per run) and starts it under the
// emulator, on free loopback ports, with exactly the environment cfg
// describes. It waits until the emulator accepts connections; the
// bootstrap itself starts on the first invocation, as Lambda's init does.
// t.Cleanup stops the emulator and the bootstrap. When the emulator is not
// installed the test skips (fails under GENJOBS_REQUIRE_INTEGRATION=1).
func Start(t testing.TB, cfg Config) *Function {
	t.Helper()
	rieBin, installed := emulator.Installed(Root(t))
	if !installed {
		testenv.Skip(t, "the Lambda Runtime Interface Emulator is not installed at "+RIEPath+"; run `bash .ci/rie.sh install`")
	}
	bootstrap := Build(t, cfg.Function)
	emu, err := emulator.Start(cfg.emulatorConfig(rieBin, bootstrap))
	if err != nil {
		t.Fatalf("lambdatest: %v", err)
	}
	f := &Function{name: cfg.Function, emu: emu}
	t.Cleanup(func() {
		emu.Stop()
		if t.Failed() {
			t.Logf("%s: function output (emulator stdout):\n%s", f.name, emulator.Tail(f.Stdout(), 16<<10))
			t.Logf("%s: emulator log (stderr):\n%s", f.name, emulator.Tail(f.Stderr(), 8<<10))
		}
	})
	return f
}

// URL is the emulator's base URL (http://127.0.0.1:PORT), for tools that
// build their own requests.
func (f *Function) URL() string { return f.emu.URL() }

// Invoke sends one synchronous invocation, as `aws lambda invoke` or the
// SQS event source mapping would, and returns the HTTP status and the
// body: the handler's JSON result, Lambda's {"errorType", "errorMessage"}
// for a returned error (still status 200), or an empty 502 when the
// runtime crashed or failed its init. err is set only when no answer
// arrived. After a 200 it also waits (briefly) for the emulator to log
// the invocation's END line, so Stdout then holds what the invocation
// wrote.
func (f *Function) Invoke(ctx context.Context, payload []byte) (status int, body []byte, err error) {
	return f.emu.Invoke(ctx, payload)
}

// FirstInvoke is how long the first Invoke took, from sending the request
// to reading the whole answer: the cold start (the bootstrap's process
// start and init, which the emulator defers to the first invocation) plus
// that invocation's own work. Zero until the first Invoke has answered.
func (f *Function) FirstInvoke() time.Duration { return f.emu.FirstInvoke() }

// Stdout is everything the function wrote, stdout and stderr alike, as
// the emulator relays it: the lines CloudWatch Logs would hold (log
// records, EMF metric lines, START/END/REPORT). Output travels through
// pipes, so it can trail an invocation's answer; Invoke waits for a
// successful invocation's END line, and WaitStdout waits for anything
// else.
func (f *Function) Stdout() string { return f.emu.Stdout() }

// Stderr is the emulator's own log: init and invoke phases, runtime exits.
func (f *Function) Stderr() string { return f.emu.Stderr() }

// WaitStdout waits up to timeout for s to appear in Stdout and reports
// whether it did.
func (f *Function) WaitStdout(s string, timeout time.Duration) bool {
	return f.emu.WaitStdout(s, timeout)
}

// WaitStderr waits up to timeout for s to appear in Stderr and reports
// whether it did.
func (f *Function) WaitStderr(s string, timeout time.Duration) bool {
	return f.emu.WaitStderr(s, timeout)
}
