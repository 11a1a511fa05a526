package operation

import "fmt"

// Action is a row of the recovery matrix: the next safe step for an
// operation as its durable record stands, whatever a queue message says.
type Action string

// The recovery matrix's actions.
const (
	// ActionDispatch: prepared and never dispatched: review the allowance
	// (user, model, spec revision, budget), then dispatch.
	ActionDispatch Action = "dispatch"
	// ActionObserve: a job id is known: GET that job, never POST.
	ActionObserve Action = "observe"
	// ActionDeliver: succeeded, copy incomplete: retry delivery, reusing
	// outputs already stored.
	ActionDeliver Action = "deliver"
	// ActionInspectAccounting: failed with the refund unresolved: a GET
	// advances a submission failure's refund; anything else is for
	// accounting.
	ActionInspectAccounting Action = "inspect_accounting"
	// ActionSettleOutside: failed, and Genace did not settle the refund
	// within the accounting budget (the record is parked): accounting
	// settles it outside Genace, and the operator records that with a
	// reason; the record becomes failed and settled (terminal).
	ActionSettleOutside Action = "settle_outside"
	// ActionReconcile: submitting or uncertain, no reliable outcome:
	// manual reconciliation (attach a job id, or confirm not submitted).
	ActionReconcile Action = "reconcile"
	// ActionAcknowledge: delivered, settled, rejected or superseded:
	// acknowledge as obsolete; nothing to do.
	ActionAcknowledge Action = "acknowledge"
)

// The application's own decisions, taken through the intake API
// (internal/intake) and kept in the audit trail beside the operators'
// (review.AuditEntry.Action). They are not rows of the recovery matrix:
// the matrix never recommends them and replay cannot carry them out, so
// they are not in Actions, which ParseAction accepts.
const (
	// ActionChange: the user replaced a prepared request before the
	// submission claim (ChangeSpec, re-authorized for the new spec).
	ActionChange Action = "change"
	// ActionCancel: the user cancelled a prepared request before the
	// submission claim (Supersede); nothing was charged.
	ActionCancel Action = "cancel"
)

// Actions lists every action of the recovery matrix.
var Actions = []Action{ActionDispatch, ActionObserve, ActionDeliver, ActionInspectAccounting, ActionSettleOutside, ActionReconcile, ActionAcknowledge}

// ParseAction returns the action named s.
func ParseAction(s string) (Action, error) {
	for _, a := range Actions {
		if string(a) == s {
			return a, nil
		}
	}
	return "", fmt.Errorf("unknown action %q (want one of %v)", s, Actions)
}

// Effect is what carrying out an action does on Genace and in storage, in
// the words an operator needs before confirming a replay.
type Effect string

// The effects a replay can have.
const (
	EffectSubmitNew  Effect = "submits a new generation (a POST that may be charged)"
	EffectReadStatus Effect = "reads status (GET of the known job; no POST)"
	EffectCopyOutput Effect = "copies existing outputs (no POST; stored outputs are reused)"
	EffectAccounting Effect = "inspects accounting (GET of the known job; no POST, no settlement by itself)"
	EffectManual     Effect = "needs manual reconciliation (nothing automatic)"
	EffectSettle     Effect = "records the refund as settled outside Genace (terminal; no call to Genace)"
	EffectNone       Effect = "acknowledges as obsolete (changes nothing)"
)

// Recommendation is the matrix's answer for one record.
type Recommendation struct {
	Action Action `json:"action"`
	Effect Effect `json:"effect"`
	Reason string `json:"reason"`
}

// Recommend maps a durable record to its recovery action. It reads only
// the record, never a message, so stale queue data cannot steer it.
func Recommend(r *Record) Recommendation {
	rec := func(a Action, e Effect, format string, args ...any) Recommendation {
		return Recommendation{Action: a, Effect: e, Reason: fmt.Sprintf(format, args...)}
	}
	switch r.Phase {
	case PhaseDelivered:
		return rec(ActionAcknowledge, EffectNone, "already delivered (%d outputs)", len(r.Deliveries))
	case PhaseRejected:
		return rec(ActionAcknowledge, EffectNone, "Genace rejected the request (%s); nothing was created", r.LastError)
	case PhaseSuperseded:
		return rec(ActionAcknowledge, EffectNone, "the user replaced the request")
	case PhaseFailed:
		if r.Settlement == SettlementSettled {
			return rec(ActionAcknowledge, EffectNone, "failed and settled")
		}
		if r.Parked != nil && r.LastError == CategoryRefundUnresolved {
			// The accounting budget is spent: another read would park it
			// again. Only a settlement outside Genace closes it. A park
			// for any other reason (reads that failed, answers that
			// drifted) is resumed by inspecting accounting again: a read
			// may still settle the refund, and settling it outside too
			// would refund twice.
			return rec(ActionSettleOutside, EffectSettle, "failed; Genace did not settle the refund within the accounting budget (%s): settle it outside Genace, then record that", refundSummary(r))
		}
		return rec(ActionInspectAccounting, EffectAccounting, "failed with refund unresolved (%s)", refundSummary(r))
	case PhaseSubmitting, PhaseUncertain:
		return rec(ActionReconcile, EffectManual, "%s: a POST may have created a job; no reliable outcome", r.Phase)
	case PhaseSucceeded:
		want := 0
		if r.Remote != nil {
			want = len(r.Remote.Outputs)
		}
		return rec(ActionDeliver, EffectCopyOutput, "succeeded; %d of %d outputs stored", len(r.Deliveries), want)
	case PhaseAccepted, PhaseStalled:
		if r.RemoteJobID == "" {
			return rec(ActionReconcile, EffectManual, "%s without a job id: the record is inconsistent", r.Phase)
		}
		return rec(ActionObserve, EffectReadStatus, "job %s known (%s)", r.RemoteJobID, r.Phase)
	case PhasePrepared:
		if r.RemoteJobID != "" {
			return rec(ActionObserve, EffectReadStatus, "prepared but job %s is known: observe, never POST", r.RemoteJobID)
		}
		if r.Posts > 0 {
			// A 429, a refused key, or an operator's confirmation
			// brought it back; the plan's never_submitted check says
			// whether every POST is settled.
			return rec(ActionDispatch, EffectSubmitNew, "prepared again after %d POST(s): check that none created a job, review the allowance, then dispatch", r.Posts)
		}
		return rec(ActionDispatch, EffectSubmitNew, "prepared and never submitted: review the allowance, then dispatch")
	}
	return rec(ActionReconcile, EffectManual, "unknown phase %q", r.Phase)
}

// Outstanding is the credits a failed operation's refund still owes
// (charged less refunded, per the last snapshot): what a settlement
// outside Genace accounts for.
func (r *Record) Outstanding() int64 {
	if r.Remote == nil {
		return 0
	}
	return max(r.Remote.Credits.Charged-r.Remote.Credits.Refunded, 0)
}

func refundSummary(r *Record) string {
	if r.Remote == nil {
		return "no snapshot yet"
	}
	c := r.Remote.Credits
	return fmt.Sprintf("remote %s, charged %d, refunded %d, refund_state %s", r.Remote.State, c.Charged, c.Refunded, c.RefundState)
}
