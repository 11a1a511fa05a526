package faultsim

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/replay"
	"github.com/genjobs/genjobs/internal/review"
)

// result gathers the figures and runs the end-of-run checks against the
// simulator's ground truth, the store and the artifact store.
func (w *world) result() (*Result, error) {
	ctx := context.Background()
	res := &Result{
		Seed: w.cfg.Seed, Operations: len(w.ops), Faults: w.cfg.Faults.String(), UnrecordedDispatch: w.cfg.UnrecordedDispatch, Virtual: w.clk.Now().Sub(simStart),
		Invocations: map[string]int64{}, Records: map[string]int64{}, Injected: w.inj.snapshot(), Phases: map[operation.Phase]int{},
		Sweeps: w.sweeps, SweepRearmed: w.sweepRearmed, SweepClaimsExpired: w.sweepClaims, Writes: w.rec.writes, UnknownSubmissions: w.unknownSubmissions, MadeUncertain: w.madeUncertain, LeftUncertain: w.madeUncertain - w.resolvedUncertain,
		Posts: w.sim.TotalPosts(), Gets: w.sim.TotalGets(), Downloads: w.sim.FileGets(), Scale: w.scale.result(),
	}
	w.mu.Lock()
	res.Paths = maps.Clone(w.paths)
	for _, op := range w.ops {
		if w.leftUncertain[op.id] > w.unknownOf[op.id] {
			res.UncertainBeyondUnknown = append(res.UncertainBeyondUnknown, op.id)
		}
	}
	w.mu.Unlock()
	for _, m := range w.maps {
		st := m.Stats()
		res.Invocations[m.Function.Name] += st.Invocations
		res.Records[m.Function.Name] += st.Records
		res.Actions += st.Records
		res.StaleDeletes += st.StaleDeletes
	}
	res.Actions += int64(w.sweeps)
	// From here on the simulator answers truthfully: the checks' own
	// reads must not be faulted.
	w.checking.Store(true)

	jobs := map[string][]genacesim.JobTruth{}
	all := w.sim.Jobs()
	res.Jobs = len(all)
	for _, j := range all {
		jobs[j.OperationID] = append(jobs[j.OperationID], j)
	}
	reviews, err := w.db.OpenReviews(ctx)
	if err != nil {
		return nil, err
	}
	res.Reviews = len(reviews)
	byOp := map[string][]review.Record{}
	for _, r := range reviews {
		byOp[r.OperationID] = append(byOp[r.OperationID], r)
	}
	keys := map[string][]string{}
	for k, n := range w.arts.created {
		if n > 0 {
			keys[opOfKey(k)] = append(keys[opOfKey(k)], k)
		}
	}
	for k, n := range w.arts.puts {
		res.Reuploads += n - w.arts.created[k]
	}

	finals := make([]Final, len(w.ops))
	for i, op := range w.ops {
		rec, err := w.db.Get(ctx, op.id)
		if err != nil {
			return nil, fmt.Errorf("faultsim: final read of %s: %w", op.id, err)
		}
		audit, err := w.db.Audit(ctx, op.id)
		if err != nil {
			return nil, err
		}
		res.Phases[rec.Phase]++
		if rec.Terminal() {
			for _, r := range byOp[op.id] {
				if SecondJobReview(&rec, r.RemoteJobID, w.opOfJob(r.RemoteJobID)) {
					res.SecondJobReviews++
					continue
				}
				res.ReviewsOfTerminal++
			}
		}
		t := w.tally(op.id)
		f := Final{Record: rec, Audit: len(audit), Reviews: len(byOp[op.id]), Jobs: jobs[op.id], Posts: w.sim.PostCount(op.id),
			RateLimited: t.rateLimited, Returned: t.returned, HandedOut: t.handedOut, Confirmed: t.confirmed,
			SweepRearms: w.rearms[op.id], SweepBound: SweepBound(w.stops[op.id]),
			Stored: map[string]string{}, Created: map[string]int{}}
		if rec.RemoteJobID != "" {
			f.RecordJobOperation = w.opOfJob(rec.RemoteJobID)
		}
		w.rec.mu.Lock()
		f.AuditedWrites = w.rec.audited[op.id]
		w.rec.mu.Unlock()
		for _, e := range audit {
			if e.Revision > e.FromRevision {
				f.AuditRevisions = append(f.AuditRevisions, e.Revision)
			}
			if e.Decision == replay.DecisionSettledOutside && e.Revision > e.FromRevision {
				f.SettledOutside = e.Revision
			}
		}
		for _, r := range byOp[op.id] {
			if r.RemoteJobID != "" {
				f.ReviewJobIDs = append(f.ReviewJobIDs, r.RemoteJobID)
			}
			f.ReviewReasons = append(f.ReviewReasons, r.Reason)
		}
		for _, d := range rec.Deliveries {
			obj, ok, err := w.arts.d.Stat(ctx, d.Key)
			if err != nil {
				return nil, err
			}
			if ok {
				f.Stored[d.Key] = obj.SHA256
			}
		}
		for _, k := range keys[op.id] {
			f.Created[k] = w.arts.created[k]
		}
		finals[i] = f
		for _, v := range w.checkIntake(op.id, t.confirmed) {
			w.violate(v.Invariant, v.OperationID, v.Detail)
		}
	}
	if err := w.readOutputs(ctx, finals); err != nil {
		return nil, err
	}
	for _, f := range finals {
		for _, v := range CheckFinal(f) {
			w.violate(v.Invariant, v.OperationID, v.Detail)
		}
	}
	w.checkLiveness(res, finals)
	w.checkEvents(res, finals)

	sort.SliceStable(w.violations, func(i, j int) bool { return w.violations[i].OperationID < w.violations[j].OperationID })
	for i := range w.violations {
		v := &w.violations[i]
		if !w.traced(v.OperationID) {
			continue
		}
		v.History = append([]string(nil), w.traces[v.OperationID]...)
		if k := w.opIndex(v.OperationID); k >= 0 {
			v.History = append(v.History, describe(finals[k])...)
		}
	}
	res.Violations = w.violations
	for _, op := range w.cfg.Trace {
		if k := w.opIndex(op); k >= 0 {
			if res.Histories == nil {
				res.Histories = map[string][]string{}
			}
			res.Histories[op] = append(append([]string(nil), w.traces[op]...), describe(finals[k])...)
		}
	}
	res.Wall = time.Since(w.wallStart)
	return res, nil
}

// readOutputs reads, from the simulator without faults, the outputs of
// every delivered operation's job: Genace's own sha256 of the bytes it
// serves. GETs of a succeeded job change nothing, so eight run at once.
func (w *world) readOutputs(ctx context.Context, finals []Final) error {
	errs := make([]error, len(finals))
	var wg sync.WaitGroup
	slots := make(chan struct{}, 8)
	for i := range finals {
		f := &finals[i]
		if f.Record.Phase != operation.PhaseDelivered || f.Record.RemoteJobID == "" {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			job, err := w.client.Get(ctx, f.Record.RemoteJobID, 0, time.Minute)
			if err != nil {
				errs[i] = fmt.Errorf("faultsim: read job %s for the checks: %w", f.Record.RemoteJobID, err)
				return
			}
			f.Outputs = make([]Output, len(job.Outputs))
			for k, o := range job.Outputs {
				f.Outputs[k] = Output{ContentType: o.ContentType, SizeBytes: o.SizeBytes, SHA256: o.SHA256}
			}
		})
	}
	wg.Wait()
	return cmp.Or(errs...)
}

// describe is the end of an operation's history: its final record and
// Genace's truth.
func describe(f Final) []string {
	r := &f.Record
	out := []string{fmt.Sprintf("final record: r%d %s job=%q settlement=%q deliveries=%d posts(counter)=%d parked=%t last_error=%q reviews=%d",
		r.Revision, r.Phase, r.RemoteJobID, r.Settlement, len(r.Deliveries), r.Posts, r.Parked != nil, r.LastError, f.Reviews)}
	out = append(out, fmt.Sprintf("genace truth: %d POSTs (%d answered 429), job ids handed back %v", f.Posts, f.RateLimited, f.Returned))
	for _, j := range f.Jobs {
		out = append(out, fmt.Sprintf("  job %s %s submission_failure=%t reconciled=%t credits reserved=%d charged=%d refunded=%d refund=%s",
			j.ID, j.State, j.SubmissionFailure, j.Reconciled, j.Credits.Reserved, j.Credits.Charged, j.Credits.Refunded, j.Credits.RefundState))
	}
	if len(f.ReviewJobIDs) > 0 {
		out = append(out, "reviews carry job ids "+strings.Join(f.ReviewJobIDs, ", "))
	}
	return out
}
