package faultsim_test

import (
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/faultsim"
)

// TestRendersMustCoverTheOperations refuses a run with fewer render
// times than operations before it builds anything.
func TestRendersMustCoverTheOperations(t *testing.T) {
	t.Parallel()
	_, err := faultsim.Run(faultsim.Config{Operations: 5, Renders: []time.Duration{time.Second, time.Second, time.Second}})
	if err == nil || !strings.Contains(err.Error(), "3 render times for 5 operations") {
		t.Fatalf("got %v, want the render times refused", err)
	}
}

// TestBatchQuantiles holds records per invocation to nearest rank.
func TestBatchQuantiles(t *testing.T) {
	t.Parallel()
	// 10 invocations: 6 of one record, 3 of five, 1 of ten.
	f := &faultsim.FunctionScale{Invocations: 10, Records: 6 + 15 + 10, Batches: []int64{0, 6, 0, 0, 0, 3, 0, 0, 0, 0, 1}}
	tests := []struct {
		q    float64
		want int
	}{{0, 1}, {0.5, 1}, {0.6, 1}, {0.61, 5}, {0.9, 5}, {0.91, 10}, {0.99, 10}, {1, 10}}
	for _, tc := range tests {
		if got := f.Quantile(tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %d, want %d", tc.q, got, tc.want)
		}
	}
	if got := f.Mean(); got != 3.1 {
		t.Errorf("Mean = %v, want 3.1", got)
	}
	var none *faultsim.FunctionScale
	if none.Mean() != 0 || none.Quantile(0.5) != 0 {
		t.Error("a function never invoked has no batches")
	}
}
