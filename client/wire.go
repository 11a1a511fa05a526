package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// This file is the API's wire contract: the intake handler
// (internal/intake) answers with these very types, and its OpenAPI drift
// test holds them to the document.

// Phase is genjobs' own phase of an operation, never Genace's job state.
type Phase string

// The phases. Delivered, failed, rejected and superseded are terminal
// (Status.Terminal says so); stalled and uncertain usually come with an
// operator review.
const (
	PhasePrepared   Phase = "prepared"
	PhaseSubmitting Phase = "submitting"
	PhaseUncertain  Phase = "uncertain"
	PhaseAccepted   Phase = "accepted"
	PhaseSucceeded  Phase = "succeeded"
	PhaseDelivered  Phase = "delivered"
	PhaseFailed     Phase = "failed"
	PhaseRejected   Phase = "rejected"
	PhaseStalled    Phase = "stalled"
	PhaseSuperseded Phase = "superseded"
)

// RemoteState is the last observed state of the Genace job.
type RemoteState string

// The Genace job states.
const (
	RemoteQueued    RemoteState = "queued"
	RemoteRunning   RemoteState = "running"
	RemoteSucceeded RemoteState = "succeeded"
	RemoteFailed    RemoteState = "failed"
	RemoteCanceled  RemoteState = "canceled"
)

// Settlement says whether a failed operation's credits are resolved.
type Settlement string

// The settlements; empty for an operation that did not fail.
const (
	SettlementUnresolved Settlement = "unresolved"
	SettlementSettled    Settlement = "settled"
)

// RefundState is Genace's refund state of a job's credits.
type RefundState string

// The refund states.
const (
	RefundNone    RefundState = "none"
	RefundPending RefundState = "pending"
	RefundSettled RefundState = "settled"
)

// CreateRequest is the body of a create (POST /v1/operations) and of a
// change (PUT /v1/operations/{id}). Every field is required.
type CreateRequest struct {
	// OperationID is the caller's idempotency key: a letter or digit, then
	// letters, digits and . _ : - only, at most 128 bytes.
	OperationID string `json:"operation_id"`
	// UserID is the user the operation is bought for: an opaque
	// identifier of the same shape (no emails: it shows in operator tools).
	UserID string `json:"user_id"`
	// Model is a name in the deployment's catalog.
	Model string `json:"model"`
	// Input is the request for Genace, a JSON object (at most 32 KiB in
	// compact form by default).
	Input json.RawMessage `json:"input"`
	// BudgetCredits is what the user authorizes this operation to spend;
	// at least the model's estimate.
	BudgetCredits int64 `json:"budget_credits"`
}

// Status is what an application sees of an operation: our phase and
// Genace's state kept apart, the credits and the settlement, whether a
// person must look at it and why in a category's words, and the outputs
// as our storage keys. It never holds the input, a signed URL, error text
// from Genace (which may echo the prompt), or who claimed or wrote the
// record.
type Status struct {
	// OperationID is the operation's id, the create's idempotency key.
	OperationID string `json:"operation_id"`
	// Revision is the record's revision, also the answer's ETag: the value
	// a change or a cancel names in If-Match.
	Revision int64 `json:"revision"`
	// SpecRevision counts the request's versions: 1, plus one per change.
	SpecRevision int64 `json:"spec_revision"`
	// UserID is the user the operation is bought for.
	UserID string `json:"user_id"`
	// Model is the catalog model asked for.
	Model string `json:"model"`
	// BudgetCredits is what the user authorized.
	BudgetCredits int64 `json:"budget_credits"`
	// EstimatedCredits is the catalog's estimate for one render of Model.
	EstimatedCredits int64 `json:"estimated_credits"`
	// Phase is genjobs' own phase, never Genace's job state.
	Phase Phase `json:"phase"`
	// Terminal: nothing will change this operation again.
	Terminal bool `json:"terminal"`
	// Remote is Genace's side, once a job is known.
	Remote *Remote `json:"remote,omitempty"`
	// Settlement says, for a failed operation, whether its credits are
	// resolved ("unresolved" or "settled").
	Settlement Settlement `json:"settlement,omitempty"`
	// OperatorReview is set while automation has stopped and waits for a
	// person.
	OperatorReview *OperatorReview `json:"operator_review,omitempty"`
	// Outputs are the outputs stored so far, by index.
	Outputs []Output `json:"outputs"`
	// CreatedAt is when the operation was created.
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is when the record last changed.
	UpdatedAt time.Time `json:"updated_at"`
}

// Remote is the last observed state of the operation's Genace job.
type Remote struct {
	// JobID is Genace's job id.
	JobID string `json:"job_id"`
	// State is empty until the job was first read.
	State RemoteState `json:"state,omitempty"`
	// Progress is Genace's progress, 0 to 1.
	Progress float64 `json:"progress"`
	// ErrorCode is Genace's error code (a token, never its message).
	ErrorCode string `json:"error_code,omitempty"`
	// Credits are the job's credits.
	Credits Credits `json:"credits"`
}

// Credits are the job's credits as Genace last reported them.
type Credits struct {
	// Reserved is what Genace holds for the job.
	Reserved int64 `json:"reserved"`
	// Charged is what Genace charged.
	Charged int64 `json:"charged"`
	// Refunded is what Genace gave back.
	Refunded int64 `json:"refunded"`
	// RefundState is Genace's refund state.
	RefundState RefundState `json:"refund_state,omitempty"`
}

// OperatorReview says that a person must decide the operation's next
// step, and why, as a category.
type OperatorReview struct {
	// Reason is a category (post_outcome_unknown, refund_unresolved, ...).
	Reason string `json:"reason"`
	// Since is when automation stopped, where the record knows it.
	Since time.Time `json:"since,omitzero"`
}

// Output is one output in our storage.
type Output struct {
	// Index is the output's place in the job's outputs.
	Index int `json:"index"`
	// Key is the object's key in the deployment's artifact bucket.
	Key string `json:"key"`
	// SizeBytes is the object's size.
	SizeBytes int64 `json:"size_bytes"`
	// SHA256 is the object's hex sha256.
	SHA256 string `json:"sha256"`
	// ContentType is the output's media type, where Genace gave one.
	ContentType string `json:"content_type,omitempty"`
}

// Error is a refused request, as the API's {"error": {...}} body says it:
// the HTTP status, a stable code to branch on, the field at fault, and a
// message for people that never quotes the input. errors.Is matches it
// against ErrBadRequest, ErrNotFound, ErrConflict and
// ErrPreconditionFailed by its status.
type Error struct {
	// Status is the HTTP status code; it is not in the body.
	Status int `json:"-"`
	// Code is one of the Code constants.
	Code string `json:"code"`
	// Field names the field (or header) at fault, where there is one.
	Field string `json:"field,omitempty"`
	// Message is for people.
	Message string `json:"message"`
	// CurrentRevision is the record's revision when a precondition named
	// another (412), so the caller can read the status and decide again.
	CurrentRevision int64 `json:"current_revision,omitempty"`
	// Phase is the operation's phase when it refuses a change or a cancel.
	Phase Phase `json:"phase,omitempty"`
}

// Error says the status, the code, the field and the message.
func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%d %s (%s): %s", e.Status, e.Code, e.Field, e.Message)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// The kinds of refusal errors.Is tells apart.
var (
	// ErrBadRequest: the request is at fault (400, 413, 415) and sending it
	// again cannot succeed; Error.Field names what to fix.
	ErrBadRequest = errors.New("genjobs: bad request")
	// ErrNotFound: no such operation (404).
	ErrNotFound = errors.New("genjobs: not found")
	// ErrConflict: the operation_id names another request, another user's
	// operation, or an operation past the point it can be changed or
	// cancelled (409; Error.Phase says where it is).
	ErrConflict = errors.New("genjobs: conflict")
	// ErrPreconditionFailed: the If-Match revision is not the operation's
	// (412; Error.CurrentRevision is) or was missing (428). Read the
	// status again and decide again.
	ErrPreconditionFailed = errors.New("genjobs: precondition failed")
)

// Is reports whether target is the sentinel of e's status.
func (e *Error) Is(target error) bool {
	switch e.Status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return target == ErrBadRequest
	case http.StatusNotFound:
		return target == ErrNotFound
	case http.StatusConflict:
		return target == ErrConflict
	case http.StatusPreconditionFailed, http.StatusPreconditionRequired:
		return target == ErrPreconditionFailed
	}
	return false
}

// The error codes; openapi.yaml lists them per route.
const (
	CodeMalformedJSON        = "malformed_json"
	CodeUnknownField         = "unknown_field"
	CodeMissingField         = "missing_field"
	CodeInvalidField         = "invalid_field"
	CodeUnknownModel         = "unknown_model"
	CodeBudgetTooLow         = "budget_too_low"
	CodeInputTooLarge        = "input_too_large"
	CodeBodyTooLarge         = "body_too_large"
	CodeUnsupportedMedia     = "unsupported_media_type"
	CodeOperationIDMismatch  = "operation_id_mismatch"
	CodeInvalidPrecondition  = "invalid_precondition"
	CodePreconditionRequired = "precondition_required"
	CodeRevisionMismatch     = "revision_mismatch"
	CodeOperationIDConflict  = "operation_id_conflict"
	CodeUserIDConflict       = "user_id_conflict"
	CodeNotChangeable        = "not_changeable"
	CodeNotCancellable       = "not_cancellable"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeForbidden            = "forbidden"
	CodeInternal             = "internal"
)

// EventType is a completion event's detail type.
type EventType string

// The completion events' detail types: each operation emits one when it
// reaches the state (a failed one again when its credits settle, one
// parked again after an operator moved it on).
const (
	EventDelivered      EventType = "Operation Delivered"
	EventFailed         EventType = "Operation Failed"
	EventRejected       EventType = "Operation Rejected"
	EventSuperseded     EventType = "Operation Superseded"
	EventNeedsAttention EventType = "Operation Needs Attention"
)

// EventSource is the completion events' EventBridge source.
const EventSource = "genjobs"

// Event is a completion event as EventBridge hands it to a rule's
// target (an SQS queue, a Lambda function), and as a local run writes it,
// one JSON line each, to its events.jsonl. Delivery is at least once:
// deduplicate on Detail.EventID (ID is EventBridge's own, new on each
// send).
type Event struct {
	ID         string      `json:"id"`
	DetailType EventType   `json:"detail-type"`
	Source     string      `json:"source"`
	Time       time.Time   `json:"time"`
	Detail     EventDetail `json:"detail"`
}

// EventDetail is what an application needs to act on the outcome, and
// nothing it must not see: never a signed URL, the input or error text.
type EventDetail struct {
	// EventID is "<operation id>:r<revision>", the same on every resend:
	// what consumers deduplicate on.
	EventID     string `json:"event_id"`
	OperationID string `json:"operation_id"`
	// Revision is the record revision whose write reached this state.
	Revision int64 `json:"revision"`
	Phase    Phase `json:"phase"`
	// RemoteState is Genace's job state as last observed (empty when no
	// job is known).
	RemoteState RemoteState `json:"remote_state,omitempty"`
	// Settlement is a failure's: unresolved (credits may still be held)
	// or settled.
	Settlement Settlement `json:"settlement,omitempty"`
	// ErrorCategory says, in a category's words, why it failed or needs
	// a person.
	ErrorCategory string `json:"error_category,omitempty"`
	// Outputs are the stored outputs, by index, as keys in the
	// deployment's artifact bucket.
	Outputs   []Output  `json:"outputs,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}
