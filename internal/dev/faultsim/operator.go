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

// The simulation's operator (OperatorRace) works operations through the
// real replay package: it takes the action the recovery matrix recommends
// and lets replay carry it out, which re-plans and refuses on any
// mismatch. To reconcile, it asks Genace's support whether a job exists
// and attaches it (--job-id) or confirms none was submitted, now and then
// pasting another operation's job id, which replay must refuse. It acts
// while a handler is inside its Genace call, in rounds over the open
// reviews, and with the application writing between a replay's read and
// its write. It never acknowledges terminal operations: the reviews left
// open on them are a figure automation must keep at zero.

// operatorEvery is how often the operator works the open reviews.
const operatorEvery = 5 * time.Minute

// operatorName is who the audit entries name.
const operatorName = "faultsim-operator"

// operatorStore is the store the replays use, with the application
// writing, now and then, between a replay's read and its write.
type operatorStore struct {
	replay.Store
	w *world
}

// UpdateWithAudit lets the application raise the budget first, in a
// quarter of the operator's sessions: the replay's write must then fail.
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
			// Once per operation: one that comes back is escalated.
			w.worked[r.OperationID] = true
			w.operate(r.OperationID, "working the review queue", "")
			w.armSweep() // the sweep watches the chain the replay restarted
		}
	}
	return nil
}

// operate is one operator working one operation: plan and replay, again
// after a confirmation that nothing was submitted (the dispatch) or a
// refusal because the record moved. A reconciliation attaches attach
// when set, else the first job Genace shows for the operation.
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
			// The operator's word that replay records.
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
