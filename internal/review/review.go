// Package review holds what operators read and sign: review records for
// work that automation stopped driving, and the audit trail of replays.
// Neither ever holds a prompt, secret or signed URL.
package review

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
)

// Source says who opened a review.
type Source string

// Sources of review records.
const (
	// SourceDLQ: the triage function, for a dead-lettered message.
	SourceDLQ Source = "dlq"
	// SourceHandler: a function that parked an operation (uncertain,
	// stalled, refund unresolved past the accounting budget).
	SourceHandler Source = "handler"
	// SourceSweep: the sweep, for a claim that outlived the submit timeout.
	SourceSweep Source = "sweep"
)

// Record is one item for manual review. It is keyed by ID (the
// dead-lettered message id, or a deterministic id for a parked operation)
// so writing the same review twice is a no-op.
type Record struct {
	ID           string `json:"id" dynamodbav:"id"`
	Source       Source `json:"source" dynamodbav:"source"`
	Queue        string `json:"queue,omitempty" dynamodbav:"queue,omitempty"`
	OperationID  string `json:"operation_id,omitempty" dynamodbav:"operation_id,omitempty"`
	MessageID    string `json:"message_id,omitempty" dynamodbav:"message_id,omitempty"`
	MessageType  string `json:"action_type,omitempty" dynamodbav:"action_type,omitempty"`
	ReceiveCount int    `json:"receive_count,omitempty" dynamodbav:"receive_count,omitempty"`
	// ErrorCategory is a safe category (a code, never a message text).
	ErrorCategory string `json:"error_category,omitempty" dynamodbav:"error_category,omitempty"`
	RemoteJobID   string `json:"remote_job_id,omitempty" dynamodbav:"remote_job_id,omitempty"`
	// Phase (ours) and RemoteState (Genace's) are kept apart so nobody
	// reads a local delivery failure as a failed render.
	Phase       operation.Phase       `json:"phase,omitempty" dynamodbav:"phase,omitempty"`
	RemoteState operation.RemoteState `json:"remote_state,omitempty" dynamodbav:"remote_state,omitempty"`
	Revision    int64                 `json:"revision,omitempty" dynamodbav:"revision,omitempty"`
	Recommended operation.Action      `json:"recommended_action" dynamodbav:"recommended_action"`
	Reason      string                `json:"reason,omitempty" dynamodbav:"reason,omitempty"`
	// BodyDigest is the sha256 of a body that could not be decoded; the
	// body itself is never kept.
	BodyDigest string    `json:"body_digest,omitempty" dynamodbav:"body_digest,omitempty"`
	CreatedAt  time.Time `json:"created_at" dynamodbav:"created_at"`
	Open       bool      `json:"open" dynamodbav:"open"`
	ClosedBy   string    `json:"closed_by,omitempty" dynamodbav:"closed_by,omitempty"`
	ClosedAt   time.Time `json:"closed_at,omitzero" dynamodbav:"closed_at,omitempty"`
	// ClosedReason says why a review closed without an operator's replay:
	// the write whose evidence settled it ("resolved: ...").
	ClosedReason string `json:"closed_reason,omitempty" dynamodbav:"closed_reason,omitempty"`
}

// AuditEntry is one operator decision, written in the same transaction as
// the record update it caused.
type AuditEntry struct {
	OperationID string           `json:"operation_id" dynamodbav:"operation_id"`
	Operator    string           `json:"operator" dynamodbav:"operator"`
	Action      operation.Action `json:"action" dynamodbav:"action"`
	// Decision refines the action (e.g. "attach-job", "confirmed-not-submitted").
	Decision     string          `json:"decision,omitempty" dynamodbav:"decision,omitempty"`
	FromPhase    operation.Phase `json:"from_phase" dynamodbav:"from_phase"`
	ToPhase      operation.Phase `json:"to_phase" dynamodbav:"to_phase"`
	FromRevision int64           `json:"from_revision" dynamodbav:"from_revision"`
	// Revision is the record's revision that this decision produced; it
	// keys the entry, so one revision has at most one audit entry.
	Revision int64     `json:"resulting_revision" dynamodbav:"resulting_revision"`
	ReviewID string    `json:"review_id,omitempty" dynamodbav:"review_id,omitempty"`
	At       time.Time `json:"at" dynamodbav:"at"`
	// RemoteJobID is the job an attach-job decision put on the record, so
	// the audit trail alone says which job an operator vouched for.
	RemoteJobID string `json:"remote_job_id,omitempty" dynamodbav:"remote_job_id,omitempty"`
	// Verification is what Genace said of that job before it was
	// attached: "verified", or why it could not be (an override).
	Verification string `json:"verification,omitempty" dynamodbav:"verification,omitempty"`
	// Reason is the operator's own account of a decision that rests on
	// their word: an override, a confirmation that nothing was
	// submitted, the dispatch after one, a settlement outside Genace.
	Reason string `json:"reason,omitempty" dynamodbav:"reason,omitempty"`
	// Credits is what the decision moves: the estimate a dispatch may
	// charge, or what a settlement outside Genace accounts for (charged
	// less refunded).
	Credits int64 `json:"credits,omitempty" dynamodbav:"credits,omitempty"`
}

// UTC returns r with its times in UTC, the form it is persisted in.
func (r Record) UTC() Record {
	r.CreatedAt, r.ClosedAt = r.CreatedAt.UTC(), r.ClosedAt.UTC()
	return r
}

// UTC returns e with its time in UTC, the form it is persisted in.
func (e AuditEntry) UTC() AuditEntry {
	e.At = e.At.UTC()
	return e
}

// ForRecord builds a review of an operation as its record stands, with the
// recovery matrix's recommendation. It copies only safe fields: the
// record's input never reaches a review.
func ForRecord(id string, source Source, rec *operation.Record, now time.Time) Record {
	rc := operation.Recommend(rec)
	r := Record{
		ID: id, Source: source, OperationID: rec.OperationID, ErrorCategory: rec.LastError,
		RemoteJobID: rec.RemoteJobID, Phase: rec.Phase, Revision: rec.Revision,
		Recommended: rc.Action, Reason: rc.Reason, CreatedAt: now, Open: true,
	}
	if rec.Parked != nil {
		r.Reason = rec.Parked.Reason + "; " + rc.Reason
	}
	if rec.Remote != nil {
		r.RemoteState = rec.Remote.State
	}
	return r
}

// ParkedID is the deterministic review id for an operation parked at a
// revision, so a retried handler writes the same review once.
func ParkedID(operationID string, revision int64) string {
	return fmt.Sprintf("op:%s:r%d", operationID, revision)
}

// Decode reads a stored review strictly: unknown fields, trailing data,
// an unknown phase, action or source, or a missing id are errors. A
// corrupted record must not show an operator a wrong recommendation.
func Decode(b []byte) (Record, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var r Record
	if err := dec.Decode(&r); err != nil {
		return Record{}, fmt.Errorf("review record: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Record{}, errors.New("review record: trailing data")
	}
	if err := r.Validate(); err != nil {
		return Record{}, err
	}
	return r, nil
}

// Validate checks the fields an operator acts on.
func (r Record) Validate() error {
	switch {
	case r.ID == "" || len(r.ID) > 512:
		return errors.New("review record: id missing or over 512 bytes")
	case r.Source != SourceDLQ && r.Source != SourceHandler && r.Source != SourceSweep:
		return fmt.Errorf("review record %s: unknown source %.20q", r.ID, r.Source)
	case r.Phase != "" && !r.Phase.Valid():
		return fmt.Errorf("review record %s: unknown phase %.20q", r.ID, r.Phase)
	case r.BodyDigest != "" && !sha256Hex.MatchString(r.BodyDigest):
		return fmt.Errorf("review record %s: body digest is not a sha256", r.ID)
	}
	if _, err := operation.ParseAction(string(r.Recommended)); err != nil {
		return fmt.Errorf("review record %s: %w", r.ID, err)
	}
	return nil
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)
