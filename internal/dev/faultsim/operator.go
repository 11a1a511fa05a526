package faultsim

import (
	"context"
	"errors"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/replay"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

// The operator of the simulation works operations the way the recovery
// path expects, through the real replay package (OperatorRace): it reads
// the record, takes the action the recovery matrix recommends for it
// (dispatch, observe, deliver, inspect accounting, reconcile) and asks
// replay to carry it out, which re-plans and refuses on any mismatch.
// For a reconciliation it asks Genace (its support, not the API: metadata
// is not searchable) whether a job exists for the operation, and attaches
// that job (--job-id) or confirms that none was submitted
// (--confirmed-not-submitted), then dispatches again; now and then it
// mistypes the job id, pasting another operation's, which a replay that
// verifies what it is told refuses.
//
// It acts at random moments: while a handler is inside its Genace call
// for the operation (the record moves under the handler), in rounds over
// the open reviews, and with the application writing between the
// replay's read and its write (the replay must then refuse and say so).
// Acknowledging terminal operations is left out: it only closes reviews,
// and the reviews left open on terminal operations are a figure of the
// run (Result.ReviewsOfTerminal) that automation must keep at zero.

// operatorEvery is how often the operator works the open reviews.
const operatorEvery = 5 * time.Minute

// operatorName is who the audit entries name.
const operatorName = "faultsim-operator"

// operatorStore is the store the replays use: the recorder (or a planted
// bug above it) with the application writing, now and then, between a
// replay's read and its write.
type operatorStore struct {
	replay.Store
	w *world
}

// UpdateWithAudit lets the application raise the budget first, once in a
// quarter of the operator's sessions: the replay's conditional write must
// then fail, and the operator plan again.
func (s operatorStore) UpdateWithAudit(ctx context.Context, rec operation.Record, expected int64, e review.AuditEntry) (operation.Record, error) {
	w := s.w
	if w.raceReplay {
		w.raceReplay = false
		if cur, err := w.rec.Get(ctx, rec.OperationID); err == nil && !cur.Terminal() {
			cur.BudgetCredits++
			if _, err := w.rec.Update(withWriter(ctx, "concurrent-writer"), cur, cur.Revision); err == nil {
				w.tracef(rec.OperationID, "FAULT %s: the application wrote between the replay's read and its write", OperatorRace)
			}
		}
	}
	return s.Store.UpdateWithAudit(ctx, rec, expected, e)
}

// posting notes that a worker's POST for op is in flight (on) or done.
func (w *world) posting(op string, on bool) {
	w.mu.Lock()
	if on {
		w.inFlight[op]++
	} else {
		w.inFlight[op]--
	}
	w.mu.Unlock()
}

// operatorRace injects OperatorRace while a worker is inside its Genace
// call for op: the operator works the operation now.
func (w *world) operatorRace(ctx context.Context, op, call string) {
	if inv := invOf(ctx); inv == nil || inv.depth > 0 || op == "" || !w.inj.roll(OperatorRace) {
		return
	}
	w.operate(op, "while "+writerOf(ctx)+" is inside "+call, "")
}

// operatorRound works the open reviews: each operation with one is taken
// up with 25 times the race's rate (a quarter at the default).
func (w *world) operatorRound() error {
	p := w.cfg.Faults[OperatorRace] * 25
	if p <= 0 {
		return nil
	}
	open, err := w.db.OpenReviews(context.Background())
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, r := range open {
		if r.OperationID == "" || seen[r.OperationID] || w.worked[r.OperationID] {
			continue
		}
		seen[r.OperationID] = true
		if float64(w.inj.intn(OperatorRace, 1000)) < p*1000 {
			// Once per operation: an operator who resumed an operation that
			// came back to review escalates it rather than resume it forever
			// (a refund that never comes is for accounting).
			w.worked[r.OperationID] = true
			w.operate(r.OperationID, "working the review queue", "")
			// The replay set a chain going again, maybe after the sweep
			// stopped for want of work: it must watch the chain too.
			w.armSweep()
		}
	}
	return nil
}

// operate is one operator working one operation: plan, replay, and after
// a confirmation that nothing was submitted, plan and replay once more
// (the dispatch). A replay refused because the record moved is planned
// and tried again, as its error asks. A reconciliation attaches attach
// when set (the job Genace's support named), else the first job Genace
// shows for the operation.
func (w *world) operate(op, when, attach string) {
	ctx := withWriter(context.Background(), "operator")
	w.raceReplay = w.inj.intn(OperatorRace, 4) == 0
	defer func() { w.raceReplay = false }()
	for range 8 {
		rec, err := w.rec.Get(ctx, op)
		if err != nil || rec.Terminal() {
			return
		}
		req := replay.Request{OperationID: op, Action: operation.Recommend(&rec).Action, Operator: operatorName}
		informed := false
		if req.Action == operation.ActionReconcile {
			if rec.Phase != operation.PhaseUncertain {
				return // a claim may still be mid-POST: the plan says wait
			}
			jobs := w.sim.JobsForOperation(op)
			other := w.wire.someJobNotOf(op, w.opOfJob)
			switch {
			case attach != "":
				req.JobID = attach
			case other != "" && w.inj.intn(OperatorRace, 10) == 0:
				req.JobID = other // a typo: another operation's job
			case len(jobs) > 0:
				req.JobID = jobs[0]
			default:
				req.ConfirmedNotSubmitted = true
				req.Reason = "Genace shows no job for the operation"
				w.mu.Lock()
				informed = w.inFlight[op] == 0
				w.mu.Unlock()
			}
		}
		if req.Action == operation.ActionDispatch || req.Action == operation.ActionSettleOutside {
			// The operator's word that replay records: why a second paid
			// job is right, how accounting settled a refund.
			req.Reason = "reviewed with accounting"
		}
		w.inj.note(OperatorRace)
		res, err := w.replayer.Replay(ctx, req)
		flag := string(req.Action)
		switch {
		case req.JobID != "":
			flag += " --job-id"
		case req.ConfirmedNotSubmitted:
			flag += " --confirmed-not-submitted"
		}
		outcome := "done"
		if err != nil {
			outcome = "refused"
		}
		w.countPath("operator: replay " + flag + " (" + outcome + ")")
		if req.JobID != "" {
			flag += " " + req.JobID
		}
		if err != nil {
			w.tracef(op, "FAULT %s: the operator, %s, replays %s at r%d: refused: %v", OperatorRace, when, flag, rec.Revision, err)
			if errors.Is(err, store.ErrConflict) {
				continue // the record moved: plan again
			}
			return
		}
		w.tracef(op, "FAULT %s: the operator, %s, replays %s at r%d: %s, now r%d %s", OperatorRace, when, flag, rec.Revision, res.Decision, res.After.Revision, res.After.Phase)
		if !req.ConfirmedNotSubmitted {
			return
		}
		if informed {
			w.tally(op).confirmed++
		}
	}
}

// someJobNotOf returns a job id the wire saw for an operation other than
// op ("" if none), for the operator's typo.
func (x *wire) someJobNotOf(op string, owner func(string) string) string {
	x.mu.Lock()
	last := x.lastJob
	x.mu.Unlock()
	if last == "" || owner(last) == op {
		return ""
	}
	return last
}
