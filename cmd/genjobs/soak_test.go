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

	"github.com/genjobs/genjobs/internal/dev/faultsim"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/operator"
)

func TestSoakPrintsTheFigures(t *testing.T) {
	out := filepath.Join(t.TempDir(), "soak.json")
	var stdout bytes.Buffer
	err := call(context.Background(), "soak", []string{"--operations", "40", "--seed", "5", "--faults", "none", "--quiet", "--json", out}, &stdout, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("soak: %v\n%s", err, stdout.String())
	}
	for _, want := range []string{"40 operations", "virtual in", "Genace:", "faults injected:", "violations: 0",
		"operators asked: 0 operations left uncertain (of 0 made uncertain) per 0 submissions of genuinely unknown outcome = 0.00 (at most 1.00); 0 open reviews on terminal operations (at most 0)"} {
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

// TestSoakScale runs the scale mode on a small burst: standard renders
// with no faults, and the load per service.
func TestSoakScale(t *testing.T) {
	var stdout bytes.Buffer
	err := call(context.Background(), "soak", []string{"--scale", "--operations", "40", "--seed", "5", "--quiet"}, &stdout, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("soak --scale: %v\n%s", err, stdout.String())
	}
	for _, want := range []string{"40 operations, seed 5, faults none", "phases: delivered 40;", "violations: 0", "scale: 40 operations",
		"submit   4 invocations, records per invocation mean 10.00", "delivered 40 of 40"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
}

func TestSoakRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--faults", "nonsense"}, {"--operations", "0"}, {"extra"}} {
		err := call(context.Background(), "soak", args, &bytes.Buffer{}, &bytes.Buffer{})
		var ue *operator.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("%q: want a usage error, got %v", args, err)
		}
	}
}

// TestSoakVerdict holds the soak's verdict to crafted results: it fails on
// a violation and on each figure above its threshold, and names the
// replay command.
func TestSoakVerdict(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		res  faultsim.Result
		want []string // substrings of the error; none: no error
	}{
		{"clean", faultsim.Result{Seed: 7, LeftUncertain: 3, UnknownSubmissions: 3}, nil},
		{"a violation", faultsim.Result{Seed: 7, Violations: []faultsim.Violation{{Invariant: faultsim.InvPosts}}}, []string{"seed 7: 1 invariant violations", "replay: genjobs soak --seed 7"}},
		{"operators asked too often", faultsim.Result{Seed: 42, LeftUncertain: 407, UnknownSubmissions: 327}, []string{"407 operations left uncertain per 327 submissions", "1.24, above 1.00"}},
		{"reviews left on terminal operations", faultsim.Result{Seed: 42, ReviewsOfTerminal: 75}, []string{"75 reviews left open on operations that ended terminal"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := verdict(&tc.res)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("clean run failed: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want one containing %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestScaleSimulationCounts runs the scale simulation at 500 renders in
// flight and holds its counters to what must be true: every render
// delivered once with one POST, submit's batches full (all dispatched at
// once), observe batching many records per invocation, all renders under
// observation at once.
func TestScaleSimulationCounts(t *testing.T) {
	t.Parallel()
	const n = 500
	res, err := faultsim.RunContext(context.Background(), scaleConfig(n, 3))
	if err != nil {
		t.Fatal(err)
	}
	s := res.Scale
	if s == nil {
		t.Fatal("no scale figures")
	}
	if len(res.Violations) > 0 || res.Phases[operation.PhaseDelivered] != n || s.Delivered != n {
		t.Fatalf("delivered %d (phases %v, counted %d), violations %v", res.Phases[operation.PhaseDelivered], res.Phases, s.Delivered, res.Violations)
	}
	if s.Posts != n || res.Posts != n {
		t.Errorf("%d POSTs counted, %d at Genace, want %d", s.Posts, res.Posts, n)
	}
	if s.Gets != int64(res.Gets) || s.Gets < 2*n {
		t.Errorf("%d GETs counted, %d at Genace", s.Gets, res.Gets)
	}
	sub, _ := topology.Stack.Function(topology.Submit)
	if got := s.Functions[topology.Submit]; got.Quantile(0.5) != sub.Mappings[0].BatchSize || got.Records != n {
		t.Errorf("submit: p50 %d records per invocation, %d records; want full batches of %d", got.Quantile(0.5), got.Records, sub.Mappings[0].BatchSize)
	}
	if obs := s.Functions[topology.Observe]; obs.Mean() <= 1 || obs.Quantile(0.99) < 2 {
		t.Errorf("observe: %.2f records per invocation (p99 %d) with %d in flight", obs.Mean(), obs.Quantile(0.99), n)
	}
	if s.PeakObserving != n {
		t.Errorf("peak renders under observation %d, want all %d (accepted at once)", s.PeakObserving, n)
	}
	if s.Writes != res.Writes || s.Writes < 5*n {
		t.Errorf("%d writes counted, %d recorded", s.Writes, res.Writes)
	}
	if sqs := s.SQSSend + s.SQSReceive + s.SQSDelete; s.SQSReceive != res.Invocations[topology.Submit]+res.Invocations[topology.Observe]+res.Invocations[topology.Deliver] || sqs < 3*n {
		t.Errorf("SQS: %d receives for invocations %v, %d requests", s.SQSReceive, res.Invocations, sqs)
	}
	if s.PeakPostsPerSec != n {
		t.Errorf("peak %d POSTs/s, want all %d in the first second", s.PeakPostsPerSec, n)
	}
	if s.LastDelivered <= 0 || s.DeliveredP50 > s.DeliveredP99 || s.DeliveredP99 > s.LastDelivered {
		t.Errorf("delivery times p50 %s p99 %s last %s", s.DeliveredP50, s.DeliveredP99, s.LastDelivered)
	}
}
