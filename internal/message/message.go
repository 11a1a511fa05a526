// Package message is the queue envelope: an instruction to look at one
// operation's record, never an instruction to POST. It holds identifiers
// and numbers only, so no prompt, credential or URL can ride in it.
package message

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
)

// Action is what the receiving function should consider doing.
type Action string

// The actions, one per consuming function.
const (
	ActionSubmitGeneration  Action = "submit_generation"
	ActionObserveGeneration Action = "observe_generation"
	ActionDeliverArtifacts  Action = "deliver_artifacts"
)

// Actions lists every action.
var Actions = []Action{ActionSubmitGeneration, ActionObserveGeneration, ActionDeliverArtifacts}

// MaxBodyBytes bounds an envelope. Real ones are ~150 bytes; anything near
// this limit is not ours.
const MaxBodyBytes = 1024

// Envelope is the body of every genjobs queue message.
type Envelope struct {
	Action              Action `json:"action"`
	OperationID         string `json:"operation_id"`
	ExpectedRevision    int64  `json:"expected_revision"`
	ExpectedRemoteJobID string `json:"expected_remote_job_id,omitempty"`
	Attempt             int    `json:"attempt"`
}

// ErrMalformed is the sentinel every decoding failure wraps: a malformed
// message is permanent and goes to the DLQ, never retried.
var ErrMalformed = errors.New("malformed message")

// DecodeError names the field and the problem.
type DecodeError struct {
	Field   string
	Problem string
}

func (e *DecodeError) Error() string {
	if e.Field == "" {
		return "malformed message: " + e.Problem
	}
	return fmt.Sprintf("malformed message: %s: %s", e.Field, e.Problem)
}

// Is makes errors.Is(err, ErrMalformed) true.
func (e *DecodeError) Is(target error) bool { return target == ErrMalformed }

// Identifiers are short tokens: a letter or digit, then letters, digits
// and . _ : - only, at most 128 bytes. That is what keeps URLs (no '/' or
// '?'), prompts (no spaces) and keys (bounded length) out of a message,
// and makes every identifier safe as a URL path segment and a table key.
var identifierPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// ValidOperationID reports whether s may name an operation.
func ValidOperationID(s string) bool { return identifierPattern.MatchString(s) }

// ValidJobID reports whether s may name a Genace job. It is the one
// definition of a job id: the Genace client hands back no other id as a
// job handle, so every id on a record can be carried in a follow-up.
func ValidJobID(s string) bool { return identifierPattern.MatchString(s) }

// MaxAttempt bounds the attempt counter; beyond it something loops.
const MaxAttempt = 1_000_000

// wire has pointers so a missing field is told from a zero one.
type wire struct {
	Action              *string `json:"action"`
	OperationID         *string `json:"operation_id"`
	ExpectedRevision    *int64  `json:"expected_revision"`
	ExpectedRemoteJobID *string `json:"expected_remote_job_id"`
	Attempt             *int    `json:"attempt"`
}

// Decode parses and validates a body strictly: unknown fields, missing
// fields, wrong types, trailing data and oversize bodies are errors of
// type *DecodeError.
func Decode(body []byte) (Envelope, error) {
	if len(body) > MaxBodyBytes {
		return Envelope{}, &DecodeError{Problem: fmt.Sprintf("body is %d bytes, over the %d-byte limit", len(body), MaxBodyBytes)}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var w wire
	if err := dec.Decode(&w); err != nil {
		return Envelope{}, jsonProblem(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Envelope{}, &DecodeError{Problem: "trailing data after the JSON object"}
	}
	if w.Action == nil {
		return Envelope{}, &DecodeError{Field: "action", Problem: "missing"}
	}
	if w.OperationID == nil {
		return Envelope{}, &DecodeError{Field: "operation_id", Problem: "missing"}
	}
	if w.ExpectedRevision == nil {
		return Envelope{}, &DecodeError{Field: "expected_revision", Problem: "missing"}
	}
	if w.Attempt == nil {
		return Envelope{}, &DecodeError{Field: "attempt", Problem: "missing"}
	}
	e := Envelope{Action: Action(*w.Action), OperationID: *w.OperationID, ExpectedRevision: *w.ExpectedRevision, Attempt: *w.Attempt}
	if w.ExpectedRemoteJobID != nil {
		e.ExpectedRemoteJobID = *w.ExpectedRemoteJobID
		if e.ExpectedRemoteJobID == "" {
			return Envelope{}, &DecodeError{Field: "expected_remote_job_id", Problem: "empty; omit it instead"}
		}
	}
	if err := e.Validate(); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

func jsonProblem(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		return &DecodeError{Field: typeErr.Field, Problem: fmt.Sprintf("wrong type: got JSON %s, want %s", typeErr.Value, typeErr.Type)}
	case errors.As(err, &syntaxErr):
		return &DecodeError{Problem: fmt.Sprintf("invalid JSON at byte %d", syntaxErr.Offset)}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &DecodeError{Problem: "empty or truncated body"}
	}
	// DisallowUnknownFields reports `json: unknown field "x"`; keep the
	// field's name (bounded by MaxBodyBytes), drop nothing else of value.
	return &DecodeError{Problem: err.Error()}
}

// Validate checks the semantic rules shared by Decode and Encode.
func (e Envelope) Validate() error {
	switch e.Action {
	case ActionSubmitGeneration:
		if e.ExpectedRemoteJobID != "" {
			return &DecodeError{Field: "expected_remote_job_id", Problem: "not allowed on submit_generation"}
		}
	case ActionObserveGeneration, ActionDeliverArtifacts:
		if e.ExpectedRemoteJobID == "" {
			return &DecodeError{Field: "expected_remote_job_id", Problem: "required for " + string(e.Action)}
		}
		if !ValidJobID(e.ExpectedRemoteJobID) {
			return &DecodeError{Field: "expected_remote_job_id", Problem: "not a job id (letters, digits, . _ : - only, at most 128)"}
		}
	default:
		return &DecodeError{Field: "action", Problem: fmt.Sprintf("unknown action %.40q", string(e.Action))}
	}
	if !ValidOperationID(e.OperationID) {
		return &DecodeError{Field: "operation_id", Problem: "not an operation id (letters, digits, . _ : - only, at most 128)"}
	}
	if e.ExpectedRevision < 1 {
		return &DecodeError{Field: "expected_revision", Problem: "must be at least 1"}
	}
	if e.Attempt < 0 || e.Attempt > MaxAttempt {
		return &DecodeError{Field: "attempt", Problem: fmt.Sprintf("must be between 0 and %d", MaxAttempt)}
	}
	return nil
}

// Encode validates and marshals an envelope.
func (e Envelope) Encode() ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(e)
}

// Next returns the envelope for a follow-up action on the same operation.
func (e Envelope) Next(action Action, revision int64, jobID string) Envelope {
	return Envelope{Action: action, OperationID: e.OperationID, ExpectedRevision: revision, ExpectedRemoteJobID: jobID, Attempt: e.Attempt + 1}
}
