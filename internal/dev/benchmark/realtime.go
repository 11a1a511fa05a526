package benchmark

import (
	"context"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/pipeline"
	"github.com/genjobs/genjobs/internal/dev/workload"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/operation"
)

// LocalRun is one real-time `genjobs local` run with its defaults (the
// deployed observation policy, the embedded store and queue) on renders
// of one length, counting the GETs the simulator answered.
type LocalRun struct {
	// Renders were dispatched; Delivered reached their last phase.
	Renders, Delivered int
	// QueueFor and RunFor are every render's simulated times.
	QueueFor, RunFor time.Duration
	// GETs are the simulator's job reads: observations and delivery's
	// read for fresh output URLs.
	GETs int
	// Elapsed is the run's wall time.
	Elapsed time.Duration
}

// GETsPerRender is the mean GETs per dispatched render.
func (l LocalRun) GETsPerRender() float64 {
	if l.Renders == 0 {
		return 0
	}
	return float64(l.GETs) / float64(l.Renders)
}

// Floor is the fewest GETs any client of this API needs for one such
// render: the floor's polls (FloorGETs; at least the one that sees
// queued→running and one that sees the finish), then delivery's read for
// fresh output URLs.
func (l LocalRun) Floor() float64 {
	return max(FloorGETs(l.QueueFor+l.RunFor, l.QueueFor), 2) + 1
}

// FloorGETs is the fewest GETs any client of this API needs for a render
// of renderTime queued for queueFor: a long poll outstanding at every
// change, each waiting the full window, and the queued→running change
// ending one of them early: 1 + ⌈(T − q)/window⌉.
func FloorGETs(renderTime, queueFor time.Duration) float64 {
	q := min(queueFor, renderTime)
	return 1 + math.Ceil(float64(renderTime-q)/float64(genace.MaxWait))
}

// LocalRenders are the real-time runs' renders, twenty of each length:
// the issue's own measurements, a 95 s render queued for its first 19 s,
// and a 300 s one (here queued 2 s, as the observation benchmark's), the
// length whose ten whole windows leave no room for overlap's losses.
var LocalRenders = []struct{ QueueFor, RunFor time.Duration }{
	{19 * time.Second, 76 * time.Second},
	{2 * time.Second, 298 * time.Second},
}

// localRenders is how many renders of each length a real-time run has.
const localRenders = 20

// MeasureLocal runs n renders queued queueFor then running runFor through
// pipeline.Run (what `genjobs local` runs) with its defaults, in real
// time, and counts the simulator's GETs.
func MeasureLocal(ctx context.Context, n int, queueFor, runFor time.Duration) (LocalRun, error) {
	stateDir, err := os.MkdirTemp("", "genjobs-bench-")
	if err != nil {
		return LocalRun{}, err
	}
	defer os.RemoveAll(stateDir)
	sim := genacesim.New(genacesim.Config{APIKey: "bench",
		DefaultModel: genacesim.ModelConfig{Price: 1, QueueFor: queueFor, RunFor: runFor, OutputCount: 1}}, clock.Real{})
	items := make([]workload.Item, n)
	for i := range items {
		items[i] = workload.Item{OperationID: fmt.Sprintf("realtime-%03d", i), UserID: "bench", Model: "bench-model",
			Input: []byte(`{"prompt":"a lighthouse"}`), BudgetCredits: 10}
	}
	begin := time.Now()
	rep, err := pipeline.Run(ctx, pipeline.Config{StateDir: stateDir, Workload: items, Sim: sim, GenaceKey: "bench",
		Timeout: queueFor + runFor + 3*time.Minute})
	if err != nil {
		return LocalRun{}, fmt.Errorf("real-time local run: %w", err)
	}
	out := LocalRun{Renders: n, QueueFor: queueFor, RunFor: runFor, GETs: rep.Totals.Gets, Elapsed: time.Since(begin)}
	for _, op := range rep.Operations {
		if op.Phase == operation.PhaseDelivered {
			out.Delivered++
		}
	}
	return out, nil
}
