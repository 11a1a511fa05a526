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

// TestBenchQuickWritesTable runs `genjobs bench --quick` and checks the
// table on stdout (requests counted on the real handlers, throughput, and
// what was removed and why) and results.md under --out.
func TestBenchQuickWritesTable(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	if err := call(context.Background(), "bench", []string{"--quick", "--out", out}, &stdout, &stderr); err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"| section | figure | value | target | verdict |", "1 AWS requests (counted on the real handlers)", "per render: SQS Send", "end-to-end ops/s on disk", "issue 23"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	for _, gone := range []string{"the floor E[", "$ per 1,000 renders", "### Scale", ".png"} {
		if strings.Contains(stdout.String(), gone) {
			t.Errorf("stdout still has the model's %q", gone)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(md, stdout.Bytes()) {
		t.Error("results.md differs from what was printed")
	}
}

func TestBenchRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"extra"}, {"--out", ""}, {"--renders", "300"}, {"--scale-sim", "10"}} {
		err := call(context.Background(), "bench", args, &bytes.Buffer{}, &bytes.Buffer{})
		var ue *operator.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: got %v, want a usage error", args, err)
		}
	}
}
