package genace

import (
	"time"

	"github.com/genjobs/genjobs/internal/operation"
)

// Snapshot converts a job into what the operation record may keep: state,
// credits, timestamps and output descriptors, without signed URLs and
// without the error text (which may echo the prompt).
func (j *Job) Snapshot(observedAt time.Time) operation.Snapshot {
	s := operation.Snapshot{
		State: operation.RemoteState(j.State), SubmissionFailure: j.SubmissionFailure, Progress: j.Progress,
		Credits: operation.Credits{
			Reserved: j.Credits.Reserved, Charged: j.Credits.Charged, Refunded: j.Credits.Refunded,
			RefundState: operation.RefundState(j.Credits.RefundState),
		},
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt,
		ObservedAt: observedAt,
	}
	if j.Error != nil {
		s.ErrorCode = j.Error.Code
	}
	for _, o := range j.Outputs {
		s.Outputs = append(s.Outputs, operation.OutputDescriptor{ContentType: o.ContentType, SizeBytes: o.SizeBytes, SHA256: o.SHA256})
	}
	return s
}
