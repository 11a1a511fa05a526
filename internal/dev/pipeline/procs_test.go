package pipeline

import (
	"runtime"
	"testing"
)

// Not parallel: it reads and sets the process's GOMAXPROCS, and the
// package's parallel tests (which run Run) wait for it to finish.
func TestRaiseProcs(t *testing.T) {
	t.Setenv("GOMAXPROCS", "") // whatever the caller's environment says
	base := runtime.GOMAXPROCS(0)
	first := RaiseProcs()
	if got := runtime.GOMAXPROCS(0); got != base+ExtraProcs {
		t.Fatalf("raised: GOMAXPROCS %d, want %d", got, base+ExtraProcs)
	}
	second := RaiseProcs()
	first()
	first() // a second release is a no-op
	if got := runtime.GOMAXPROCS(0); got != base+ExtraProcs {
		t.Fatalf("one of two holders released: GOMAXPROCS %d, want %d", got, base+ExtraProcs)
	}
	second()
	if got := runtime.GOMAXPROCS(0); got != base {
		t.Fatalf("released: GOMAXPROCS %d, want %d", got, base)
	}
	t.Setenv("GOMAXPROCS", "1")
	RaiseProcs()()
	if got := runtime.GOMAXPROCS(0); got != base {
		t.Fatalf("with GOMAXPROCS set in the environment: %d, want %d untouched", got, base)
	}
}
