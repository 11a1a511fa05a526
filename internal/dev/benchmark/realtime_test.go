package benchmark

import (
	"testing"
	"time"

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
func TestTemplateFunctions(t *testing.T) {
	t.Parallel()
	f := templateFunctions(t)
	for _, fn := range topology.Stack.Functions {
		if f.memoryMB(fn.Name) < 128 {
			t.Errorf("%s: %d MB", fn.Name, f.memoryMB(fn.Name))
		}
	}
	if f.ObserveMB != f.memoryMB("observe") || f.DeliverMB != f.memoryMB("deliver") {
		t.Errorf("observe %d / %d MB, deliver %d / %d MB", f.ObserveMB, f.memoryMB("observe"), f.DeliverMB, f.memoryMB("deliver"))
	}
}
