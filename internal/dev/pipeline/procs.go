package pipeline

import (
	"os"
	"runtime"
	"strconv"
	"sync"
)

// ExtraProcs is how many Ps a local run adds to GOMAXPROCS. Its two
// stores each fsync on one goroutine at a time (bbolt's commit leader,
// the artifact pack's), and a thread in fsync keeps its P until sysmon
// takes it back (runtime.retake): only after one or two sysmon ticks (20
// µs, backing off to 10 ms when it has had nothing to take), and not at
// all while another P is idle or spinning, for up to 10 ms. On a 2-core
// machine that left about 0.4 of the 2 CPUs idle on disk; two Ps more
// keep them busy. On this project's 2-core machine with an ext4 disk it
// took a local run from about 0.78 to 0.97 of its speed on tmpfs
// (docs/benchmarks.md).
const ExtraProcs = 2

var procs struct {
	sync.Mutex
	holders, prev int
}

// RaiseProcs adds ExtraProcs to GOMAXPROCS for as long as a local run
// holds it, unless the environment sets GOMAXPROCS (the user's word wins),
// and returns what releases it. Concurrent runs share one raise; the last
// release restores the value before the first, unless something else
// changed it meanwhile. Setting GOMAXPROCS stops the runtime's automatic
// updates to it for the rest of the process: a local run's process ends
// with the run.
func RaiseProcs() (release func()) {
	if n, err := strconv.Atoi(os.Getenv("GOMAXPROCS")); err == nil && n > 0 {
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
			if procs.holders--; procs.holders == 0 && runtime.GOMAXPROCS(0) == procs.prev+ExtraProcs {
				runtime.GOMAXPROCS(procs.prev)
			}
		})
	}
}
