package pipeline

import (
	"os"
	"runtime"
	"sync"
)

// ExtraProcs is how many Ps a local run adds to GOMAXPROCS. Its two
// stores each fsync on one goroutine at a time (bbolt's commit leader,
// the artifact pack's), and Go leaves a P with the thread blocked in a
// syscall while that P's run queue is empty and another P is idle or
// spinning, for up to 10 ms (runtime.retake): on 2 CPUs every fsync then
// idles one of them. Two Ps more than the CPUs keep them busy: on a
// 2-core machine with an ext4 disk it took a local run from about 0.75 to
// 0.93 of its speed on tmpfs (docs/benchmarks.md).
const ExtraProcs = 2

var procs struct {
	sync.Mutex
	holders, prev int
}

// RaiseProcs adds ExtraProcs to GOMAXPROCS for as long as a local run
// holds it, unless the environment sets GOMAXPROCS (the user's word wins),
// and returns what releases it. Concurrent runs share one raise; the last
// release restores the value before the first.
func RaiseProcs() (release func()) {
	if os.Getenv("GOMAXPROCS") != "" {
		return func() {}
	}
	procs.Lock()
	defer procs.Unlock()
	if procs.holders == 0 {
		procs.prev = runtime.GOMAXPROCS(0)
		runtime.GOMAXPROCS(procs.prev + ExtraProcs)
	}
	procs.holders++
	var once sync.Once
	return func() {
		once.Do(func() {
			procs.Lock()
			defer procs.Unlock()
			if procs.holders--; procs.holders == 0 {
				runtime.GOMAXPROCS(procs.prev)
			}
		})
	}
}
