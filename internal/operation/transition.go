package operation

import (
	"errors"
	"fmt"
	"time"
)

// ErrIllegalTransition is returned when a transition is not allowed from
// the record's current phase. Callers branch on it (errors.Is) to treat a
// message as obsolete rather than retry it.
var ErrIllegalTransition = errors.New("illegal transition")

// TransitionError says which transition was refused and why.
type TransitionError struct {
	Op   string
	From Phase
	To   Phase
	Why  string
}

func (e *TransitionError) Error() string {
	if e.Why != "" {
		return fmt.Sprintf("%s: %s → %s: %s", e.Op, e.From, e.To, e.Why)
	}
	return fmt.Sprintf("%s: %s → %s not allowed", e.Op, e.From, e.To)
}

// Is makes errors.Is(err, ErrIllegalTransition) true.
func (e *TransitionError) Is(target error) bool { return target == ErrIllegalTransition }

// edges are the legal phase changes. A self-edge is a write that keeps the
// phase (a new snapshot, delivery progress, a spec change).
var edges = map[Phase][]Phase{
	// Prepared → accepted/failed only carries late evidence: a POST's job
	// id that arrives after an operator confirmed "not submitted". A known
	// job id is never dropped (invariant 2).
	PhasePrepared:   {PhasePrepared, PhaseSubmitting, PhaseSuperseded, PhaseAccepted, PhaseFailed},
	PhaseSubmitting: {PhaseAccepted, PhaseFailed, PhaseRejected, PhasePrepared, PhaseUncertain},
	// The claimant's definite answer (a job id, a rejection, a 429) or its
	// release after an unsent POST still applies after its message's
	// redelivery or the sweep marked the claim uncertain: it is the outcome
	// of the only POST. An operator's reconciliation leaves the same way.
	PhaseUncertain: {PhaseAccepted, PhaseFailed, PhaseRejected, PhasePrepared},
	PhaseAccepted:  {PhaseAccepted, PhaseSucceeded, PhaseFailed, PhaseStalled, PhaseSuperseded},
	PhaseStalled:   {PhaseAccepted, PhaseSucceeded, PhaseFailed, PhaseStalled, PhaseSuperseded},
	PhaseSucceeded: {PhaseSucceeded, PhaseDelivered},
	PhaseFailed:    {PhaseFailed},
}

// CanTransition reports whether a record may move from one phase to the
// other. Terminal phases have no edges (a settled failure is checked by
// the caller through Record.Terminal).
func CanTransition(from, to Phase) bool {
	for _, p := range edges[from] {
		if p == to {
			return true
		}
	}
	return false
}

// move returns a copy of r in phase to, or a TransitionError.
func move(op string, r Record, to Phase, now time.Time) (Record, error) {
	if r.Terminal() {
		return Record{}, &TransitionError{Op: op, From: r.Phase, To: to, Why: "record is terminal"}
	}
	if !CanTransition(r.Phase, to) {
		return Record{}, &TransitionError{Op: op, From: r.Phase, To: to}
	}
	c := r.Clone()
	c.Phase = to
	c.Timestamps.Updated = now
	return c, nil
}

// Check is one precondition of an action that can create work, with
// whether it passed; plan output lists them all.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// SubmitChecks are the allowance checks before anything may be POSTed:
// the selected model, the spec revision the authorization covers, the
// user's authorization and the remaining budget.
func SubmitChecks(r *Record) []Check {
	return []Check{
		{Name: "model", OK: r.Model != "", Detail: fmt.Sprintf("model %q", r.Model)},
		{Name: "spec_revision", OK: r.AuthorizedSpecRevision == r.SpecRevision,
			Detail: fmt.Sprintf("spec revision %d, authorized for %d", r.SpecRevision, r.AuthorizedSpecRevision)},
		{Name: "authorization", OK: r.Authorized, Detail: fmt.Sprintf("user %q authorized=%t", r.UserID, r.Authorized)},
		{Name: "budget", OK: r.EstimatedCredits <= r.BudgetCredits,
			Detail: fmt.Sprintf("estimated %d of %d credits", r.EstimatedCredits, r.BudgetCredits)},
	}
}

// FailedCheck returns the first failed check, if any.
func FailedCheck(checks []Check) (Check, bool) {
	for _, c := range checks {
		if !c.OK {
			return c, true
		}
	}
	return Check{}, false
}

// ClaimSubmission moves a prepared operation to submitting for one worker, after
// the allowance checks pass. The caller persists it conditionally before
// it may POST.
func ClaimSubmission(r Record, owner, messageID string, now time.Time) (Record, error) {
	if r.RemoteJobID != "" {
		return Record{}, &TransitionError{Op: "claim", From: r.Phase, To: PhaseSubmitting, Why: "a job id is already known"}
	}
	if c, bad := FailedCheck(SubmitChecks(&r)); bad {
		return Record{}, &TransitionError{Op: "claim", From: r.Phase, To: PhaseSubmitting, Why: "precondition " + c.Name + " failed: " + c.Detail}
	}
	if r.Phase != PhasePrepared {
		return Record{}, &TransitionError{Op: "claim", From: r.Phase, To: PhaseSubmitting}
	}
	c, err := move("claim", r, PhaseSubmitting, now)
	if err != nil {
		return Record{}, err
	}
	c.Claim = &Claim{Owner: owner, MessageID: messageID, At: now}
	c.Posts++ // counted at the claim: the POST follows it or nothing does
	c.Schedule = nil
	return c, nil
}

// Same reports whether o is the same claim: the same worker, message and
// moment (a message whose claim was released may claim again later).
func (c Claim) Same(o Claim) bool {
	return c.Owner == o.Owner && c.MessageID == o.MessageID && c.At.Equal(o.At)
}

// holds checks that the claimant's outcome may still be applied to r: r
// carries this claim (submitting, or uncertain after the claiming
// message's redelivery or the sweep gave up on it), or, for an outcome
// that names a job, no claim at all (an operator confirmed "not
// submitted"; the job id is late evidence and is never dropped). Once
// another claim replaced this one, this worker's answer must not undo
// that claim's POST.
func (c Claim) holds(op string, r Record, to Phase, namesJob bool) error {
	if r.Claim != nil && r.Claim.Same(c) {
		return nil
	}
	if r.Claim == nil && namesJob {
		return nil
	}
	why := "the claim was released"
	if r.Claim != nil {
		why = "another claim holds the record"
	}
	return &TransitionError{Op: op, From: r.Phase, To: to, Why: why}
}

// Release puts the claim back to prepared when its worker knows it sent no
// POST (its authority was lost before sending, or no connection was ever
// made), from uncertain too: the claim's own redelivery may have marked it
// meanwhile, but nothing was sent, and saying so is the claimant's to do.
func (c Claim) Release(r Record, now time.Time) (Record, error) {
	from := r.Phase
	if from != PhaseSubmitting && from != PhaseUncertain {
		return Record{}, &TransitionError{Op: "release", From: from, To: PhasePrepared}
	}
	if err := c.holds("release", r, PhasePrepared, false); err != nil {
		return Record{}, err
	}
	n, err := move("release", r, PhasePrepared, now)
	if err != nil {
		return Record{}, err
	}
	n.Claim = nil
	n.Parked = nil
	if from == PhaseUncertain {
		n.LastError = ""
	}
	n.Posts--
	return n, nil
}

// Accept is Accept for the claimant's 202.
func (c Claim) Accept(r Record, jobID string, snap *Snapshot, now time.Time) (Record, error) {
	if err := c.holds("accept", r, PhaseAccepted, true); err != nil {
		return Record{}, err
	}
	return Accept(r, jobID, snap, now)
}

// SubmissionFailed is SubmissionFailed for the claimant's 5xx that named
// a job.
func (c Claim) SubmissionFailed(r Record, jobID, errorCode string, now time.Time) (Record, error) {
	if err := c.holds("submission-failed", r, PhaseFailed, true); err != nil {
		return Record{}, err
	}
	return SubmissionFailed(r, jobID, errorCode, now)
}

// Reject records Genace's definite refusal of the claimant's POST:
// nothing was created.
func (c Claim) Reject(r Record, errorCode string, now time.Time) (Record, error) {
	if err := c.holds("reject", r, PhaseRejected, false); err != nil {
		return Record{}, err
	}
	if r.RemoteJobID != "" {
		return Record{}, &TransitionError{Op: "reject", From: r.Phase, To: PhaseRejected, Why: "a job id is known"}
	}
	n, err := move("reject", r, PhaseRejected, now)
	if err != nil {
		return Record{}, err
	}
	n.LastError = errorCode
	n.Schedule = nil
	n.Parked = nil
	return n, nil
}

// RateLimited puts the claimed operation back to prepared after a 429:
// nothing was created, and a delayed dispatch will try again.
func (c Claim) RateLimited(r Record, now time.Time) (Record, error) {
	if r.Phase != PhaseSubmitting && r.Phase != PhaseUncertain {
		return Record{}, &TransitionError{Op: "rate-limited", From: r.Phase, To: PhasePrepared}
	}
	if err := c.holds("rate-limited", r, PhasePrepared, false); err != nil {
		return Record{}, err
	}
	n, err := move("rate-limited", r, PhasePrepared, now)
	if err != nil {
		return Record{}, err
	}
	n.Claim = nil
	n.Parked = nil
	n.Counters.RateLimited++
	n.LastError = "rate_limited"
	return n, nil
}

// LastErrorUnauthorized is the LastError of an operation whose POST
// Genace refused for our credentials (401 or 403): a configuration error,
// which names the problem in the review a dead-lettered dispatch gets.
const LastErrorUnauthorized = "genace_unauthorized"

// Unauthorized puts the claimed operation back to prepared after Genace
// refused our credentials: nothing was created (the contract says so of a
// 401 and a 403), and the request is not at fault, so it must not end as
// rejected. No follow-up is scheduled: the dispatch message itself fails
// and comes back (see submit), and reaches the DLQ, and a review, if the
// key stays wrong.
func (c Claim) Unauthorized(r Record, now time.Time) (Record, error) {
	if r.Phase != PhaseSubmitting && r.Phase != PhaseUncertain {
		return Record{}, &TransitionError{Op: "unauthorized", From: r.Phase, To: PhasePrepared}
	}
	if err := c.holds("unauthorized", r, PhasePrepared, false); err != nil {
		return Record{}, err
	}
	n, err := move("unauthorized", r, PhasePrepared, now)
	if err != nil {
		return Record{}, err
	}
	n.Claim = nil
	n.Parked = nil
	n.Schedule = nil
	n.Counters.Unauthorized++
	n.LastError = LastErrorUnauthorized
	return n, nil
}

// recordJobID enforces invariant 2: a job id, once known, is never
// replaced by another.
func recordJobID(op string, c *Record, jobID string) error {
	if jobID == "" {
		return &TransitionError{Op: op, From: c.Phase, To: c.Phase, Why: "empty job id"}
	}
	if c.RemoteJobID != "" && c.RemoteJobID != jobID {
		return &TransitionError{Op: op, From: c.Phase, To: c.Phase,
			Why: fmt.Sprintf("record already holds job %s; refusing to replace it with %s", c.RemoteJobID, jobID)}
	}
	c.RemoteJobID = jobID
	return nil
}

// Accept records a 202's job id and snapshot (or an operator's attached
// job id, with snap nil) and moves the operation to accepted.
func Accept(r Record, jobID string, snap *Snapshot, now time.Time) (Record, error) {
	c, err := move("accept", r, PhaseAccepted, now)
	if err != nil {
		return Record{}, err
	}
	if err := recordJobID("accept", &c, jobID); err != nil {
		return Record{}, err
	}
	c.Remote = snap
	c.Parked = nil
	c.LastError = ""
	c.Timestamps.Accepted = &now
	c.Counters.WindowObservations = 0
	return c, nil
}

// SubmissionFailed records a known submission failure: a 5xx whose
// envelope carried error.job_id. The job exists on Genace's side, failed,
// and its refund still has to be observed to settlement.
func SubmissionFailed(r Record, jobID, errorCode string, now time.Time) (Record, error) {
	c, err := move("submission-failed", r, PhaseFailed, now)
	if err != nil {
		return Record{}, err
	}
	if err := recordJobID("submission-failed", &c, jobID); err != nil {
		return Record{}, err
	}
	c.Settlement = SettlementUnresolved
	c.Parked = nil
	c.LastError = errorCode
	c.Timestamps.RemoteFailed = &now
	c.Timestamps.Accepted = &now
	c.Counters.WindowObservations = 0
	return c, nil
}

// MarkUncertain records that a POST may have created a job and nothing
// proves it either way. Only evidence or an operator leaves this phase.
func MarkUncertain(r Record, reason string, now time.Time) (Record, error) {
	if r.Phase != PhaseSubmitting {
		return Record{}, &TransitionError{Op: "uncertain", From: r.Phase, To: PhaseUncertain}
	}
	c, err := move("uncertain", r, PhaseUncertain, now)
	if err != nil {
		return Record{}, err
	}
	c.LastError = reason
	c.Schedule = nil
	c.Parked = &ParkedState{Reason: reason, At: now}
	return c, nil
}

// MarkUncertain is MarkUncertain for a claim whose POST outcome is
// unknown, by its worker or its message's redelivery: once the record no
// longer carries the claim (it was released and maybe claimed again), the
// claim has nothing left to be uncertain about.
func (c Claim) MarkUncertain(r Record, reason string, now time.Time) (Record, error) {
	if err := c.holds("uncertain", r, PhaseUncertain, false); err != nil {
		return Record{}, err
	}
	return MarkUncertain(r, reason, now)
}

// ConfirmNotSubmitted is the operator's reconciliation of an uncertain
// operation that Genace shows no job for: back to prepared. Dispatching it
// again is a separate decision that must pass the allowance checks.
func ConfirmNotSubmitted(r Record, now time.Time) (Record, error) {
	if r.Phase != PhaseUncertain {
		return Record{}, &TransitionError{Op: "confirm-not-submitted", From: r.Phase, To: PhasePrepared}
	}
	c, err := move("confirm-not-submitted", r, PhasePrepared, now)
	if err != nil {
		return Record{}, err
	}
	c.Claim = nil
	c.Parked = nil
	c.LastError = ""
	return c, nil
}

// SettleOutside is an operator's record that accounting settled a failed
// operation's refund outside Genace: failed and settled, so terminal, and
// nothing left scheduled or parked.
func SettleOutside(r Record, now time.Time) (Record, error) {
	if r.Phase != PhaseFailed || r.Settlement == SettlementSettled {
		return Record{}, &TransitionError{Op: "settle-outside", From: r.Phase, To: PhaseFailed, Why: "only a failed operation with its refund unresolved"}
	}
	c, err := move("settle-outside", r, PhaseFailed, now)
	if err != nil {
		return Record{}, err
	}
	c.Settlement = SettlementSettled
	c.Schedule = nil
	c.Parked = nil
	return c, nil
}

// ChangeSpec records that the user changed a prepared request: the spec
// revision moves, so the earlier authorization no longer covers it and
// dispatch messages sent before are stale.
func ChangeSpec(r Record, now time.Time) (Record, error) {
	if r.Phase != PhasePrepared {
		return Record{}, &TransitionError{Op: "change-spec", From: r.Phase, To: PhasePrepared, Why: "only a prepared request can change"}
	}
	c, err := move("change-spec", r, PhasePrepared, now)
	if err != nil {
		return Record{}, err
	}
	c.SpecRevision++
	return c, nil
}

// Supersede records that the user replaced the request.
func Supersede(r Record, now time.Time) (Record, error) {
	c, err := move("supersede", r, PhaseSuperseded, now)
	if err != nil {
		return Record{}, err
	}
	c.Schedule = nil
	return c, nil
}
