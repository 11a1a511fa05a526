package storetest

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/review"
)

// runReviewsOf runs the cases of OpenReviewsOf and ResolveReview: how a
// write that settled an operation finds and closes its reviews.
func (s *suite) runReviewsOf(t *testing.T) {
	t.Run("OpenReviewsOfOneOperation", s.openReviewsOf)
	t.Run("ResolveReviewRecordsTheReasonOnce", s.resolveReview)
}

func reviewIDs(rs []review.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

// openReviewsOf: only the operation's open reviews, oldest first, at once
// (no index lag), whatever else the table holds.
func (s *suite) openReviewsOf(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	op, other := s.id(t, "op"), s.id(t, "other-op")
	if rs, err := st.OpenReviewsOf(t.Context(), op); err != nil || len(rs) != 0 {
		t.Fatalf("open reviews of an operation without any: %v %v", reviewIDs(rs), err)
	}
	mk := func(suffix, opID string, created time.Time) review.Record {
		r := newReview(s.id(t, suffix), created)
		r.OperationID = opID
		return r
	}
	late, early, elsewhere, unnamed := mk("late", op, base.Add(2*time.Minute)), mk("early", op, base), mk("elsewhere", other, base), mk("unnamed", "", base)
	closed := mk("closed", op, base.Add(-time.Hour))
	closed.Open, closed.ClosedBy, closed.ClosedAt, closed.ClosedReason = false, "automation (handler)", base.Add(time.Minute), "resolved: operation delivered at revision 9"
	for _, r := range []review.Record{late, early, elsewhere, unnamed, closed} {
		if _, err := st.PutReview(t.Context(), r); err != nil {
			t.Fatalf("put review %s: %v", r.ID, err)
		}
	}
	rs, err := st.OpenReviewsOf(t.Context(), op)
	if err != nil {
		t.Fatalf("open reviews of: %v", err)
	}
	if got, want := reviewIDs(rs), []string{early.ID, late.ID}; !slices.Equal(got, want) {
		t.Fatalf("open reviews of %s = %q, want %q", op, got, want)
	}
	if !reflect.DeepEqual(normReview(rs[0]), normReview(early)) {
		t.Fatalf("listed review %+v differs from what was written %+v", rs[0], early)
	}
	if rs, err := st.OpenReviewsOf(t.Context(), other); err != nil || !slices.Equal(reviewIDs(rs), []string{elsewhere.ID}) {
		t.Fatalf("open reviews of %s = %q, %v", other, reviewIDs(rs), err)
	}
	// A review written closed keeps everything, the reason included.
	got, err := st.GetReview(t.Context(), closed.ID)
	if err != nil {
		t.Fatalf("get review: %v", err)
	}
	if !reflect.DeepEqual(normReview(got), normReview(closed)) {
		t.Fatalf("stored review %+v, want %+v", got, closed)
	}
	// Writing a review again files nothing twice.
	if wrote, err := st.PutReview(t.Context(), early); err != nil || wrote {
		t.Fatalf("second put: wrote=%v err=%v", wrote, err)
	}
	if rs, err := st.OpenReviewsOf(t.Context(), op); err != nil || len(rs) != 2 {
		t.Fatalf("after a second put: %q, %v", reviewIDs(rs), err)
	}
}

// resolveReview: the reason is recorded with the closer and time, the
// review leaves both listings at once (the operation's) or soon (the
// index), and a second close changes nothing.
func (s *suite) resolveReview(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	op := s.id(t, "op")
	r := newReview(s.id(t, "review"), base)
	r.OperationID = op
	if _, err := st.PutReview(t.Context(), r); err != nil {
		t.Fatalf("put review: %v", err)
	}
	at := base.Add(time.Hour + 3)
	const reason = "resolved: job job-1 is on the record (operation accepted at revision 4)"
	if err := st.ResolveReview(t.Context(), r.ID, "automation (handler)", reason, at); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if err := st.ResolveReview(t.Context(), r.ID, "bob", "something else", at.Add(time.Hour)); err != nil {
		t.Fatalf("second resolve: %v", err)
	}
	if err := st.CloseReview(t.Context(), r.ID, "carol", at.Add(2*time.Hour)); err != nil {
		t.Fatalf("close after resolve: %v", err)
	}
	got, err := st.GetReview(t.Context(), r.ID)
	if err != nil {
		t.Fatalf("get review: %v", err)
	}
	want := r
	want.Open, want.ClosedBy, want.ClosedAt, want.ClosedReason = false, "automation (handler)", at, reason
	if !reflect.DeepEqual(normReview(got), normReview(want)) {
		t.Fatalf("resolved review %+v, want %+v (the first close stands)", got, want)
	}
	if rs, err := st.OpenReviewsOf(t.Context(), op); err != nil || len(rs) != 0 {
		t.Fatalf("resolved review still listed for its operation: %q, %v", reviewIDs(rs), err)
	}
	eventually(t, func() string {
		rs, err := st.OpenReviews(t.Context())
		if err != nil {
			return "open reviews: " + err.Error()
		}
		if mine := s.mine(t, rs); len(mine) != 0 {
			return "resolved review still in the open-review index"
		}
		return ""
	})
}
