package benchmark

import (
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/modroot"
	"github.com/genjobs/genjobs/internal/dev/topology"
)

func TestLocalRunFloor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		queue, run time.Duration
		want       float64
	}{
		// The render: one poll for queued→running, three 30 s
		// windows of running, delivery's read.
		{19 * time.Second, 76 * time.Second, 5},
		{0, 30 * time.Second, 3},
		{0, 31 * time.Second, 4},
		// A render that finishes at once still needs its one read.
		{0, 0, 3},
	} {
		l := LocalRun{QueueFor: tc.queue, RunFor: tc.run}
		if got := l.Floor(); got != tc.want {
			t.Errorf("Floor(queued %s, running %s) = %v, want %v", tc.queue, tc.run, got, tc.want)
		}
	}
	if got := (LocalRun{Renders: 4, GETs: 22}).GETsPerRender(); got != 5.5 {
		t.Errorf("GETsPerRender = %v, want 5.5", got)
	}
}

// Every function's memory comes from template.yaml, the triage and sweep
// functions' too (the report once said "the template's 0 MB" for them).
func TestTemplateMemory(t *testing.T) {
	t.Parallel()
	root, err := modroot.Find("")
	if err != nil {
		t.Fatal(err)
	}
	mb, err := templateMemory(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range topology.Stack.Functions {
		if mb[fn.Name] < 128 {
			t.Errorf("%s: %d MB", fn.Name, mb[fn.Name])
		}
	}
}

// The floor on hand-computed renders (q = 2 s): 1 + ⌈(T − q)/30 s⌉.
func TestFloorGETs(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	for _, c := range []struct {
		render time.Duration
		want   float64
	}{
		{time.Second, 1}, {2 * time.Second, 1}, {10 * time.Second, 2}, {32 * time.Second, 2},
		{32*time.Second + ms, 3}, {60 * time.Second, 3}, {100 * time.Second, 5}, {300 * time.Second, 11},
	} {
		if got := FloorGETs(c.render, 2*time.Second); got != c.want {
			t.Errorf("FloorGETs(%v) = %v, want %v", c.render, got, c.want)
		}
	}
}

func TestMedian(t *testing.T) {
	if m := median([]time.Duration{3, 1, 2}); m != 2 {
		t.Errorf("median %v", m)
	}
	if m := median([]time.Duration{4, 1, 2, 3}); m != 2 {
		t.Errorf("median of four %v", m)
	}
	if median(nil) != 0 {
		t.Error("median of none")
	}
}
