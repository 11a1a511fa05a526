//go:build integration

package emulator

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/modroot"
	"github.com/genjobs/genjobs/internal/dev/testenv"
)

// echo is the harness's own test function (testdata/echo).
const echo = "./internal/dev/emulator/testdata/echo"

// start starts cfg (the echo function in the module) for one test, as
// lambdatest.Start does for the functions.
func start(t *testing.T, cfg Config) *Emulator {
	t.Helper()
	root, err := modroot.Find("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Root, cfg.Function = root, echo
	e, err := Start(context.Background(), cfg)
	if errors.Is(err, ErrNotInstalled) {
		testenv.Skip(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	return e
}

type echoAnswer struct {
	Payload  json.RawMessage   `json:"payload"`
	Env      map[string]string `json:"env"`
	PID      int               `json:"pid"`
	Deadline bool              `json:"deadline"`
}

func invokeEcho(t *testing.T, f *Emulator, req string) echoAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	status, body, err := f.Invoke(ctx, []byte(req))
	if err != nil {
		t.Fatal(err)
	}
	if status != 200 {
		t.Fatalf("status %d, body %s", status, body)
	}
	var a echoAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	return a
}

// TestEnvironmentIsExactlyTheConfig checks that the function sees
// Lambda's reserved variables and the caller's map, and nothing of the
// test process's environment: a variable the template forgot must be
// missing under the emulator too.
func TestEnvironmentIsExactlyTheConfig(t *testing.T) {
	t.Setenv("LAMBDATEST_LEAK", "from the test process")
	f := start(t, Config{Env: map[string]string{"FOO": "bar"}, Timeout: 7 * time.Second, MemoryMB: 256})
	a := invokeEcho(t, f, `{"env":["FOO","LAMBDATEST_LEAK","HOME","AWS_LAMBDA_FUNCTION_NAME","AWS_LAMBDA_FUNCTION_TIMEOUT","AWS_LAMBDA_FUNCTION_MEMORY_SIZE","AWS_REGION","AWS_LAMBDA_RUNTIME_API"]}`)
	want := map[string]string{
		"FOO": "bar", "AWS_LAMBDA_FUNCTION_NAME": "echo", "AWS_LAMBDA_FUNCTION_TIMEOUT": "7",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256", "AWS_REGION": DefaultRegion,
	}
	for k, v := range want {
		if a.Env[k] != v {
			t.Errorf("%s = %q, want %q", k, a.Env[k], v)
		}
	}
	for _, k := range []string{"LAMBDATEST_LEAK", "HOME"} {
		if v, ok := a.Env[k]; ok {
			t.Errorf("%s = %q reached the function", k, v)
		}
	}
	if a.Env["AWS_LAMBDA_RUNTIME_API"] == "" || a.Env["AWS_LAMBDA_RUNTIME_API"] == "127.0.0.1:9001" {
		t.Errorf("runtime API at %q, want a private port", a.Env["AWS_LAMBDA_RUNTIME_API"])
	}
	if !a.Deadline {
		t.Error("the invocation carried no deadline")
	}
}

// TestInvokeOutputAndTiming checks the answer, the captured output and
// the first-invoke timing.
func TestInvokeOutputAndTiming(t *testing.T) {
	f := start(t, Config{})
	if f.FirstInvoke() != 0 {
		t.Fatal("FirstInvoke set before any invocation")
	}
	a := invokeEcho(t, f, `{"n":1}`)
	first := f.FirstInvoke()
	if first <= 0 {
		t.Fatal("FirstInvoke not set after the first invocation")
	}
	start := time.Now()
	b := invokeEcho(t, f, `{"n":2}`)
	warm := time.Since(start)
	t.Logf("echo: first invoke %v, warm invoke %v", first, warm)
	if f.FirstInvoke() != first {
		t.Error("FirstInvoke changed after a later invocation")
	}
	// Invoke returns once each successful invocation's END line is in.
	if n := strings.Count(f.Stdout(), "END RequestId:"); n != 2 {
		t.Errorf("%d END lines after two invocations:\n%s", n, f.Stdout())
	}
	if string(a.Payload) != `{"n":1}` || string(b.Payload) != `{"n":2}` {
		t.Errorf("payloads %s, %s", a.Payload, b.Payload)
	}
	if a.PID != b.PID {
		t.Errorf("warm invocation ran in a new process (%d, then %d)", a.PID, b.PID)
	}
	for _, want := range []string{"echo: init on stderr", "echo: invoked on stdout", "START RequestId:", "END RequestId:"} {
		if !f.WaitStdout(want, 5*time.Second) {
			t.Errorf("output lacks %q:\n%s", want, f.Stdout())
		}
	}
	if !f.WaitStderr("INIT START", 5*time.Second) {
		t.Errorf("emulator log lacks INIT START:\n%s", f.Stderr())
	}
}

// TestReturnedErrorAnswers200 pins down how a handler error comes back,
// which the function tests rely on: status 200 with Lambda's error object.
func TestReturnedErrorAnswers200(t *testing.T) {
	f := start(t, Config{})
	status, body, err := f.Invoke(context.Background(), []byte(`{"fail":"boom"}`))
	if err != nil {
		t.Fatal(err)
	}
	var e struct{ ErrorType, ErrorMessage string }
	if jerr := json.Unmarshal(body, &e); status != 200 || jerr != nil || e.ErrorMessage != "echo: boom" {
		t.Fatalf("status %d, body %s", status, body)
	}
}

// TestParallelEmulators runs several emulators at once: each has its own
// ports, so none answers for another.
func TestParallelEmulators(t *testing.T) {
	for i := range 3 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			f := start(t, Config{Env: map[string]string{"INSTANCE": strconv.Itoa(i)}})
			a := invokeEcho(t, f, `{"env":["INSTANCE"]}`)
			if a.Env["INSTANCE"] != strconv.Itoa(i) {
				t.Errorf("instance %d answered as %q", i, a.Env["INSTANCE"])
			}
		})
	}
}

// TestCleanupKillsEverything checks that a test's cleanup leaves neither
// the emulator nor the bootstrap running, even when the bootstrap is busy
// in a handler (the emulator puts it in a process group of its own).
func TestCleanupKillsEverything(t *testing.T) {
	var rie, bootstrap int
	t.Run("run", func(t *testing.T) {
		f := start(t, Config{})
		bootstrap = invokeEcho(t, f, `{}`).PID
		rie = f.PID()
		// Leave the bootstrap busy in a handler when cleanup comes.
		go func() { _, _, _ = f.Invoke(context.Background(), []byte(`{"sleep":"30s"}`)) }()
		time.Sleep(200 * time.Millisecond)
	})
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range []int{rie, bootstrap} {
		for running(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d still running after cleanup", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// running reports whether pid exists and is not a zombie waiting for its
// parent to reap it.
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}
