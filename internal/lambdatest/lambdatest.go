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
// GENJOBS_REQUIRE_INTEGRATION=1).
package lambdatest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/testenv"
)

// InvokePath is the emulator's invocation endpoint. The emulator serves
// one function, and only under the name "function".
const InvokePath = "/2015-03-31/functions/function/invocations"

// RIEPath is where `bash .ci/rie.sh install` puts the emulator, relative
// to the module root.
const RIEPath = ".cache/bin/aws-lambda-rie"

// Defaults for the function's configuration. The timeout is the
// template's (a submit must keep 25 s in hand before it POSTs), the
// memory size Lambda's smallest.
const (
	DefaultTimeout  = 60 * time.Second
	DefaultMemoryMB = 128
	DefaultRegion   = "us-east-1"
)

// startAttempts bounds restarts when a port found free was taken before
// the emulator bound it: a race with other processes, not a failure.
const startAttempts = 5

// readyTimeout bounds the wait for the emulator to listen.
const readyTimeout = 20 * time.Second

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
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("lambdatest: no go.mod above the working directory")
		}
		dir = parent
	}
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

// builds holds one build per package per test binary run: the bootstrap
// is the same for every test, and building it once keeps a run with many
// emulators cheap.
var builds sync.Map // package path -> *build

type build struct {
	once sync.Once
	path string
	err  error
}

// Build builds a function's bootstrap for the host's architecture (Lambda
// runs linux; deployment builds arm64 elsewhere, but the tests run the
// binary here) and returns its path. name is a folder under functions/,
// or a module-relative package path starting with "./". The build runs
// once per test binary run; every caller gets its result.
func Build(t testing.TB, name string) string {
	t.Helper()
	pkg := name
	if !strings.HasPrefix(pkg, "./") {
		pkg = "./functions/" + name
	}
	root := Root(t)
	v, _ := builds.LoadOrStore(pkg, &build{})
	b := v.(*build)
	b.once.Do(func() { b.path, b.err = buildBootstrap(root, pkg) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// buildBootstrap compiles pkg into .cache/lambdatest/OS_ARCH/PKG/bootstrap.
// The binary is built in a private folder and renamed into place, so two
// test binaries building the same function at once (go test runs packages
// in parallel) never run or overwrite a half-written file, and the cache
// holds one binary per function instead of one per run.
func buildBootstrap(root, pkg string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("lambdatest: go not found on PATH to build %s: %w", pkg, err)
	}
	slug := strings.NewReplacer("./", "", "/", "_").Replace(pkg)
	dir := filepath.Join(root, ".cache", "lambdatest", "linux_"+runtime.GOARCH, slug)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("lambdatest: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return "", fmt.Errorf("lambdatest: %w", err)
	}
	defer os.RemoveAll(tmp)
	// The deployment build's flags (Makefile `build`), but GOARCH stays
	// the host's: the emulator executes the binary on this machine.
	cmd := exec.Command(goBin, "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w",
		"-o", filepath.Join(tmp, "bootstrap"), pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+runtime.GOARCH, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("lambdatest: build %s: %w\n%s", pkg, err, out)
	}
	path := filepath.Join(dir, "bootstrap")
	if err := os.Rename(filepath.Join(tmp, "bootstrap"), path); err != nil {
		return "", fmt.Errorf("lambdatest: %w", err)
	}
	return path, nil
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

// Function is one running emulator with its bootstrap. Its methods are
// safe for concurrent use.
type Function struct {
	name   string
	addr   string
	client *http.Client
	cmd    *exec.Cmd
	exited chan struct{}
	stdout *syncBuffer
	stderr *syncBuffer

	mu       sync.Mutex
	invokes  int
	firstDur time.Duration
}

// Start builds cfg.Function (once per run) and starts it under the
// emulator, on free loopback ports, with exactly the environment cfg
// describes. It waits until the emulator accepts connections; the
// bootstrap itself starts on the first invocation, as Lambda's init does.
// t.Cleanup stops the emulator and the bootstrap. When the emulator is not
// installed the test skips (fails under GENJOBS_REQUIRE_INTEGRATION=1).
func Start(t testing.TB, cfg Config) *Function {
	t.Helper()
	root := Root(t)
	rie := filepath.Join(root, RIEPath)
	if _, err := os.Stat(rie); err != nil {
		testenv.Skip(t, "the Lambda Runtime Interface Emulator is not installed at "+RIEPath+"; run `bash .ci/rie.sh install`")
	}
	bootstrap := Build(t, cfg.Function)
	env := environment(cfg, filepath.Dir(bootstrap))
	var lastErr error
	for range startAttempts {
		f, err := launch(rie, bootstrap, env)
		if err == nil {
			f.name = cfg.Function
			t.Cleanup(func() {
				f.stop()
				if t.Failed() {
					t.Logf("%s: function output (emulator stdout):\n%s", f.name, tail(f.Stdout(), 16<<10))
					t.Logf("%s: emulator log (stderr):\n%s", f.name, tail(f.Stderr(), 8<<10))
				}
			})
			return f
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	t.Fatalf("lambdatest: start %s: %v", cfg.Function, lastErr)
	return nil
}

// environment is the emulator's environment, which it hands on to the
// bootstrap: Lambda's reserved variables, then cfg.Env. PATH, TZ and LANG
// are what Lambda's provided runtimes set; HOME stays unset, as in Lambda.
func environment(cfg Config, taskRoot string) []string {
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	memory := cfg.MemoryMB
	if memory <= 0 {
		memory = DefaultMemoryMB
	}
	region := cfg.Region
	if region == "" {
		region = DefaultRegion
	}
	name := filepath.Base(cfg.Function)
	vars := map[string]string{}
	for k, v := range cfg.Env {
		vars[k] = v
	}
	for k, v := range map[string]string{
		"PATH":                            "/usr/local/bin:/usr/bin:/bin",
		"TZ":                              ":UTC",
		"LANG":                            "en_US.UTF-8",
		"LAMBDA_TASK_ROOT":                taskRoot,
		"AWS_LAMBDA_FUNCTION_NAME":        name,
		"AWS_LAMBDA_FUNCTION_TIMEOUT":     strconv.Itoa(int((timeout + time.Second - 1) / time.Second)),
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": strconv.Itoa(memory),
		"AWS_LAMBDA_FUNCTION_VERSION":     "$LATEST",
		"AWS_LAMBDA_LOG_GROUP_NAME":       "/aws/lambda/" + name,
		"AWS_REGION":                      region,
		"AWS_DEFAULT_REGION":              region,
	} {
		vars[k] = v
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// errPortTaken marks a start that lost a port to another process.
var errPortTaken = errors.New("port taken")

// launch starts one emulator and waits until it listens.
func launch(rie, bootstrap string, env []string) (*Function, error) {
	apiAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	f := &Function{
		addr:   addr,
		exited: make(chan struct{}),
		stdout: &syncBuffer{},
		stderr: &syncBuffer{},
		// No client timeout: each Invoke's context bounds it.
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	}
	// The emulator relays the bootstrap's stdout and stderr on its own
	// stdout, framed by START/END/REPORT lines as in CloudWatch Logs; its
	// own log goes to stderr.
	cmd := exec.Command(rie,
		"--runtime-interface-emulator-address", addr,
		"--runtime-api-address", apiAddr,
		bootstrap)
	cmd.Dir = filepath.Dir(bootstrap)
	cmd.Env = env
	cmd.Stdout = f.stdout
	cmd.Stderr = f.stderr
	ownProcessGroup(cmd)
	// A descendant that outlives the emulator holds the output pipes
	// open; Wait then gives up on them instead of hanging the cleanup.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start emulator: %w", err)
	}
	f.cmd = cmd
	go func() { _ = cmd.Wait(); close(f.exited) }()

	// Ready means both ports answer and the emulator still runs: it
	// panics at once when either port is taken, and the port may then
	// answer for the process that took it.
	deadline := time.Now().Add(readyTimeout)
	for {
		if listening(addr) && listening(apiAddr) {
			select {
			case <-f.exited:
			default:
				return f, nil
			}
		}
		select {
		case <-f.exited:
			log := f.Stderr() + f.Stdout()
			if strings.Contains(log, "address already in use") {
				return nil, errPortTaken
			}
			return nil, fmt.Errorf("emulator exited during start-up:\n%s", tail(log, 4<<10))
		default:
		}
		if time.Now().After(deadline) {
			f.stop()
			return nil, fmt.Errorf("emulator not listening on %s after %s:\n%s", addr, readyTimeout, tail(f.Stderr(), 4<<10))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// listening reports whether something accepts connections at addr.
func listening(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// freeAddr asks the kernel for a free loopback port. It is free when
// asked, not necessarily when the emulator binds it; launch retries.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr, nil
}

// stop ends the emulator and the bootstrap it started. The emulator puts
// the bootstrap in a process group of its own, so that group is found
// first and killed too: a bootstrap busy in a handler would otherwise
// outlive the test.
func (f *Function) stop() {
	select {
	case <-f.exited:
		return
	default:
	}
	killTree(f.cmd.Process.Pid)
	select {
	case <-f.exited:
	case <-time.After(10 * time.Second):
	}
}

// URL is the emulator's base URL (http://127.0.0.1:PORT), for tools that
// build their own requests.
func (f *Function) URL() string { return "http://" + f.addr }

// endLineWait bounds how long Invoke waits for the emulator's END line
// after a successful answer.
const endLineWait = 2 * time.Second

// Invoke sends one synchronous invocation, as `aws lambda invoke` or the
// SQS event source mapping would, and returns the HTTP status and the
// body: the handler's JSON result, Lambda's {"errorType", "errorMessage"}
// for a returned error (still status 200), or an empty 502 when the
// runtime crashed or failed its init. err is set only when no answer
// arrived. After a 200 it also waits (briefly) for the emulator to log
// the invocation's END line, so Stdout then holds what the invocation
// wrote.
func (f *Function) Invoke(ctx context.Context, payload []byte) (status int, body []byte, err error) {
	f.mu.Lock()
	f.invokes++
	first := f.invokes == 1
	f.mu.Unlock()
	requestID, err := newRequestID()
	if err != nil {
		return 0, nil, err
	}
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.URL()+InvokePath, bytes.NewReader(payload))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	// Our own request id (the emulator otherwise makes one up) tells this
	// invocation's END line from another's.
	req.Header.Set("X-Amzn-RequestId", requestID)
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("invoke %s: %w", f.name, err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, body, fmt.Errorf("invoke %s: read answer: %w", f.name, err)
	}
	if first {
		f.mu.Lock()
		f.firstDur = time.Since(start)
		f.mu.Unlock()
	}
	if resp.StatusCode == http.StatusOK {
		f.stdout.waitFor("END RequestId: "+requestID, endLineWait)
	}
	return resp.StatusCode, body, nil
}

// newRequestID makes a random UUID, the shape of Lambda's request ids.
func newRequestID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("request id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// FirstInvoke is how long the first Invoke took, from sending the request
// to reading the whole answer: the cold start (the bootstrap's process
// start and init, which the emulator defers to the first invocation) plus
// that invocation's own work. Zero until the first Invoke has answered.
func (f *Function) FirstInvoke() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.firstDur
}

// Stdout is everything the function wrote, stdout and stderr alike, as
// the emulator relays it: the lines CloudWatch Logs would hold (log
// records, EMF metric lines, START/END/REPORT). Output travels through
// pipes, so it can trail an invocation's answer; Invoke waits for a
// successful invocation's END line, and WaitStdout waits for anything
// else.
func (f *Function) Stdout() string { return f.stdout.String() }

// Stderr is the emulator's own log: init and invoke phases, runtime exits.
func (f *Function) Stderr() string { return f.stderr.String() }

// WaitStdout waits up to timeout for s to appear in Stdout and reports
// whether it did.
func (f *Function) WaitStdout(s string, timeout time.Duration) bool {
	return f.stdout.waitFor(s, timeout)
}

// WaitStderr waits up to timeout for s to appear in Stderr and reports
// whether it did.
func (f *Function) WaitStderr(s string, timeout time.Duration) bool {
	return f.stderr.waitFor(s, timeout)
}

// syncBuffer is a bytes.Buffer the process writers and the test may use
// at once, and that a test can wait on.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{} // closed and replaced on every write
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.written != nil {
		close(b.written)
		b.written = nil
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until the buffer holds s, or timeout passes.
func (b *syncBuffer) waitFor(s string, timeout time.Duration) bool {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if strings.Contains(b.buf.String(), s) {
			b.mu.Unlock()
			return true
		}
		if b.written == nil {
			b.written = make(chan struct{})
		}
		written := b.written
		b.mu.Unlock()
		select {
		case <-written:
		case <-timer.C:
			return false
		}
	}
}

// tail keeps the last n bytes of s, for failure logs.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
