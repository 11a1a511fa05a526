package benchmark

import (
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/topology"
)

// fakeRun is a throughput run measured at rates operations per second.
func fakeRun(name string, rates ...float64) ThroughputRun {
	t := ThroughputRun{Name: name, Rates: rates}
	best := 0.0
	for _, r := range rates {
		best = max(best, r)
	}
	t.Result = &PipelineResult{Operations: 1000, Delivered: 1000, Elapsed: time.Duration(float64(time.Second) * 1000 / best),
		Functions: map[string]FunctionStats{topology.Submit: {Actions: 1000}}}
	return t
}

// The throughput targets print as ratios from one run: disk ops/s against
// 500, and disk against tmpfs against 0.8, each with its verdict, and the
// spread of the runs kept.
func TestThroughputRowsAreRatios(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		disk, shm []float64
		diskRow   []string
		ratioRow  []string
	}{
		{"both met", []float64{540, 620, 600}, []float64{700, 760, 740},
			[]string{"620 ops/s", "best of 3; runs 540–620 ops/s", "1.24× the target", "**met**"},
			[]string{"0.82 (620 / 760 ops/s)", "≥ 0.8", "**met**"}},
		{"disk short, ratio short", []float64{400}, []float64{1000},
			[]string{"400 ops/s", "best of 1)", "0.80× the target", "**missed** by 100 ops/s"},
			[]string{"0.40 (400 / 1000 ops/s)", "**missed** by 0.40"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &Results{Count: &PipelineResult{}, Throughput: []ThroughputRun{fakeRun("disk", tc.disk...), fakeRun("tmpfs", tc.shm...)}}
			var disk, ratio string
			for _, row := range r.rows() {
				line := strings.Join([]string{row.figure, row.value, row.target, row.verdict}, " | ")
				switch {
				case strings.HasSuffix(row.figure, "— disk"):
					disk = line
				case strings.HasPrefix(row.figure, "disk / tmpfs"):
					ratio = line
				}
			}
			for _, want := range tc.diskRow {
				if !strings.Contains(disk, want) {
					t.Errorf("disk row %q lacks %q", disk, want)
				}
			}
			for _, want := range tc.ratioRow {
				if !strings.Contains(ratio, want) {
					t.Errorf("ratio row %q lacks %q", ratio, want)
				}
			}
		})
	}
}
