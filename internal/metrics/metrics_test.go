package metrics

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
)

func TestEmitsEMF(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	clk := clock.NewManual(time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC))
	e := New(&buf, "observe", clk)
	e.Duration(ActionDuration, 1500*time.Millisecond, Dim{"Action", "observe_generation"}, Dim{"Outcome", "saved"})
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v: %s", err, buf.String())
	}
	if doc[ActionDuration] != 1500.0 || doc["Function"] != "observe" || doc["Outcome"] != "saved" {
		t.Fatalf("wrong fields: %v", doc)
	}
	aws := doc["_aws"].(map[string]any)
	if aws["Timestamp"] != float64(clk.Now().UnixMilli()) {
		t.Fatalf("timestamp %v", aws["Timestamp"])
	}
	dir := aws["CloudWatchMetrics"].([]any)[0].(map[string]any)
	dims := dir["Dimensions"].([]any)[0].([]any)
	if len(dims) != 3 || dims[0] != "Function" || dir["Namespace"] != Namespace {
		t.Fatalf("directive %v", dir)
	}
	m := dir["Metrics"].([]any)[0].(map[string]any)
	if m["Name"] != ActionDuration || m["Unit"] != "Milliseconds" {
		t.Fatalf("metric %v", m)
	}
}

func TestHighCardinalityNeverBecomesADimension(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	e := New(&buf, "submit", clock.Real{})
	e.Count(PostOutcomes, 1,
		Dim{"OperationID", "op-123"},                     // not an allowed dimension
		Dim{"Outcome", "https://x.example/f?sig=secret"}, // not a token
		Dim{"Reason", strings.Repeat("a", 200)},          // too long
	)
	out := buf.String()
	for _, leak := range []string{"op-123", "sig=secret", strings.Repeat("a", 60)} {
		if strings.Contains(out, leak) {
			t.Fatalf("metric line leaks %q: %s", leak, out)
		}
	}
	if !strings.Contains(out, `"Outcome":"other"`) {
		t.Fatalf("unsafe value not replaced: %s", out)
	}
}
