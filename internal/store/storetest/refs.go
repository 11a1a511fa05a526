package storetest

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

// The reads an operator's reconciliation relies on: every review of an
// operation, closed ones included, and every item naming a job.

// operationReviews: open and closed reviews of one operation, oldest
// first, and nobody else's.
func (s *suite) operationReviews(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	op, other := s.id(t, "op"), s.id(t, "other")
	mk := func(suffix, operationID string, created time.Time, open bool) review.Record {
		r := newReview(s.id(t, suffix), created)
		r.OperationID, r.Open = operationID, open
		return r
	}
	stillOpen := mk("open", op, base.Add(2*time.Minute), true)
	closedLater := mk("closed-later", op, base.Add(time.Minute), true)
	closedAtBirth := mk("closed-at-birth", op, base, false)
	notMine := mk("not-mine", other, base, true)
	for _, r := range []review.Record{stillOpen, closedLater, closedAtBirth, notMine} {
		if _, err := st.PutReview(t.Context(), r); err != nil {
			t.Fatalf("put review %s: %v", r.ID, err)
		}
	}
	closedAt := base.Add(time.Hour)
	if err := st.CloseReview(t.Context(), closedLater.ID, "alice", closedAt); err != nil {
		t.Fatalf("close: %v", err)
	}
	closedLater.Open, closedLater.ClosedBy, closedLater.ClosedAt = false, "alice", closedAt
	want := []review.Record{closedAtBirth, closedLater, stillOpen}
	eventually(t, func() string {
		got, err := st.OperationReviews(t.Context(), op)
		if err != nil {
			return fmt.Sprintf("operation reviews: %v", err)
		}
		if len(got) != len(want) {
			return fmt.Sprintf("operation reviews = %q, want %q", reviewIDs(got), reviewIDs(want))
		}
		for i := range got {
			if !reflect.DeepEqual(normReview(got[i]), normReview(want[i])) {
				return fmt.Sprintf("operation review %d = %+v, want %+v", i, got[i], want[i])
			}
		}
		return ""
	})
	if got, err := st.OperationReviews(t.Context(), s.id(t, "nobody")); err != nil || len(got) != 0 {
		t.Fatalf("reviews of an operation without any: %q, %v", reviewIDs(got), err)
	}
}

// jobRefs: a record holding the job, a review and an audit entry naming
// it, each with its operation; items naming another job are not listed;
// the audit entry keeps what an operator's attach recorded.
func (s *suite) jobRefs(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	job, otherJob := "job-"+s.id(t, "j"), "job-"+s.id(t, "other")
	holder, claimant, attacher, bystander := s.id(t, "holder"), s.id(t, "claimant"), s.id(t, "attacher"), s.id(t, "bystander")

	rec := newRecord(holder)
	rec.Phase, rec.RemoteJobID = operation.PhaseAccepted, job
	mustCreate(t, st, rec)
	other := newRecord(bystander)
	other.Phase, other.RemoteJobID = operation.PhaseAccepted, otherJob
	mustCreate(t, st, other)

	rv := newReview(s.id(t, "kept"), base)
	rv.OperationID, rv.RemoteJobID = claimant, job
	if _, err := st.PutReview(t.Context(), rv); err != nil {
		t.Fatalf("put review: %v", err)
	}
	mustCreate(t, st, newRecord(claimant))

	v1 := mustCreate(t, st, newRecord(attacher))
	attached := v1.Clone()
	attached.Phase, attached.RemoteJobID = operation.PhaseAccepted, job
	entry := auditEntry(attacher, operation.PhasePrepared, operation.PhaseAccepted, 1)
	entry.RemoteJobID, entry.Verification, entry.Reason = job, "unverified: the job names operation op-x", "ticket 4711"
	if _, err := st.UpdateWithAudit(t.Context(), attached, 1, entry); err != nil {
		t.Fatalf("update with audit: %v", err)
	}
	if got := mustAudit(t, st, attacher); len(got) != 1 || got[0].RemoteJobID != job || got[0].Verification != entry.Verification || got[0].Reason != entry.Reason {
		t.Fatalf("audit entry %+v lost the attach's job, verification or reason", got)
	}

	want := []store.JobRef{
		{JobID: job, OperationID: attacher, Kind: store.RefAudit, Key: "2"},
		{JobID: job, OperationID: attacher, Kind: store.RefRecord},
		{JobID: job, OperationID: claimant, Kind: store.RefReview, Key: rv.ID},
		{JobID: job, OperationID: holder, Kind: store.RefRecord},
	}
	slices.SortFunc(want, func(a, b store.JobRef) int {
		return cmp.Or(cmp.Compare(a.OperationID, b.OperationID), cmp.Compare(a.Kind, b.Kind))
	})
	eventually(t, func() string {
		got, err := st.JobRefs(t.Context(), job)
		if err != nil {
			return fmt.Sprintf("job refs: %v", err)
		}
		if !slices.Equal(got, want) {
			return fmt.Sprintf("job refs = %+v, want %+v", got, want)
		}
		return ""
	})
	if got, err := st.JobRefs(t.Context(), "job-"+s.id(t, "unknown")); err != nil || len(got) != 0 {
		t.Fatalf("refs of an unknown job: %+v, %v", got, err)
	}
	if _, err := st.JobRefs(t.Context(), ""); err == nil {
		t.Fatal("job refs of an empty id succeeded")
	}
}
