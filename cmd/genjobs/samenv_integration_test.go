//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/emulator"
	"github.com/genjobs/genjobs/internal/dev/invoke"
	"github.com/genjobs/genjobs/internal/dev/samlocal"
	"github.com/genjobs/genjobs/internal/observe"
)

// syncBuffer is a bytes.Buffer safe to read while the command writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSAMEnvStartsEveryFunction runs `genjobs sam-env` (make sam-env) and
// then does what each `sam local invoke` line it prints does, with the
// runtime interface emulator that sam local invoke runs inside its
// container: the environment is the template's variables valued from the
// written --env-vars file (SAM's precedence), the event the one the line
// names. Every function must start and answer without an error.
func TestSAMEnvStartsEveryFunction(t *testing.T) {
	root := invokeTestEnv(t)
	tmpl, err := invoke.LoadTemplate(root)
	if err != nil {
		t.Fatal(err)
	}
	out := ".cache/sam-local-test-" + strings.ReplaceAll(t.Name(), "/", "-")
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(root, out)) })
	ctx, cancel := context.WithCancel(invokeContext(t))
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() { done <- call(ctx, "sam-env", []string{"--out", out}, &stdout, &stderr) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sam-env: %v\n%s", err, stderr.String())
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(stdout.String(), "Ctrl-C removes the stack") {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("sam-env ended: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sam-env printed no commands:\n%s\n%s", stdout.String(), stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	envText, err := os.ReadFile(filepath.Join(root, out, invoke.EnvFileName))
	if err != nil {
		t.Fatal(err)
	}
	file, err := samlocal.ParseEnvFile(envText)
	if err != nil {
		t.Fatal(err)
	}
	rewritten, err := invoke.SampleRewrites(root)
	if err != nil {
		t.Fatal(err)
	}
	commands := invoke.SAMCommands(tmpl, out, rewritten)
	for _, c := range commands {
		if !strings.Contains(stdout.String(), "  "+c+"\n") {
			t.Errorf("sam-env did not print %q:\n%s", c, stdout.String())
		}
	}
	for i, f := range invoke.Functions(tmpl) {
		line := commands[i+1]
		t.Run(f.LogicalID, func(t *testing.T) {
			event := strings.Fields(line)[5] // sam local invoke ID -e EVENT ...
			payload, err := os.ReadFile(filepath.Join(root, event))
			if err != nil {
				t.Fatal(err)
			}
			env, err := tmpl.Apply(file, f.LogicalID)
			if err != nil {
				t.Fatal(err)
			}
			fn, _ := tmpl.Function(f.LogicalID)
			// What sam local invoke adds besides the template's
			// variables: credentials (the shell's; any work locally).
			maps.Copy(env, fn.Runtime("local", "local"))
			timeout := f.Timeout
			if f.Name == "observe" {
				// Its feed stops 3 s after the start: holding nothing, it
				// would wait out one empty 20 s receive.
				timeout = observe.DefaultFeedMargin + 3*time.Second
			}
			emu, err := emulator.Start(ctx, emulator.Config{Root: root, Function: f.Name, Env: env,
				Timeout: timeout, MemoryMB: f.MemoryMB, Region: "us-east-1"})
			if err != nil {
				t.Fatal(err)
			}
			defer emu.Stop()
			status, body, err := emu.Invoke(ctx, payload)
			if err != nil {
				t.Fatal(err)
			}
			var answer map[string]json.RawMessage
			if status != 200 || json.Unmarshal(body, &answer) != nil || answer["errorType"] != nil {
				t.Fatalf("%s: HTTP %d, %s\n%s", line, status, body, emu.Stdout())
			}
			if f.Kind == invoke.KindSQS && string(answer["batchItemFailures"]) != "[]" {
				t.Errorf("%s: %s, want no batch item failures\n%s", line, body, emu.Stdout())
			}
		})
	}
}
