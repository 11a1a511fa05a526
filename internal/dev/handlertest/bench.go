package handlertest

import (
	"testing"
	"time"
)

// BenchStores are the stores the handler benchmarks run on, each a
// sub-benchmark: the embedded store as genjobs local opens it (an fsync
// per commit) and the same without fsync. The difference between their
// wall time per action is the storage's latency; CPU per action is the
// handler's cost either way.
var BenchStores = []string{"bolt", "bolt-nosync"}

// ReportAction reports a handler benchmark's figures per action, for the
// b.N actions run since cpu0 (CPUTime at ResetTimer): actions/s and
// wall-µs/action from b.Elapsed, and cpu-µs/action, the process's user +
// system CPU time (getrusage) — the in-process Genace simulator's share
// included, the time spent waiting for the disk not.
func ReportAction(b *testing.B, cpu0 time.Duration) {
	cpu := CPUTime() - cpu0
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "actions/s")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "wall-µs/action")
	if cpu > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/action")
	}
}
