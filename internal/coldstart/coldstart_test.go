package coldstart

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestInitFailureLine: the line Fatal writes is one JSON object whose
// message and function fields are what template.yaml's init-failure
// metric filters select ({ $.msg = "init failed" }, $.function).
func TestInitFailureLine(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logInitFailure(&buf, "observe", errors.New("configuration: TABLE_NAME is required"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines, want 1: %q", len(lines), buf.String())
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatalf("not one JSON object: %v: %s", err, lines[0])
	}
	if got[slog.MessageKey] != InitFailed || got[FunctionKey] != "observe" || got[slog.LevelKey] != "ERROR" {
		t.Errorf("line %v: want %s=%q, %s=observe, level ERROR", got, slog.MessageKey, InitFailed, FunctionKey)
	}
}

// The soft memory limit is most of the sandbox's memory, and the
// operator's GOMEMLIMIT wins.
func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env   map[string]string
		limit int64
		ok    bool
	}{
		{map[string]string{"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "128"}, 128 << 20 * 85 / 100, true},
		{map[string]string{"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512"}, 512 << 20 * 85 / 100, true},
		{map[string]string{"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "128", "GOMEMLIMIT": "90MiB"}, 0, false},
		{map[string]string{}, 0, false},
		{map[string]string{"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "lots"}, 0, false},
		{map[string]string{"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "0"}, 0, false},
	} {
		limit, ok := MemoryLimit(func(k string) string { return tc.env[k] })
		if limit != tc.limit || ok != tc.ok {
			t.Errorf("%v: %d, %v; want %d, %v", tc.env, limit, ok, tc.limit, tc.ok)
		}
	}
}
