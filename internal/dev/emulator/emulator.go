package emulator

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// startAttempts bounds restarts when a port found free was taken
	// before the emulator bound it (a race, not a failure).
	startAttempts = 5
	readyTimeout  = 20 * time.Second // the wait for the emulator to listen
	endLineWait   = 2 * time.Second  // the wait for an invocation's output
)

// Defaults for Config's zero fields. The timeout is the template's (a
// submit must keep 25 s in hand before it POSTs), the memory size
// Lambda's smallest.
const (
	DefaultTimeout  = 60 * time.Second
	DefaultMemoryMB = 128
	DefaultRegion   = "us-east-1"
)

// Config describes one function under the emulator.
type Config struct {
	// Root is the module root: where the emulator is installed (Path)
	// and Function is built.
	Root string
	// Function is a folder under functions/ (or a "./"-prefixed package
	// path); its base name is AWS_LAMBDA_FUNCTION_NAME.
	Function string
	// Bootstrap is the function's executable; empty, Start builds
	// Function (Build).
	Bootstrap string
	// Env is the function's whole environment but for Lambda's reserved
	// variables (set from the fields below, and winning over Env): nothing
	// of this process's environment reaches the function.
	Env map[string]string
	// Timeout is AWS_LAMBDA_FUNCTION_TIMEOUT (whole seconds, rounded
	// up), each invocation's deadline; MemoryMB is
	// AWS_LAMBDA_FUNCTION_MEMORY_SIZE (not enforced); Region is AWS_REGION
	// and AWS_DEFAULT_REGION. Zero values take the Default* constants.
	Timeout  time.Duration
	MemoryMB int
	Region   string
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

	invokes  atomic.Int64
	firstDur atomic.Int64 // nanoseconds
}

// Start starts the emulator on two free loopback ports with exactly cfg's
// environment and waits until it accepts invocations; the bootstrap starts
// on the first one. Without the emulator the error is ErrNotInstalled.
func Start(ctx context.Context, cfg Config) (*Emulator, error) {
	rie, err := Installed(cfg.Root)
	if err != nil {
		return nil, err
	}
	if cfg.Bootstrap == "" {
		if cfg.Bootstrap, err = Build(ctx, cfg.Root, cfg.Function); err != nil {
			return nil, err
		}
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.MemoryMB = cmp.Or(cfg.MemoryMB, DefaultMemoryMB)
	cfg.Region = cmp.Or(cfg.Region, DefaultRegion)
	env := environment(cfg)
	var lastErr error
	for range startAttempts {
		e, err := launch(rie, cfg, env)
		if err == nil {
			return e, nil
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, fmt.Errorf("start the emulator for %s: %w", cfg.Function, lastErr)
}

// environment is the emulator's environment, which it hands on to the
// bootstrap: cfg.Env, then Lambda's reserved variables. PATH, TZ and LANG
// are what Lambda's provided runtimes set; HOME stays unset, as in Lambda.
func environment(cfg Config) []string {
	vars := maps.Clone(cfg.Env)
	if vars == nil {
		vars = map[string]string{}
	}
	maps.Copy(vars, map[string]string{
		"PATH":                            "/usr/local/bin:/usr/bin:/bin",
		"TZ":                              ":UTC",
		"LANG":                            "en_US.UTF-8",
		"LAMBDA_TASK_ROOT":                filepath.Dir(cfg.Bootstrap),
		"AWS_LAMBDA_FUNCTION_NAME":        filepath.Base(cfg.Function),
		"AWS_LAMBDA_FUNCTION_TIMEOUT":     strconv.Itoa(int((cfg.Timeout + time.Second - 1) / time.Second)),
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": strconv.Itoa(cfg.MemoryMB),
		"AWS_LAMBDA_FUNCTION_VERSION":     "$LATEST",
		"AWS_LAMBDA_LOG_GROUP_NAME":       "/aws/lambda/" + filepath.Base(cfg.Function),
		"AWS_REGION":                      cfg.Region,
		"AWS_DEFAULT_REGION":              cfg.Region,
	})
	out := make([]string, 0, len(vars))
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		out = append(out, k+"="+vars[k])
	}
	return out
}

// errPortTaken marks a start that lost a port to another process.
var errPortTaken = errors.New("port taken")

// launch starts one emulator and waits until it listens.
func launch(rie string, cfg Config, env []string) (*Emulator, error) {
	apiAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	e := &Emulator{
		name:   filepath.Base(cfg.Function),
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
		return nil, fmt.Errorf("start %s: %w", rie, err)
	}
	e.cmd = cmd
	go func() { _ = cmd.Wait(); close(e.exited) }()

	// Ready: both ports answer and the emulator still runs (it exits at
	// once when a port is taken, which may then answer for another).
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
			return nil, fmt.Errorf("emulator exited during start-up:\n%s", Tail(log, 4<<10))
		default:
		}
		if time.Now().After(deadline) {
			e.Stop()
			return nil, fmt.Errorf("emulator not listening on %s after %s:\n%s", addr, readyTimeout, Tail(e.Stderr(), 4<<10))
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

// Stop ends the emulator and the bootstrap (killTree), also a bootstrap
// busy in a handler. Stopping twice is harmless.
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

// PID is the emulator's process id.
func (e *Emulator) PID() int { return e.cmd.Process.Pid }

// URL is the emulator's base URL (http://127.0.0.1:PORT), for tools that
// build their own requests.
func (e *Emulator) URL() string { return "http://" + e.addr }

// Invoke sends one synchronous invocation and returns the HTTP status and
// body: the handler's JSON result, Lambda's {"errorType", "errorMessage"}
// for a returned error (still 200), or a 502 when the runtime crashed or
// failed its init. err is set only when no answer arrived. It then waits
// briefly for the END line (after a 200) or for quiet output, so Stdout
// and Stderr hold what the invocation wrote.
func (e *Emulator) Invoke(ctx context.Context, payload []byte) (status int, body []byte, err error) {
	first := e.invokes.Add(1) == 1
	requestID := newRequestID()
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL()+InvokePath, bytes.NewReader(payload))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	// Our own request id (the emulator otherwise makes one up) tells this
	// invocation's END line from another's.
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
	if first {
		e.firstDur.Store(int64(time.Since(start)))
	}
	if resp.StatusCode == http.StatusOK {
		e.stdout.waitFor("END RequestId: "+requestID, endLineWait)
	} else {
		// A crashed runtime's last words arrive through pipes after the
		// answer, and no END line marks their end.
		e.stdout.waitQuiet(300*time.Millisecond, endLineWait)
		e.stderr.waitQuiet(300*time.Millisecond, endLineWait)
	}
	return resp.StatusCode, body, nil
}

// newRequestID makes a random UUID, the shape of Lambda's request ids.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // it never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// FirstInvoke is how long the first Invoke took, request to whole answer:
// the cold start (the emulator defers the bootstrap's start and init to
// the first invocation) plus its work. Zero until it has answered.
func (e *Emulator) FirstInvoke() time.Duration { return time.Duration(e.firstDur.Load()) }

// Stdout is everything the function wrote, stdout and stderr alike, as
// CloudWatch Logs would hold it (with START/END/REPORT lines).
func (e *Emulator) Stdout() string { return e.stdout.String() }

// Stderr is the emulator's own log: init and invoke phases, runtime exits.
func (e *Emulator) Stderr() string { return e.stderr.String() }

// WaitStdout waits up to timeout for s to appear in Stdout and reports
// whether it did.
func (e *Emulator) WaitStdout(s string, timeout time.Duration) bool {
	return e.stdout.waitFor(s, timeout)
}

// WaitStderr waits up to timeout for s to appear in Stderr and reports
// whether it did.
func (e *Emulator) WaitStderr(s string, timeout time.Duration) bool {
	return e.stderr.waitFor(s, timeout)
}

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
		written := b.next()
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
		written := b.next()
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

// next is the channel the next write closes; b.mu is held.
func (b *syncBuffer) next() chan struct{} {
	if b.written == nil {
		b.written = make(chan struct{})
	}
	return b.written
}
