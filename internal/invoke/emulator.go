package invoke

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
	"time"
)

// InvokePath is the emulator's invocation endpoint. The emulator serves
// one function, and only under the name "function".
const InvokePath = "/2015-03-31/functions/function/invocations"

// RIEPath is where `bash .ci/rie.sh install` puts the AWS Lambda Runtime
// Interface Emulator, relative to the module root.
const RIEPath = ".cache/bin/aws-lambda-rie"

// BuildDir is where the bootstraps are built, relative to the module
// root: BuildDir/FUNCTION/bootstrap.
const BuildDir = ".cache/invoke"

// startAttempts bounds restarts when a port found free was taken before
// the emulator bound it: a race with other processes, not a failure.
const startAttempts = 5

// readyTimeout bounds the wait for the emulator to listen.
const readyTimeout = 20 * time.Second

// endLineWait bounds how long Invoke waits for the emulator's END or
// REPORT line after an answer, so the log it returns is complete.
const endLineWait = 2 * time.Second

// FindRoot returns the module root: the nearest folder with a go.mod,
// from dir upwards.
func FindRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory: run from inside the genjobs checkout")
		}
		dir = parent
	}
}

// builds makes concurrent callers in one process (the integration test
// runs every sample event at once) share one build per function.
var builds sync.Map // function -> *build

type build struct {
	once sync.Once
	path string
	err  error
}

// Build compiles functions/NAME into BuildDir/NAME/bootstrap, the way
// deployment does (linux, no cgo, -tags lambda.norpc, stripped) but for
// this machine's architecture, since the emulator runs it here. Each
// process builds a function once; go's build cache keeps a rebuild cheap.
func Build(ctx context.Context, root, name string) (string, error) {
	v, _ := builds.LoadOrStore(root+"\x00"+name, &build{})
	b := v.(*build)
	b.once.Do(func() { b.path, b.err = buildBootstrap(ctx, root, name) })
	if b.err != nil {
		// A later call may succeed (a cancelled build, a fixed source).
		builds.CompareAndDelete(root+"\x00"+name, b)
	}
	return b.path, b.err
}

func buildBootstrap(ctx context.Context, root, name string) (string, error) {
	pkg := "./functions/" + name
	if _, err := os.Stat(filepath.Join(root, "functions", name)); err != nil {
		return "", fmt.Errorf("build %s: functions/%s does not exist in %s", name, name, root)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("build %s: go not found on PATH (it builds the bootstrap): %w", name, err)
	}
	dir := filepath.Join(root, BuildDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	// Built in a private folder and renamed into place, so two runs at
	// once never execute or overwrite a half-written binary.
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, goBin, "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w",
		"-o", filepath.Join(tmp, "bootstrap"), pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+runtime.GOARCH, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", pkg, err, out)
	}
	path := filepath.Join(dir, "bootstrap")
	if err := os.Rename(filepath.Join(tmp, "bootstrap"), path); err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	return path, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// EmulatorConfig describes one function under the emulator.
type EmulatorConfig struct {
	// RIE is the emulator executable; Bootstrap the function's binary.
	RIE, Bootstrap string
	// Name is AWS_LAMBDA_FUNCTION_NAME.
	Name string
	// Env is the function's environment. Nothing of this process's own
	// environment reaches the function, as in a real deployment; Lambda's
	// reserved variables (from the fields below) win over entries here.
	Env map[string]string
	// Timeout is AWS_LAMBDA_FUNCTION_TIMEOUT (rounded up to whole
	// seconds); the emulator turns it into each invocation's deadline.
	Timeout time.Duration
	// MemoryMB is AWS_LAMBDA_FUNCTION_MEMORY_SIZE.
	MemoryMB int
	// Region is AWS_REGION and AWS_DEFAULT_REGION.
	Region string
}

// Emulator is one running aws-lambda-rie with its bootstrap. Its methods
// are safe for concurrent use.
type Emulator struct {
	name   string
	addr   string
	client *http.Client
	cmd    *exec.Cmd
	exited chan struct{}
	stdout *syncBuffer
	stderr *syncBuffer
}

// StartEmulator starts the emulator on two free loopback ports and waits
// until it accepts invocations. The bootstrap itself starts on the first
// invocation, as Lambda's init does. Stop ends both.
func StartEmulator(cfg EmulatorConfig) (*Emulator, error) {
	if !fileExists(cfg.RIE) {
		return nil, fmt.Errorf("the Lambda Runtime Interface Emulator is not installed at %s: run `bash .ci/rie.sh install` (make invoke does)", cfg.RIE)
	}
	env := environment(cfg)
	var lastErr error
	for range startAttempts {
		e, err := launch(cfg, env)
		if err == nil {
			return e, nil
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, fmt.Errorf("start the emulator for %s: %w", cfg.Name, lastErr)
}

// environment is the emulator's environment, which it hands on to the
// bootstrap: cfg.Env, then Lambda's reserved variables. PATH, TZ and LANG
// are what Lambda's provided runtimes set; HOME stays unset, as in Lambda.
func environment(cfg EmulatorConfig) []string {
	vars := map[string]string{}
	for k, v := range cfg.Env {
		vars[k] = v
	}
	for k, v := range map[string]string{
		"PATH":                            "/usr/local/bin:/usr/bin:/bin",
		"TZ":                              ":UTC",
		"LANG":                            "en_US.UTF-8",
		"LAMBDA_TASK_ROOT":                filepath.Dir(cfg.Bootstrap),
		"AWS_LAMBDA_FUNCTION_NAME":        cfg.Name,
		"AWS_LAMBDA_FUNCTION_TIMEOUT":     strconv.Itoa(int((cfg.Timeout + time.Second - 1) / time.Second)),
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": strconv.Itoa(cfg.MemoryMB),
		"AWS_LAMBDA_FUNCTION_VERSION":     "$LATEST",
		"AWS_LAMBDA_LOG_GROUP_NAME":       "/aws/lambda/" + cfg.Name,
		"AWS_REGION":                      cfg.Region,
		"AWS_DEFAULT_REGION":              cfg.Region,
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
func launch(cfg EmulatorConfig, env []string) (*Emulator, error) {
	apiAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	e := &Emulator{
		name:   cfg.Name,
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
	cmd := exec.Command(cfg.RIE,
		"--runtime-interface-emulator-address", addr,
		"--runtime-api-address", apiAddr,
		cfg.Bootstrap)
	cmd.Dir = filepath.Dir(cfg.Bootstrap)
	cmd.Env = env
	cmd.Stdout = e.stdout
	cmd.Stderr = e.stderr
	ownProcessGroup(cmd)
	// A descendant that outlives the emulator holds the output pipes
	// open; Wait then gives up on them instead of hanging Stop.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.RIE, err)
	}
	e.cmd = cmd
	go func() { _ = cmd.Wait(); close(e.exited) }()

	// Ready means both ports answer and the emulator still runs: it
	// panics at once when either port is taken, and the port may then
	// answer for the process that took it.
	deadline := time.Now().Add(readyTimeout)
	for {
		if listening(addr) && listening(apiAddr) {
			select {
			case <-e.exited:
			default:
				return e, nil
			}
		}
		select {
		case <-e.exited:
			log := e.Stderr() + e.Stdout()
			if strings.Contains(log, "address already in use") {
				return nil, errPortTaken
			}
			return nil, fmt.Errorf("emulator exited during start-up:\n%s", tail(log, 4<<10))
		default:
		}
		if time.Now().After(deadline) {
			e.Stop()
			return nil, fmt.Errorf("emulator not listening on %s after %s:\n%s", addr, readyTimeout, tail(e.Stderr(), 4<<10))
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

// Stop ends the emulator and the bootstrap it started (the emulator puts
// the bootstrap in a process group of its own, which is found and killed
// too). Stopping twice is harmless.
func (e *Emulator) Stop() {
	select {
	case <-e.exited:
		return
	default:
	}
	killTree(e.cmd.Process.Pid)
	select {
	case <-e.exited:
	case <-time.After(10 * time.Second):
	}
}

// URL is the emulator's base URL (http://127.0.0.1:PORT).
func (e *Emulator) URL() string { return "http://" + e.addr }

// Invoke sends one synchronous invocation, as the SQS event source
// mapping or the scheduler would, and returns the HTTP status and the
// body: the handler's JSON result, Lambda's {"errorType", "errorMessage"}
// for a returned error (still status 200), or a 502 when the runtime
// crashed or failed its init. err is set only when no answer arrived.
// It then waits briefly for the invocation's END line (after a 200) so
// Stdout holds what the invocation wrote.
func (e *Emulator) Invoke(ctx context.Context, payload []byte) (status int, body []byte, err error) {
	requestID, err := newRequestID()
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL()+InvokePath, bytes.NewReader(payload))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	// Our own request id tells this invocation's END line from another's.
	req.Header.Set("X-Amzn-RequestId", requestID)
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("invoke %s: %w", e.name, err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, body, fmt.Errorf("invoke %s: read answer: %w", e.name, err)
	}
	if resp.StatusCode == http.StatusOK {
		e.stdout.waitFor("END RequestId: "+requestID, endLineWait)
	} else {
		// A crashed runtime's last words reach us through pipes, after
		// the answer, and no END line marks their end: wait until the
		// output has been quiet for a moment.
		e.stdout.waitQuiet(300*time.Millisecond, endLineWait)
		e.stderr.waitQuiet(300*time.Millisecond, endLineWait)
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

// Stdout is everything the function wrote, as the emulator relays it: the
// lines CloudWatch Logs would hold (log records, EMF metric lines,
// START/END/REPORT).
func (e *Emulator) Stdout() string { return e.stdout.String() }

// Stderr is the emulator's own log: init and invoke phases, runtime exits.
func (e *Emulator) Stderr() string { return e.stderr.String() }

// syncBuffer is a bytes.Buffer the process writers and readers may use at
// once, and that a reader can wait on.
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

// waitQuiet waits until nothing has been written for quiet, or until
// limit has passed.
func (b *syncBuffer) waitQuiet(quiet, limit time.Duration) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		if b.written == nil {
			b.written = make(chan struct{})
		}
		written := b.written
		b.mu.Unlock()
		select {
		case <-written:
		case <-time.After(quiet):
			return
		case <-deadline.C:
			return
		}
	}
}

// tail keeps the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
