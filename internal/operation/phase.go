// Package operation holds the durable operation record, the single source
// of truth for one application render: its phases, the legal transitions
// between them as pure functions, and the recovery matrix that tells an
// operator (or triage) what the next safe action is.
package operation

// Phase is the application's phase of an operation. It is never Genace's
// job state: a local delivery failure must not read as a failed render.
type Phase string

// The phases. Each comment says how an operation enters and how it leaves.
const (
	// PhasePrepared: entered when the application creates an authorized
	// operation, when a rate-limited submission is put back, or when an
	// operator confirms an uncertain one was never submitted. Left when the
	// submit function claims it (→ submitting) or the user replaces it
	// (→ superseded).
	PhasePrepared Phase = "prepared"
	// PhaseSubmitting: entered by the submit function's conditional claim just
	// before its one POST. A POST may be in flight or may have happened.
	// Left by the POST's outcome (accepted, failed, rejected, prepared on
	// 429, uncertain when unknown), or to uncertain when a redelivery or the
	// sweep finds the claim without an outcome.
	PhaseSubmitting Phase = "submitting"
	// PhaseUncertain: entered when a POST may have created a job but no reply
	// proves it either way. Left only by evidence: the worker that POSTed
	// persisting a late job id (→ accepted/failed), or an operator's
	// reconciliation (attach a job id → accepted, confirmed not submitted
	// → prepared).
	PhaseUncertain Phase = "uncertain"
	// PhaseAccepted: entered when a job id is known (202 body, an operator's
	// reconciliation, or a stalled job observed again). Left by observation:
	// → succeeded, → failed, → stalled when the polling budget is spent, or
	// → superseded when the user replaces the request.
	PhaseAccepted Phase = "accepted"
	// PhaseSucceeded: entered when an observation sees the remote job succeed.
	// Left when every output is in our storage (→ delivered).
	PhaseSucceeded Phase = "succeeded"
	// PhaseDelivered: entered when the last output is stored and verified.
	// Terminal.
	PhaseDelivered Phase = "delivered"
	// PhaseFailed: entered when the remote job failed or was canceled, including
	// a known submission failure (5xx with error.job_id). Its Settlement says
	// whether the refund is resolved; observation continues until it is.
	// Terminal once settled.
	PhaseFailed Phase = "failed"
	// PhaseRejected: entered when Genace definitely refused the POST (4xx other
	// than 429): nothing was created or charged. Terminal.
	PhaseRejected Phase = "rejected"
	// PhaseStalled: entered when the polling budget is spent while the remote job
	// is still active. Left by an operator's replay (observe again →
	// accepted, or an observation that finds it terminal).
	PhaseStalled Phase = "stalled"
	// PhaseSuperseded: entered when the user changed or replaced the request
	// before it was submitted, or replaced it while the job ran. Terminal.
	PhaseSuperseded Phase = "superseded"
)

// Phases lists every phase, in lifecycle order.
var Phases = []Phase{PhasePrepared, PhaseSubmitting, PhaseUncertain, PhaseAccepted, PhaseSucceeded, PhaseDelivered, PhaseFailed, PhaseRejected, PhaseStalled, PhaseSuperseded}

// Valid reports whether p is one of the phases.
func (p Phase) Valid() bool {
	for _, q := range Phases {
		if p == q {
			return true
		}
	}
	return false
}

// Settlement says whether a failed operation's credits are resolved.
type Settlement string

const (
	// SettlementNone is the zero value: the operation has not failed.
	SettlementNone Settlement = ""
	// SettlementUnresolved: failed, and credits may still be held or owed.
	SettlementUnresolved Settlement = "unresolved"
	// SettlementSettled: failed, and refund_state is settled or nothing was
	// charged. Only this makes a failed operation terminal.
	SettlementSettled Settlement = "settled"
)

// RemoteState is Genace's job state as last observed and stored in the
// record. It is kept apart from Phase on purpose.
type RemoteState string

// Genace's job states.
const (
	RemoteQueued    RemoteState = "queued"
	RemoteRunning   RemoteState = "running"
	RemoteSucceeded RemoteState = "succeeded"
	RemoteFailed    RemoteState = "failed"
	RemoteCanceled  RemoteState = "canceled"
)

// Active reports whether the remote job may still change state.
func (s RemoteState) Active() bool { return s == RemoteQueued || s == RemoteRunning }

// RefundState is Genace's credits.refund_state.
type RefundState string

// Genace's refund states.
const (
	RefundNone    RefundState = "none"
	RefundPending RefundState = "pending"
	RefundSettled RefundState = "settled"
)
