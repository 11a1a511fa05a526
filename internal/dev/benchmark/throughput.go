package benchmark

import (
	"math"
	"slices"
	"time"
)

// Throughput is the throughput section: paired rounds of the local
// pipeline with instant renders, each against a limit measured in the same
// round. It is a developer-tool figure: how close the local pipeline comes
// to what this machine allows, not a forecast of AWS.
type Throughput struct {
	// Rounds are the paired rounds, in the order they ran.
	Rounds []Round
	// LoadBefore and LoadAfter are the 1-minute load average before the
	// first round and after the last ("" where unknown).
	LoadBefore, LoadAfter string
	// Skipped says why there are no rounds, if there are none.
	Skipped string
}

// Round is one paired round: the pipeline on disk, then on tmpfs, then the
// disk's fsync rate, back to back so that all three share the machine's
// load.
type Round struct {
	Disk, Tmpfs *PipelineResult
	// SyncsPerSecond is the state dir's file system's rate of small
	// fdatasync'd writes (syncRate).
	SyncsPerSecond float64
	// Cores is the CPUs the process may use.
	Cores int
}

// OpsPerSecond is a run's delivered operations per second.
func OpsPerSecond(r *PipelineResult) float64 {
	if r == nil || r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Delivered) / r.Elapsed.Seconds()
}

// CPUPerOp is the tmpfs run's CPU per operation: handlers, queue and
// simulator, with no fsync to wait for.
func (r Round) CPUPerOp() time.Duration { return cpuPerOp(r.Tmpfs) }

// cpuPerOp is a run's process CPU time per delivered operation.
func cpuPerOp(p *PipelineResult) time.Duration {
	if p == nil || p.Delivered == 0 {
		return 0
	}
	return p.CPU / time.Duration(p.Delivered)
}

// CPULimit is the operations per second the CPU allows: Cores ÷ CPUPerOp.
func (r Round) CPULimit() float64 {
	if c := r.CPUPerOp(); c > 0 {
		return float64(r.Cores) / c.Seconds()
	}
	return math.Inf(1)
}

// OpsPerSync is the disk run's operations per fsync of the store and the
// artifact pack together: what group commit buys.
func (r Round) OpsPerSync() float64 {
	if r.Disk == nil || r.Disk.Syncs == 0 {
		return math.Inf(1)
	}
	return float64(r.Disk.Delivered) / float64(r.Disk.Syncs)
}

// SyncLimit is the operations per second the file system's fsync rate
// allows at the disk run's operations per fsync.
func (r Round) SyncLimit() float64 { return r.SyncsPerSecond * r.OpsPerSync() }

// Limit is the smaller of CPULimit and SyncLimit.
func (r Round) Limit() float64 { return min(r.CPULimit(), r.SyncLimit()) }

// Ratio is the disk run's operations per second ÷ Limit (0 without a
// finite limit).
func (r Round) Ratio() float64 {
	l := r.Limit()
	if math.IsInf(l, 1) || l <= 0 {
		return 0
	}
	return OpsPerSecond(r.Disk) / l
}

// each is f of every round, in order.
func (t Throughput) each(f func(Round) float64) []float64 {
	out := make([]float64, len(t.Rounds))
	for i, r := range t.Rounds {
		out[i] = f(r)
	}
	return out
}

// medianRange is xs' median (the mean of the middle two for an even
// count) and its least and greatest; zeros for none.
func medianRange(xs []float64) (med, lo, hi float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	s := slices.Sorted(slices.Values(xs))
	m := len(s) / 2
	med = s[m]
	if len(s)%2 == 0 {
		med = (s[m-1] + s[m]) / 2
	}
	return med, s[0], s[len(s)-1]
}
