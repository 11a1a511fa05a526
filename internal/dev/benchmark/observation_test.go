package benchmark

import (
	"bytes"
	"context"
	"os"
	"testing"
	"testing/synctest"
	"time"
)

// observe runs each scenario in a bubble of its own.
func observe(t *testing.T, ss ...ObservationScenario) []*Observed {
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
		o.Wall = time.Since(start)
		t.Logf("%s: %s", s.Name, o.Wall)
		out = append(out, o)
	}
	return out
}

// TestObservationFigures writes the observation benchmark's report to
// GENJOBS_OBSERVATION_OUT (make bench); without it, it runs a small set.
func TestObservationFigures(t *testing.T) {
	out := os.Getenv("GENJOBS_OBSERVATION_OUT")
	var ss []ObservationScenario
	for _, l := range []time.Duration{30 * time.Second, 95 * time.Second, 300 * time.Second, 20 * time.Minute, 2 * time.Hour} {
		ss = append(ss, LengthScenario(l, 20))
	}
	for _, n := range []int{10, 100, 1000} {
		ss = append(ss, LoadScenario(n, 3))
	}
	obs := observe(t, ss...)
	var b bytes.Buffer
	if err := WriteObservation(&b, obs); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	if out != "" {
		if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
