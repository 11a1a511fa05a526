package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSoakPrintsTheFigures(t *testing.T) {
	out := filepath.Join(t.TempDir(), "soak.json")
	var stdout bytes.Buffer
	err := cmdSoak(context.Background(), []string{"--operations", "40", "--seed", "5", "--faults", "none", "--quiet", "--json", out}, &stdout, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("soak: %v\n%s", err, stdout.String())
	}
	for _, want := range []string{"40 operations", "virtual in", "Genace:", "faults injected:", "violations: 0"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Seed       uint64 `json:"seed"`
		Operations int    `json:"operations"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || res.Seed != 5 || res.Operations != 40 {
		t.Fatalf("JSON result: %+v, %v", res, err)
	}
}

func TestSoakRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--faults", "nonsense"}, {"--operations", "0"}, {"extra"}} {
		err := cmdSoak(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("%q: want a usage error, got %v", args, err)
		}
	}
}
