package storetest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

// putReviews writes rs, failing on any error.
func putReviews(t *testing.T, st store.Store, rs ...review.Record) {
	t.Helper()
	for _, r := range rs {
		if _, err := st.PutReview(t.Context(), r); err != nil {
			t.Fatalf("put review %s: %v", r.ID, err)
		}
	}
}

// reviewOf is a new review of operation op.
func (s *suite) reviewOf(t *testing.T, suffix, op string, created time.Time) review.Record {
	r := newReview(s.id(t, suffix), created)
	r.OperationID = op
	return r
}

func sameReview(a, b review.Record) bool { return inUTC(a) == inUTC(b) }

func mustClose(t *testing.T, st store.Store, id, by string, at time.Time) {
	t.Helper()
	if err := st.CloseReview(t.Context(), id, by, at); err != nil {
		t.Fatalf("close review %s by %s: %v", id, by, err)
	}
}

// wantReview asserts the stored review want.ID is want.
func wantReview(t *testing.T, st store.Store, what string, want review.Record) {
	t.Helper()
	got, err := st.GetReview(t.Context(), want.ID)
	if err != nil {
		t.Fatalf("get review: %v", err)
	}
	if !sameReview(got, want) {
		t.Fatalf("%s: stored review %+v, want %+v", what, got, want)
	}
}

// wantOpenOf asserts OpenReviewsOf(op) is want, at once (no index lag).
func wantOpenOf(t *testing.T, st store.Store, op string, want ...review.Record) {
	t.Helper()
	rs, err := st.OpenReviewsOf(t.Context(), op)
	if err != nil {
		t.Fatalf("open reviews of %s: %v", op, err)
	}
	if !slices.EqualFunc(rs, want, sameReview) {
		t.Fatalf("open reviews of %s = %+v, want %+v", op, rs, want)
	}
}

func (s *suite) putReviewOnce(t *testing.T) {
	st, id := s.parallel(t)
	first := newReview(id, base)
	wrote, err := st.PutReview(t.Context(), first)
	if err != nil || !wrote {
		t.Fatalf("first put: wrote=%v err=%v", wrote, err)
	}
	second := newReview(id, base.Add(time.Hour))
	second.Reason, second.ReceiveCount, second.Source = "something else", 9, review.SourceSweep
	wrote, err = st.PutReview(t.Context(), second)
	if err != nil || wrote {
		t.Fatalf("second put: wrote=%v err=%v, want a no-op", wrote, err)
	}
	wantReview(t, st, "the first write stands", first)
	if _, err := st.PutReview(t.Context(), newReview("", base)); err == nil {
		t.Fatal("put review with an empty id succeeded")
	}
}

func (s *suite) getReviewMissing(t *testing.T) {
	st, id := s.parallel(t)
	if _, err := st.GetReview(t.Context(), id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get missing review: want ErrNotFound, got %v", err)
	}
}

// mine filters a listing to this subtest's reviews: a shared table holds
// other subtests' open reviews too.
func (s *suite) mine(t *testing.T, rs []review.Record) []string {
	prefix := s.id(t, "")
	var out []string
	for _, r := range rs {
		if strings.HasPrefix(r.ID, prefix) {
			out = append(out, r.ID)
		}
	}
	return out
}

// wantOpen waits until OpenReviews lists no closed review and, of this
// subtest's, exactly want, in order.
func (s *suite) wantOpen(t *testing.T, st store.Store, want ...string) {
	t.Helper()
	eventually(t, func() string {
		rs, err := st.OpenReviews(t.Context())
		if err != nil {
			return fmt.Sprintf("open reviews: %v", err)
		}
		for _, r := range rs {
			if !r.Open {
				return fmt.Sprintf("open reviews lists closed review %s", r.ID)
			}
		}
		if got := s.mine(t, rs); !slices.Equal(got, want) {
			return fmt.Sprintf("open reviews = %q, want %q", got, want)
		}
		return ""
	})
}

func (s *suite) openReviews(t *testing.T) {
	st, _ := s.parallel(t)
	// Written out of creation order; listed oldest first.
	a, b, c, d := s.id(t, "a"), s.id(t, "b"), s.id(t, "c"), s.id(t, "d")
	closedAtBirth := newReview(d, base.Add(-time.Hour))
	closedAtBirth.Open = false
	putReviews(t, st, newReview(a, base.Add(2*time.Minute)), newReview(b, base), newReview(c, base.Add(time.Minute)), closedAtBirth)
	s.wantOpen(t, st, b, c, a)
	mustClose(t, st, c, "alice", base.Add(time.Hour))
	s.wantOpen(t, st, b, a)
	rs, err := st.OpenReviews(t.Context())
	if err != nil {
		t.Fatalf("open reviews: %v", err)
	}
	for _, r := range rs {
		if r.ID == b && !sameReview(r, newReview(b, base)) {
			t.Fatalf("listed review %+v differs from what was written", r)
		}
	}
}

func (s *suite) closeReview(t *testing.T) {
	st, id := s.parallel(t)
	r := newReview(id, base)
	putReviews(t, st, r)
	closedAt := base.Add(time.Hour + 5)
	mustClose(t, st, id, "alice", closedAt)
	mustClose(t, st, id, "bob", closedAt.Add(time.Hour))
	// A redelivered DLQ message writing the review again must not reopen it.
	if wrote, err := st.PutReview(t.Context(), r); err != nil || wrote {
		t.Fatalf("put after close: wrote=%v err=%v, want a no-op", wrote, err)
	}
	want := r
	want.Open, want.ClosedBy, want.ClosedAt = false, "alice", closedAt
	wantReview(t, st, "closed review (the first close stands)", want)
	s.wantOpen(t, st)
	if err := st.CloseReview(t.Context(), s.id(t, "absent"), "alice", closedAt); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("close missing review: want ErrNotFound, got %v", err)
	}
}

// openReviewsOf: only the operation's open reviews, oldest first, at once
// (no index lag), whatever else the table holds.
func (s *suite) openReviewsOf(t *testing.T) {
	st, op := s.parallel(t)
	other := s.id(t, "other-op")
	wantOpenOf(t, st, op) // an operation without any
	late, early := s.reviewOf(t, "late", op, base.Add(2*time.Minute)), s.reviewOf(t, "early", op, base)
	elsewhere, unnamed := s.reviewOf(t, "elsewhere", other, base), s.reviewOf(t, "unnamed", "", base)
	closed := s.reviewOf(t, "closed", op, base.Add(-time.Hour))
	closed.Open, closed.ClosedBy, closed.ClosedAt, closed.ClosedReason = false, "automation (handler)", base.Add(time.Minute), "resolved: operation delivered at revision 9"
	putReviews(t, st, late, early, elsewhere, unnamed, closed)
	wantOpenOf(t, st, op, early, late) // as written
	wantOpenOf(t, st, other, elsewhere)
	wantReview(t, st, "a review written closed keeps everything, the reason included", closed)
	// Writing a review again files nothing twice.
	if wrote, err := st.PutReview(t.Context(), early); err != nil || wrote {
		t.Fatalf("second put: wrote=%v err=%v", wrote, err)
	}
	wantOpenOf(t, st, op, early, late)
}

// resolveReview: the reason is recorded with the closer and time, the
// review leaves both listings at once (the operation's) or soon (the
// index), and a second close changes nothing.
func (s *suite) resolveReview(t *testing.T) {
	st, op := s.parallel(t)
	r := s.reviewOf(t, "review", op, base)
	putReviews(t, st, r)
	at := base.Add(time.Hour + 3)
	const reason = "resolved: job job-1 is on the record (operation accepted at revision 4)"
	if err := st.ResolveReview(t.Context(), r.ID, "automation (handler)", reason, at); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if err := st.ResolveReview(t.Context(), r.ID, "bob", "something else", at.Add(time.Hour)); err != nil {
		t.Fatalf("second resolve: %v", err)
	}
	mustClose(t, st, r.ID, "carol", at.Add(2*time.Hour))
	want := r
	want.Open, want.ClosedBy, want.ClosedAt, want.ClosedReason = false, "automation (handler)", at, reason
	wantReview(t, st, "resolved review (the first close stands)", want)
	wantOpenOf(t, st, op) // no longer listed for its operation
	s.wantOpen(t, st)     // nor in the open-review index
}

// operationReviews: open and closed reviews of one operation, oldest
// first, and nobody else's.
func (s *suite) operationReviews(t *testing.T) {
	st, op := s.parallel(t)
	other := s.id(t, "other")
	stillOpen := s.reviewOf(t, "open", op, base.Add(2*time.Minute))
	closedLater := s.reviewOf(t, "closed-later", op, base.Add(time.Minute))
	closedAtBirth := s.reviewOf(t, "closed-at-birth", op, base)
	closedAtBirth.Open = false
	notMine := s.reviewOf(t, "not-mine", other, base)
	putReviews(t, st, stillOpen, closedLater, closedAtBirth, notMine)
	closedAt := base.Add(time.Hour)
	mustClose(t, st, closedLater.ID, "alice", closedAt)
	closedLater.Open, closedLater.ClosedBy, closedLater.ClosedAt = false, "alice", closedAt
	want := []review.Record{closedAtBirth, closedLater, stillOpen}
	eventually(t, func() string {
		got, err := st.OperationReviews(t.Context(), op)
		if err != nil {
			return fmt.Sprintf("operation reviews: %v", err)
		}
		if !slices.EqualFunc(got, want, sameReview) {
			return fmt.Sprintf("operation reviews = %+v, want %+v", got, want)
		}
		return ""
	})
	if got, err := st.OperationReviews(t.Context(), s.id(t, "nobody")); err != nil || len(got) != 0 {
		t.Fatalf("reviews of an operation without any: %+v, %v", got, err)
	}
}

// jobRefs: a record holding the job, a review and an audit entry naming
// it, each with its operation; items naming another job are not listed;
// the audit entry keeps what an operator's attach recorded.
func (s *suite) jobRefs(t *testing.T) {
	st, _ := s.parallel(t)
	job, otherJob := "job-"+s.id(t, "j"), "job-"+s.id(t, "other")
	holder, claimant, attacher, bystander := s.id(t, "holder"), s.id(t, "claimant"), s.id(t, "attacher"), s.id(t, "bystander")

	rec := newRecord(holder)
	rec.Phase, rec.RemoteJobID = operation.PhaseAccepted, job
	mustCreate(t, st, rec)
	other := newRecord(bystander)
	other.Phase, other.RemoteJobID = operation.PhaseAccepted, otherJob
	mustCreate(t, st, other)

	rv := s.reviewOf(t, "kept", claimant, base)
	rv.RemoteJobID = job
	putReviews(t, st, rv)
	mustCreate(t, st, newRecord(claimant))

	v1 := mustCreate(t, st, newRecord(attacher))
	attached := v1.Clone()
	attached.Phase, attached.RemoteJobID = operation.PhaseAccepted, job
	entry := auditEntry(attacher, operation.PhasePrepared, operation.PhaseAccepted, 1)
	entry.RemoteJobID, entry.Verification, entry.Reason = job, "unverified: the job names operation op-x", "ticket 4711"
	mustUpdate(t, st, attached, 1, entry)
	wantAudit(t, st, attacher, written(entry, attacher, 2)) // with the attach's job, verification and reason

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
