package faultsim

import (
	"context"
	"fmt"
	"strings"

	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/operation"
)

// unusableID is the id UnusableJobID gives op's job: one message.ValidJobID
// refuses but a looser definition (up to 256 bytes a URL path can carry)
// would take.
func (w *world) unusableID(op string) string {
	w.mu.Lock()
	w.unusable++
	base := fmt.Sprintf("%s-%d", op, w.unusable)
	w.mu.Unlock()
	forms := []string{"job+" + base, "job~" + base, "job_" + base + "@eu-west", "_job_" + base, "job_" + base + "_" + strings.Repeat("0", 130)}
	return forms[w.inj.intn(UnusableJobID, len(forms))]
}

// secondJob injects SecondJobID into a submit worker whose POST was just
// answered 202 (res): Genace's gateway ran the POST twice, and while the
// answer is late a second worker marks the claim uncertain and an
// operator reconciles the operation with the other job. It reports
// whether it did; no second job is created unless the claim is uncertain.
func (w *world) secondJob(ctx context.Context, op string, res genace.SubmitResult) bool {
	inv := invOf(ctx)
	i := w.handling(inv, op)
	if i < 0 || inv.depth > 0 || inv.fn != "submit" || res.Outcome != genace.OutcomeAccepted || res.JobID == "" || !w.inj.roll(SecondJobID) {
		return false
	}
	if !w.secondWorker(inv, i) {
		return false
	}
	rec, err := w.rec.Get(context.Background(), op)
	if err != nil || rec.Phase != operation.PhaseUncertain {
		w.tracef(op, "%s: the second worker left the record %s, not uncertain: no second job", SecondJobID, rec.Phase)
		return false
	}
	dup, ok := w.sim.Duplicate(res.JobID)
	if !ok {
		return false
	}
	w.inj.note(SecondJobID)
	w.tracef(op, "FAULT %s: Genace's gateway ran the POST twice (jobs %s and %s); the answer naming %s is late, message %s came back to a second worker meanwhile",
		SecondJobID, res.JobID, dup, res.JobID, shortID(inv.records[i].MessageId))
	w.operate(op, "while the answer naming "+res.JobID+" is on its way to "+writerOf(ctx), dup)
	if cur, err := w.rec.Get(context.Background(), op); err == nil && cur.RemoteJobID != dup {
		// The attach was refused (Genace's lookup failed, say): the
		// duplicate stays a job of Genace's that nobody was told of.
		w.tracef(op, "%s: the operator did not attach %s; the late answer stands alone", SecondJobID, dup)
	}
	// The operator then works the review the late answer leaves.
	if k := w.opIndex(op); k >= 0 {
		w.plan(w.clk.Now(), evOperatorOn, k)
	}
	return true
}
