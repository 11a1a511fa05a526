package intake

import (
	"cmp"
	"slices"

	"github.com/genjobs/genjobs/client"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/worker"
)

// The wire types are the public client's, so that the handler and the
// client cannot disagree on them; openapi_test holds them to openapi.yaml.
type (
	// CreateRequest is client.CreateRequest.
	CreateRequest = client.CreateRequest
	// Status is client.Status.
	Status = client.Status
	// Remote is client.Remote.
	Remote = client.Remote
	// Credits is client.Credits.
	Credits = client.Credits
	// OperatorReview is client.OperatorReview.
	OperatorReview = client.OperatorReview
	// Output is client.Output.
	Output = client.Output
	// Error is client.Error: a refused request.
	Error = client.Error
)

// View is rec as an application may see it.
func View(rec operation.Record) Status {
	st := Status{
		OperationID: rec.OperationID, Revision: rec.Revision, SpecRevision: rec.SpecRevision, UserID: rec.UserID, Model: rec.Model,
		BudgetCredits: rec.BudgetCredits, EstimatedCredits: rec.EstimatedCredits, Phase: client.Phase(rec.Phase), Terminal: rec.Terminal(),
		Settlement: client.Settlement(rec.Settlement), Outputs: []Output{}, CreatedAt: rec.Timestamps.Created, UpdatedAt: rec.Timestamps.Updated,
	}
	if rec.RemoteJobID != "" || rec.Remote != nil {
		st.Remote = &Remote{JobID: rec.RemoteJobID}
		if s := rec.Remote; s != nil {
			st.Remote.State, st.Remote.Progress = client.RemoteState(s.State), s.Progress
			st.Remote.ErrorCode = operation.SafeCategory(s.ErrorCode, "")
			st.Remote.Credits = Credits{Reserved: s.Credits.Reserved, Charged: s.Credits.Charged, Refunded: s.Credits.Refunded, RefundState: client.RefundState(s.Credits.RefundState)}
		}
	}
	if worker.NeedsReview(&rec) {
		// The category, never the parked reason's text.
		r := &OperatorReview{Reason: cmp.Or(operation.SafeCategory(rec.LastError, string(rec.Phase)), string(rec.Phase))}
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
