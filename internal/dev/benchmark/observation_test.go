package benchmark

import (
	"bytes"
	"context"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// runScenarios runs each scenario in a bubble of its own.
func runScenarios(t *testing.T, ss ...ObservationScenario) []*Observed {
	t.Helper()
	var out []*Observed
	for _, s := range ss {
		start := time.Now()
		var o *Observed
		synctest.Test(t, func(t *testing.T) {
			var err error
			if o, err = RunObservation(context.Background(), s); err != nil {
				t.Fatal(err)
			}
		})
		if o == nil {
			t.FailNow()
		}
		if f := o.Result.SweepFailures; len(f) > 0 {
			t.Errorf("%s: %d sweep runs failed, the first: %s", s.Name, len(f), f[0])
		}
		o.Wall = time.Since(start)
		t.Logf("%s: %s", s.Name, o.Wall)
		out = append(out, o)
	}
	return out
}

// TestObservationFigures writes the observation benchmark's report to
// GENJOBS_OBSERVATION_OUT (make bench). Without it, it runs a few small
// scenarios and holds them to the targets for GETs and detection.
func TestObservationFigures(t *testing.T) {
	out := os.Getenv("GENJOBS_OBSERVATION_OUT")
	// Renders of exactly ten windows hold the overlap to its arithmetic:
	// at 500 ms they took an eleventh (1.083× the floor).
	ss := []ObservationScenario{LengthScenario(95*time.Second, 5), LengthScenario(5*time.Minute, 20), LoadScenario(10, 1)}
	if out != "" {
		ss = ss[:0]
		for _, l := range []time.Duration{30 * time.Second, 95 * time.Second, 300 * time.Second, 20 * time.Minute, 2 * time.Hour} {
			ss = append(ss, LengthScenario(l, 20))
		}
		for _, n := range []int{10, 100, 1000, 10000} {
			// Six mean render times, and at least 1,200 renders, so that
			// a 99.9th percentile is not merely the largest.
			ss = append(ss, LoadScenario(n, max(6, 1200/n)))
		}
		ss = append(ss, SurgeScenario(10000, 2))
	}
	if only := os.Getenv("GENJOBS_OBSERVATION_ONLY"); only != "" {
		ss = slices.DeleteFunc(ss, func(s ObservationScenario) bool { return !strings.Contains(s.Name, only) })
	}
	obs := runScenarios(t, ss...)
	var b bytes.Buffer
	if err := WriteObservation(&b, obs); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	if out != "" {
		if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, o := range obs {
		if gets, floor := o.GETsPerRender(); gets > 1.05*floor {
			t.Errorf("%s: %.2f GETs per render, floor %.2f", o.Scenario.Name, gets, floor)
		}
		if d := o.Detection(0.99); d <= 0 || d > 2*time.Second {
			t.Errorf("%s: detection p99 %v, want within (0, 2 s]", o.Scenario.Name, d)
		}
		if inv := o.Result.Invocations["observe"]; inv.Count == 0 || inv.GBSeconds() <= 0 {
			t.Errorf("%s: observe invocations not timed: %+v", o.Scenario.Name, inv)
		}
	}
}

// The standard render times' median and 95th percentile are 60 s and
// 10 min on a large seeded sample, and a seed replays exactly.
func TestStandardRenders(t *testing.T) {
	t.Parallel()
	if math.Abs(standardRenderSigma-math.Log(10)/1.645) > 1e-3 {
		t.Errorf("sigma = %v, want ln(10)/1.645", standardRenderSigma)
	}
	got := StandardRenders(200000, 42)
	if !slices.Equal(got, StandardRenders(200000, 42)) {
		t.Fatal("the same seed gave another sample")
	}
	if slices.Equal(got[:100], StandardRenders(100, 43)) {
		t.Fatal("another seed gave the same sample")
	}
	s := slices.Clone(got)
	slices.Sort(s)
	// Nearest rank: the ⌈q·n⌉-th smallest.
	rank := func(q float64) time.Duration { return s[int(math.Ceil(q*float64(len(s))))-1] }
	if med := rank(0.5); math.Abs(med.Seconds()-60)/60 > 0.01 {
		t.Errorf("median %v, want 60 s ±1 %%", med)
	}
	if p95 := rank(0.95); math.Abs(p95.Seconds()-600)/600 > 0.03 {
		t.Errorf("p95 %v, want 600 s ±3 %%", p95)
	}
}
