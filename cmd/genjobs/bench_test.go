package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchQuickWritesTableAndPlot runs `genjobs bench --quick` and checks
// the table on stdout and the two files under --out.
func TestBenchQuickWritesTableAndPlot(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	if err := call(context.Background(), "bench", []string{"--quick", "--renders", "300", "--seed", "7", "--out", out}, &stdout, &stderr); err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"| section | figure | value | target | verdict |", "GETs per render — genjobs, default policy", "$ per 1,000 renders", "end-to-end operations/s"} {
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
	png, err := os.ReadFile(filepath.Join(out, "observation.png"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Error("observation.png is not a PNG")
	}
}

func TestBenchRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--renders", "0"}, {"extra"}, {"--out", ""}, {"--seed", "x"}} {
		err := call(context.Background(), "bench", args, &bytes.Buffer{}, &bytes.Buffer{})
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: got %v, want a usage error", args, err)
		}
	}
}
