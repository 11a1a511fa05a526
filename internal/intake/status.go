package intake

import (
	"cmp"
	"slices"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/worker"
)

// Status is what an application sees of an operation: our phase and
// Genace's state kept apart, the credits and the settlement, whether a
// person must look at it and why in a category's words, and the outputs
// as our storage keys. It never holds the input, a signed URL, error text
// from Genace (which may echo the prompt), or who claimed or wrote the
// record.
type Status struct {
	OperationID string `json:"operation_id"`
	// Revision is the record's revision, also the answer's ETag: the value
	// a change or a cancel names in If-Match.
	Revision int64 `json:"revision"`
	// SpecRevision counts the request's versions: 1, plus one per change.
	SpecRevision     int64  `json:"spec_revision"`
	UserID           string `json:"user_id"`
	Model            string `json:"model"`
	BudgetCredits    int64  `json:"budget_credits"`
	EstimatedCredits int64  `json:"estimated_credits"`
	// Phase is genjobs' own phase, never Genace's job state.
	Phase operation.Phase `json:"phase"`
	// Terminal: nothing will change this operation again.
	Terminal bool `json:"terminal"`
	// Remote is Genace's side, once a job is known.
	Remote *Remote `json:"remote,omitempty"`
	// Settlement says, for a failed operation, whether its credits are
	// resolved ("unresolved" or "settled").
	Settlement operation.Settlement `json:"settlement,omitempty"`
	// OperatorReview is set while automation has stopped and waits for a
	// person.
	OperatorReview *OperatorReview `json:"operator_review,omitempty"`
	// Outputs are the outputs stored so far, by index.
	Outputs   []Output  `json:"outputs"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Remote is the last observed state of the operation's Genace job.
type Remote struct {
	JobID string `json:"job_id"`
	// State is empty until the job was first read.
	State    operation.RemoteState `json:"state,omitempty"`
	Progress float64               `json:"progress"`
	// ErrorCode is Genace's error code (a token, never its message).
	ErrorCode string  `json:"error_code,omitempty"`
	Credits   Credits `json:"credits"`
}

// Credits are the job's credits as Genace last reported them.
type Credits struct {
	Reserved    int64                 `json:"reserved"`
	Charged     int64                 `json:"charged"`
	Refunded    int64                 `json:"refunded"`
	RefundState operation.RefundState `json:"refund_state,omitempty"`
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
	Index int `json:"index"`
	// Key is the object's key in the deployment's artifact bucket.
	Key         string `json:"key"`
	SizeBytes   int64  `json:"size_bytes"`
	SHA256      string `json:"sha256"`
	ContentType string `json:"content_type,omitempty"`
}

// View is rec as an application may see it.
func View(rec operation.Record) Status {
	st := Status{
		OperationID: rec.OperationID, Revision: rec.Revision, SpecRevision: rec.SpecRevision, UserID: rec.UserID, Model: rec.Model,
		BudgetCredits: rec.BudgetCredits, EstimatedCredits: rec.EstimatedCredits, Phase: rec.Phase, Terminal: rec.Terminal(),
		Settlement: rec.Settlement, Outputs: []Output{}, CreatedAt: rec.Timestamps.Created, UpdatedAt: rec.Timestamps.Updated,
	}
	if rec.RemoteJobID != "" || rec.Remote != nil {
		st.Remote = &Remote{JobID: rec.RemoteJobID}
		if s := rec.Remote; s != nil {
			st.Remote.State, st.Remote.Progress = s.State, s.Progress
			st.Remote.ErrorCode = safe(s.ErrorCode, "")
			st.Remote.Credits = Credits{Reserved: s.Credits.Reserved, Charged: s.Credits.Charged, Refunded: s.Credits.Refunded, RefundState: s.Credits.RefundState}
		}
	}
	if worker.NeedsReview(&rec) {
		// The category, never the parked reason's text.
		r := &OperatorReview{Reason: safe(rec.LastError, string(rec.Phase))}
		if rec.Parked != nil {
			r.Since = rec.Parked.At
		}
		st.OperatorReview = r
	}
	for _, d := range rec.Deliveries {
		o := Output{Index: d.Index, Key: d.Key, SizeBytes: d.SizeBytes, SHA256: d.SHA256}
		if rec.Remote != nil && d.Index >= 0 && d.Index < len(rec.Remote.Outputs) {
			o.ContentType = rec.Remote.Outputs[d.Index].ContentType
		}
		st.Outputs = append(st.Outputs, o)
	}
	slices.SortFunc(st.Outputs, func(a, b Output) int { return cmp.Compare(a.Index, b.Index) })
	return st
}

// safe is code when it has a category's shape, else def.
func safe(code, def string) string {
	if safeCode.MatchString(code) {
		return code
	}
	return def
}
