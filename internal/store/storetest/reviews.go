package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

// runReviews: reviews written once, listed while open, closed once; and
// the reads by operation that a write settling an operation (OpenReviewsOf,
// ResolveReview) and an operator's reconciliation (OperationReviews, closed
// reviews included) rely on.
func (s *suite) runReviews(t *testing.T) {
	t.Run("PutReviewOnce", s.putReviewOnce)
	t.Run("GetReviewMissing", s.getReviewMissing)
	t.Run("OpenReviewsExcludesClosed", s.openReviews)
	t.Run("CloseReviewIdempotent", s.closeReview)
	t.Run("OpenReviewsOfOneOperation", s.openReviewsOf)
	t.Run("ResolveReviewRecordsTheReasonOnce", s.resolveReview)
	t.Run("OperationReviewsOpenAndClosed", s.operationReviews)
}

func (s *suite) putReviewOnce(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "review")
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
	got, err := st.GetReview(t.Context(), id)
	if err != nil {
		t.Fatalf("get review: %v", err)
	}
	if !reflect.DeepEqual(normReview(got), normReview(first)) {
		t.Fatalf("stored review %+v, want the first write %+v", got, first)
	}
	if _, err := st.PutReview(t.Context(), newReview("", base)); err == nil {
		t.Fatal("put review with an empty id succeeded")
	}
}

func (s *suite) getReviewMissing(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	if _, err := st.GetReview(t.Context(), s.id(t, "absent")); !errors.Is(err, store.ErrNotFound) {
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

func (s *suite) openReviews(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	// Written out of creation order; listed oldest first.
	a, b, c, d := s.id(t, "a"), s.id(t, "b"), s.id(t, "c"), s.id(t, "d")
	closedAtBirth := newReview(d, base.Add(-time.Hour))
	closedAtBirth.Open = false
	for _, r := range []review.Record{newReview(a, base.Add(2*time.Minute)), newReview(b, base), newReview(c, base.Add(time.Minute)), closedAtBirth} {
		if _, err := st.PutReview(t.Context(), r); err != nil {
			t.Fatalf("put review %s: %v", r.ID, err)
		}
	}
	check := func(want ...string) {
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
	check(b, c, a)
	if err := st.CloseReview(t.Context(), c, "alice", base.Add(time.Hour)); err != nil {
		t.Fatalf("close review: %v", err)
	}
	check(b, a)
	rs, err := st.OpenReviews(t.Context())
	if err != nil {
		t.Fatalf("open reviews: %v", err)
	}
	for _, r := range rs {
		if r.ID == b && !reflect.DeepEqual(normReview(r), normReview(newReview(b, base))) {
			t.Fatalf("listed review %+v differs from what was written", r)
		}
	}
}

func (s *suite) closeReview(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "review")
	r := newReview(id, base)
	if _, err := st.PutReview(t.Context(), r); err != nil {
		t.Fatalf("put review: %v", err)
	}
	closedAt := base.Add(time.Hour + 5)
	if err := st.CloseReview(t.Context(), id, "alice", closedAt); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := st.CloseReview(t.Context(), id, "bob", closedAt.Add(time.Hour)); err != nil {
		t.Fatalf("second close: %v", err)
	}
	// A redelivered DLQ message writing the review again must not reopen it.
	if wrote, err := st.PutReview(t.Context(), r); err != nil || wrote {
		t.Fatalf("put after close: wrote=%v err=%v, want a no-op", wrote, err)
	}
	got, err := st.GetReview(t.Context(), id)
	if err != nil {
		t.Fatalf("get review: %v", err)
	}
	want := r
	want.Open, want.ClosedBy, want.ClosedAt = false, "alice", closedAt
	if !reflect.DeepEqual(normReview(got), normReview(want)) {
		t.Fatalf("closed review %+v, want %+v (the first close stands)", got, want)
	}
	eventually(t, func() string {
		rs, err := st.OpenReviews(t.Context())
		if err != nil {
			return fmt.Sprintf("open reviews: %v", err)
		}
		if mine := s.mine(t, rs); len(mine) != 0 {
			return fmt.Sprintf("closed review still listed open: %q", mine)
		}
		return ""
	})
	if err := st.CloseReview(t.Context(), s.id(t, "absent"), "alice", closedAt); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("close missing review: want ErrNotFound, got %v", err)
	}
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
