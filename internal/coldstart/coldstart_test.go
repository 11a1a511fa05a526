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
