package benchmark

import (
	"math"
	"strings"
	"testing"
	"time"
)

// round is a paired round: disk at diskOps/s with syncs fsyncs per 1,000
// operations, tmpfs at cpuMS of CPU per operation, the disk at rate
// fdatasyncs/s, on 2 cores.
func round(diskOps float64, syncs int64, cpuMS, rate float64) Round {
	const ops = 1000
	return Round{
		Disk:           &PipelineResult{Operations: ops, Delivered: ops, Elapsed: time.Duration(ops / diskOps * float64(time.Second)), Syncs: syncs},
		Tmpfs:          &PipelineResult{Operations: ops, Delivered: ops, Elapsed: time.Second, CPU: time.Duration(ops * cpuMS * float64(time.Millisecond))},
		SyncsPerSecond: rate, Cores: 2,
	}
}

// A round's limit is the smaller of cores ÷ CPU per operation and the fsync
// rate × operations per fsync, and its ratio the disk rate over it.
func TestRoundLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                                 string
		r                                    Round
		cpuLimit, opsPerSync, syncLimit, lim float64
		ratio                                float64
	}{
		// 2 cores ÷ 4 ms = 500; 1,000 fsyncs/s × 1,000/500 = 2,000.
		{"CPU binds", round(450, 500, 4, 1000), 500, 2, 2000, 500, 0.9},
		// 2 ÷ 1 ms = 2,000; 100/s × 1,000/400 = 250.
		{"fsync binds", round(200, 400, 1, 100), 2000, 2.5, 250, 250, 0.8},
		// No fsync counted: only the CPU limits.
		{"no fsyncs", round(300, 0, 5, 100), 400, math.Inf(1), math.Inf(1), 400, 0.75},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := tc.r
			near := func(what string, got, want float64) {
				if !(math.IsInf(want, 1) && math.IsInf(got, 1)) && math.Abs(got-want) > 1e-6*want {
					t.Errorf("%s = %v, want %v", what, got, want)
				}
			}
			near("CPULimit", r.CPULimit(), tc.cpuLimit)
			near("OpsPerSync", r.OpsPerSync(), tc.opsPerSync)
			near("SyncLimit", r.SyncLimit(), tc.syncLimit)
			near("Limit", r.Limit(), tc.lim)
			near("Ratio", r.Ratio(), tc.ratio)
		})
	}
}

// The section reports the median of the rounds' ratios with their spread,
// met at 0.9 of the limit.
func TestThroughputMedianOfRounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		ratios []float64
		want   []string
	}{
		{"odd", []float64{0.95, 0.74, 0.91}, []string{"0.91 (rounds 0.74–0.95;", "**met**"}},
		{"even", []float64{0.8, 0.98, 0.86, 1.2}, []string{"0.92 (rounds 0.80–1.20;", "**met**"}},
		{"short", []float64{0.5, 0.89, 1.89}, []string{"0.89 (rounds 0.50–1.89;", "**missed** by 0.01"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			th := Throughput{LoadBefore: "0.5", LoadAfter: "1.1"}
			for _, q := range tc.ratios {
				th.Rounds = append(th.Rounds, round(500*q, 500, 4, 1000)) // limit 500
			}
			head := th.rows()[0]
			line := strings.Join([]string{head.value, head.verdict}, " | ")
			for _, want := range append(tc.want, "load average 0.5 before, 1.1 after", "not a forecast of AWS") {
				if !strings.Contains(line+head.figure+head.section, want) {
					t.Errorf("headline %q (figure %q) lacks %q", line, head.figure, want)
				}
			}
		})
	}
}
