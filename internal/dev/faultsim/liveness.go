package faultsim

import (
	"fmt"
	"time"

	"github.com/genjobs/genjobs/internal/deliver"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/schedule"
)

// InvLiveness (design 4, with a bound): every operation whose render
// Genace finished is terminal or waits for an operator within
// LivenessTiming.Bound of the render's end, or of an operator's replay
// that handed it back to automation later: a failure that persists must
// reach a person, not loop.
const InvLiveness Invariant = "i:liveness"

// LivenessTiming is what the liveness bound is derived from, all as
// deployed (the observation delays are the simulation's, see wireUp).
type LivenessTiming struct {
	// Look is the observation policy's cap, the longest between two looks.
	Look time.Duration
	// ReadFailures and ReadRetry are observe's cap on failed GETs and its
	// delay after each; CopyFailures and CopyRetry deliver's for copies.
	ReadFailures int
	ReadRetry    schedule.Backoff
	CopyFailures int
	CopyRetry    schedule.Backoff
	// Accounting is how long a failed job's refund is re-read, and
	// AccountingRetry the longest delay between two reads.
	Accounting      time.Duration
	AccountingRetry time.Duration
	// Rearm is the longest a chain a fault ended waits for the sweep.
	Rearm time.Duration
}

// DeployedLiveness is the deployed liveness timing, with the
// simulation's observation delays and its observe invocations, which hold
// one batch: the simulation wires no feed.
func DeployedLiveness(delays *schedule.Observation) LivenessTiming {
	obs, del := observe.Config{}.Defaults(), deliver.Config{}.Defaults()
	b := delays.DefaultBudgets
	return LivenessTiming{
		Look:         delays.Policies.Default.Cap,
		ReadFailures: obs.MaxReadFailures, ReadRetry: delays.Reads,
		CopyFailures: del.MaxCopyFailures, CopyRetry: del.Retry,
		Accounting: b.Accounting, AccountingRetry: delays.Policies.Accounting.Cap,
		Rearm: Rearm(simHeld),
	}
}

// simHeld is the most chains a simulated observe invocation holds: its
// batch.
var simHeld = func() int {
	of, _ := topology.Stack.Function(topology.Observe)
	return of.Mappings[0].BatchSize
}()

// Rearm is the longest a chain waits for the sweep when a fault ends the
// invocation that held it and held chains in all: each looks overdue
// OverdueAfter after its last write, the next sweep run comes within a
// cadence, and a run re-arms at most the sweep's Limit, earliest due
// first, so the last of them waits ceil(held/Limit) runs. Deployed, an
// observe invocation holds up to OBSERVE_HOLD chains (its feed).
func Rearm(held int) time.Duration {
	limit := topology.Stack.Sweep.Defaults().Limit
	return topology.Stack.Sweep.OverdueAfter + time.Duration((max(held, 1)+limit-1)/limit)*sweepEvery
}

// Bound is the longest an operation may take, from its render's end, to
// end terminal or waiting for an operator, when stops faults ended its
// chain by design: the next look, ReadFailures GETs that all fail, then
// CopyFailures copies that all fail, a failed render's refund read for
// Accounting plus one retry, and one Rearm per stop. The terms add up
// because one operation may meet them one after another. (A sweep run
// that dies adds a cadence, see checkLiveness.)
func (t LivenessTiming) Bound(stops int) time.Duration {
	return t.Look + retries(t.ReadRetry, t.ReadFailures) + retries(t.CopyRetry, t.CopyFailures) +
		t.Accounting + t.AccountingRetry + time.Duration(stops)*t.Rearm
}

// retries is the longest sum of the delays between n attempts.
func retries(b schedule.Backoff, n int) time.Duration {
	var d time.Duration
	for i := range max(0, n-1) {
		d += b.Delay(i, func() float64 { return 1 })
	}
	return d
}

// LivenessOf is how long after finished the operation was first settled
// (0 if it already was), given the times it became settled and unsettled
// again, alternately, starting with settled; ok is false if it never was.
func LivenessOf(settles []time.Time, finished time.Time) (latency time.Duration, ok bool) {
	for i := 0; i < len(settles); i += 2 {
		from := settles[i]
		if i+1 < len(settles) && !settles[i+1].After(finished) {
			continue // settled and unsettled again before the render ended
		}
		if !from.After(finished) {
			return 0, true
		}
		return from.Sub(finished), true
	}
	return 0, false
}

// finishedAt is when Genace's render of the job that counts for an
// operation ended (the record's job, else its first own job), by the
// simulator's truth; false while it is unfinished.
func (w *world) finishedAt(f Final) (time.Time, bool) {
	var job *genacesim.JobTruth
	for i := range f.Jobs {
		j := &f.Jobs[i]
		if j.ID == f.Record.RemoteJobID || (job == nil && j.DuplicateOf == "" && f.Record.RemoteJobID == "") {
			job = j
		}
	}
	if job == nil || (job.State != genacesim.StateSucceeded && job.State != genacesim.StateFailed && job.State != genacesim.StateCanceled) {
		return time.Time{}, false
	}
	w.mu.Lock()
	at, reconciled := w.reconciledAt[job.ID]
	w.mu.Unlock()
	switch {
	case reconciled:
		return at, true
	case job.SubmissionFailure:
		return job.CreatedAt, true
	}
	mc := w.models[job.Model]
	return job.CreatedAt.Add(mc.QueueFor + mc.RunFor), true
}

// checkLiveness holds every operation to InvLiveness and records the
// longest latency in the result.
func (w *world) checkLiveness(res *Result, finals []Final) {
	timing := DeployedLiveness(w.delays)
	res.LivenessBound = timing.Bound(0)
	w.rec.mu.Lock()
	defer w.rec.mu.Unlock()
	for _, f := range finals {
		id := f.Record.OperationID
		finished, ok := w.finishedAt(f)
		if !ok {
			continue
		}
		// A message its handler failed is no fault: the re-arm counts
		// against the bound, or failing forever would earn a larger one.
		w.mu.Lock()
		stops := w.stops[id] - w.failStops[id]
		w.mu.Unlock()
		// An operator's hand-back restarts the failure budgets.
		if r := w.rec.resumed[id]; r.After(finished) {
			finished = r
		}
		latency, settled := LivenessOf(w.rec.settles[id], finished)
		if !settled {
			latency = w.clk.Now().Sub(finished)
		}
		// A sweep run that died left its re-arms to the next run.
		late := 0
		for _, at := range w.sweepCrashes {
			if !at.Before(finished) && !at.After(finished.Add(latency)) {
				late++
			}
		}
		bound := timing.Bound(stops) + time.Duration(late)*sweepEvery
		if latency > res.LivenessMax {
			res.LivenessMax, res.LivenessMaxOp, res.LivenessMaxBound = latency, id, bound
		}
		if r := float64(latency) / float64(bound); r > res.LivenessRatio {
			res.LivenessRatio = r
		}

		switch {
		case !settled:
			w.violate(InvLiveness, id, fmt.Sprintf("Genace finished the render (or an operator resumed it) at +%s; %s later the operation is %s, neither terminal nor waiting for an operator (bound %s with %d chain stops, %d sweep runs that died)",
				finished.Sub(simStart).Round(time.Second), latency.Round(time.Second), f.Record.Phase, bound, stops, late))
		case latency > bound:
			w.violate(InvLiveness, id, fmt.Sprintf("Genace finished the render (or an operator resumed it) at +%s; the operation settled only %s later (bound %s with %d chain stops, %d sweep runs that died)",
				finished.Sub(simStart).Round(time.Second), latency.Round(time.Second), bound, stops, late))
		}
	}
}
