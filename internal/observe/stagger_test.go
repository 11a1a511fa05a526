package observe

import (
	"fmt"
	"testing"
	"time"
)

// An invocation's chains hand over spread across Spread, not at once: the
// same message always at the same share, the shares of many messages
// covering the whole of it.
func TestStaggerSpreadsHandOvers(t *testing.T) {
	t.Parallel()
	const spread = 2 * time.Minute
	var lo, hi time.Duration = spread, 0
	quarters := map[int]int{}
	for i := range 1000 {
		id := fmt.Sprintf("message-%04d", i)
		d := stagger(id, spread)
		if d < 0 || d >= spread || d != stagger(id, spread) {
			t.Fatalf("stagger(%s) = %v (again %v), want a fixed share of [0, %v)", id, d, stagger(id, spread), spread)
		}
		lo, hi = min(lo, d), max(hi, d)
		quarters[int(4*d/spread)]++
	}
	for q := range 4 {
		if quarters[q] < 200 {
			t.Errorf("quarter %d of the spread holds %d of 1000 hand-overs: %v", q, quarters[q], quarters)
		}
	}
	if stagger("m", 0) != 0 || stagger("m", -1) != 0 {
		t.Error("no spread must stagger nothing")
	}
}
