package worker

import (
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/operation"
)

// Outcome is how a decision on one record ended: the Outcome dimension of
// ActionDuration. The text values are the dashboards' and must not change.
type Outcome string

const (
	// OutcomeObsolete: the record made the message pointless (see Reason).
	OutcomeObsolete Outcome = "obsolete"
	// OutcomeReemitted: the message's own write had landed; its follow-up
	// was sent again.
	OutcomeReemitted Outcome = "reemitted"
	// OutcomeRearmed: a dispatch for a known job sent an observation
	// (or delivery) instead of a POST.
	OutcomeRearmed Outcome = "rearmed"
	// OutcomeUncertain: a claimed POST's outcome is unknown; the operation
	// waits for reconciliation.
	OutcomeUncertain Outcome = "uncertain"
	// OutcomeReleased: no authority to POST; the claim was put back.
	OutcomeReleased Outcome = "released"
	// OutcomeLostRace: another writer moved the record first; this one
	// wrote and sent nothing.
	OutcomeLostRace Outcome = "lost_race"
	// OutcomeMovedOn: the record left the step under this worker.
	OutcomeMovedOn Outcome = "moved_on"
	// OutcomeParked: no retry can complete the step; the record is parked
	// for an operator, with a review.
	OutcomeParked Outcome = "parked"
	// OutcomeDelivered: every output is stored and recorded.
	OutcomeDelivered Outcome = "delivered"
	// OutcomeYieldedDeadline and OutcomeYieldedLease: the rest of a
	// delivery was handed to a fresh message before the function's
	// deadline or the lease ran out.
	OutcomeYieldedDeadline Outcome = "yielded_deadline"
	OutcomeYieldedLease    Outcome = "yielded_lease"
	// OutcomeReadRetry: a failed GET was recorded and retried later.
	OutcomeReadRetry Outcome = "read_retry"
	// OutcomeReadError: a GET failed beyond riding out.
	OutcomeReadError Outcome = "read_error"
	// OutcomeFailed: a delivery failed beyond riding out.
	OutcomeFailed Outcome = "failed"
	// OutcomePermanent: no retry can succeed; the message goes to the DLQ.
	OutcomePermanent Outcome = "permanent"
	// OutcomeError: a transient error; the message is retried.
	OutcomeError Outcome = "error"
)

// OutcomeOfPost is the outcome of a decision that POSTed: the POST's
// classification.
func OutcomeOfPost(o genace.Outcome) Outcome { return Outcome(o) }

// OutcomeOfObservation is the outcome of a saved observation: what
// follows it.
func OutcomeOfObservation(f operation.Follow) Outcome { return Outcome(f) }

// OutcomeOfRetry is the outcome of a transient failure recorded on the
// record with a retry scheduled, by its category (operation.LastError).
func OutcomeOfRetry(category string) Outcome { return Outcome("retry_" + category) }

// Reason says why a message is obsolete: the Reason dimension of
// ObsoleteMessages and the reason logged. The text values are the
// dashboards' and must not change.
type Reason string

const (
	// ReasonTerminal: the operation has ended.
	ReasonTerminal Reason = "terminal"
	// ReasonStaleRevision: the record moved past the revision the message
	// expects, by another message's write.
	ReasonStaleRevision Reason = "stale_revision"
	// ReasonJobIDMismatch: the record holds another job than the message.
	ReasonJobIDMismatch Reason = "job_id_mismatch"
	// ReasonClaimedByAnotherMessage: another dispatch holds the claim.
	ReasonClaimedByAnotherMessage Reason = "claimed_by_another_message"
	// ReasonClaimRefused: the record refused this message's claim.
	ReasonClaimRefused Reason = "claim_refused"
	// ReasonClaimConflict: another worker claimed first.
	ReasonClaimConflict Reason = "claim_conflict"
	// ReasonAwaitingReconciliation: an uncertain POST waits for an operator.
	ReasonAwaitingReconciliation Reason = "awaiting_reconciliation"
	// ReasonAwaitingReview: automation has stopped driving the record.
	ReasonAwaitingReview Reason = "awaiting_review"
	// ReasonFollowUpPending: the record's next action is due and not late.
	ReasonFollowUpPending Reason = "follow_up_pending"
	// ReasonAlreadyDelivered: the outputs are delivered.
	ReasonAlreadyDelivered Reason = "already_delivered"
	// ReasonParked: the record is parked for review.
	ReasonParked Reason = "parked"
	// ReasonNotApplicable: the observation does not apply to the record.
	ReasonNotApplicable Reason = "not_applicable"
)

// ReasonPhase: the record's phase is not one the message acts on.
func ReasonPhase(p operation.Phase) Reason { return Reason("phase_" + string(p)) }

// ReasonPrecondition: the named check (operation.Check) refuses the step.
func ReasonPrecondition(check string) Reason { return Reason("precondition_" + check) }
