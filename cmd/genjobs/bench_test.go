package main

import (
	"bytes"
	"context"
	"errors"
	"github.com/genjobs/genjobs/internal/operator"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchQuickWritesTableAndPlot runs `genjobs bench --quick` and checks
// the table on stdout (the model, the costs, throughput and the scale
// table with its small simulation) and the files under --out.
func TestBenchQuickWritesTableAndPlot(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	if err := call(context.Background(), "bench", []string{"--quick", "--renders", "300", "--seed", "7", "--out", out}, &stdout, &stderr); err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"| section | figure | value | target | verdict |", "GETs per render — genjobs / the floor", "$ per 1,000 renders", "end-to-end operations/s", "### Scale: renders in flight", "scale: 500 operations"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(md, stdout.Bytes()) {
		t.Error("results.md differs from what was printed")
	}
	for _, name := range []string{"observation.png", "cost-latency.png", "gets-floor.png"} {
		png, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("%s is not a PNG", name)
		}
	}
}

func TestBenchRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--renders", "0"}, {"extra"}, {"--out", ""}, {"--seed", "x"}} {
		err := call(context.Background(), "bench", args, &bytes.Buffer{}, &bytes.Buffer{})
		var ue *operator.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: got %v, want a usage error", args, err)
		}
	}
}
