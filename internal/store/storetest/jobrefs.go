package storetest

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store"
)

// runJobRefs: every item that names a job, which an operator's
// reconciliation relies on to find who holds or claims it.
func (s *suite) runJobRefs(t *testing.T) {
	t.Run("JobRefsFindEveryHolder", s.jobRefs)
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
