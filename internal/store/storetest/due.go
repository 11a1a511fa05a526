package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store"
)

// dueEpoch is where the Due subtests live: long before base, so records
// the parallel subtests leave in a shared table are never due at the
// times the Due subtests ask about. Each Due subtest takes its own year,
// going back in time (dueAt), so the ones before it are never due either;
// so they run in this order, not in parallel.
var dueEpoch = time.Date(2000, 6, 1, 12, 0, 0, 123456789, time.UTC)

func (s *suite) due(t *testing.T) {
	t.Run("OnlyDueAtOrBefore", s.dueBound)
	t.Run("EarliestFirstAndLimit", s.dueOrder)
	t.Run("ExcludesInactive", s.dueExcludesInactive)
	t.Run("IndexFollowsEveryWrite", s.dueFollowsWrites)
	t.Run("UnsentEventKeepsARecordDue", s.dueUnsentEvent)
}

func ids(recs []operation.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.OperationID
	}
	return out
}

// wantDue checks Due(at, limit) lists exactly want, in order.
func wantDue(t *testing.T, st store.Store, at time.Time, limit int, want ...string) []operation.Record {
	t.Helper()
	var got []operation.Record
	eventually(t, func() string {
		var err error
		got, err = st.Due(t.Context(), at, limit)
		if err != nil {
			return fmt.Sprintf("due: %v", err)
		}
		if g := ids(got); !slices.Equal(g, want) {
			return fmt.Sprintf("Due(%s, %d) = %q, want %q", at.Format(time.RFC3339Nano), limit, g, want)
		}
		return ""
	})
	return got
}

// dueAt is the query time of the Due subtest with index k (0, 1, ...).
func dueAt(k int) time.Time { return dueEpoch.AddDate(-k, 0, 0) }

func (s *suite) dueBound(t *testing.T) {
	st := s.store(t)
	at := dueAt(0)
	early, claimed, exact := s.id(t, "early"), s.id(t, "claimed"), s.id(t, "exact")
	later, future := s.id(t, "later-by-1ns"), s.id(t, "future")
	claim := newRecord(claimed)
	claim.Phase = operation.PhaseSubmitting
	claim.Claim = &operation.Claim{Owner: "submit/worker-1", At: at.Add(-30 * time.Minute)}
	for _, r := range []operation.Record{
		scheduled(future, at.Add(time.Hour)),
		scheduled(exact, at),
		claim,
		scheduled(later, at.Add(time.Nanosecond)),
		scheduled(early, at.Add(-time.Hour)),
	} {
		mustCreate(t, st, r)
	}
	got := wantDue(t, st, at, 0, early, claimed, exact)
	for _, r := range got {
		equalRecord(t, "listed record", r, mustGet(t, st, r.OperationID))
	}
	wantDue(t, st, at.Add(-time.Hour), 0, early)
	wantDue(t, st, at.Add(-time.Hour-time.Nanosecond), 0)
}

func (s *suite) dueOrder(t *testing.T) {
	st := s.store(t)
	at := dueAt(1)
	// Created in a shuffled order; two share a due time (ordered by id).
	offsets := map[string]time.Duration{
		"c": -3 * time.Minute, "a": -5 * time.Minute, "e": -time.Minute,
		"b": -4 * time.Minute, "d": -2 * time.Minute, "d2": -2 * time.Minute,
	}
	for _, k := range []string{"c", "a", "e", "d2", "b", "d"} {
		mustCreate(t, st, scheduled(s.id(t, k), at.Add(offsets[k])))
	}
	all := []string{s.id(t, "a"), s.id(t, "b"), s.id(t, "c"), s.id(t, "d"), s.id(t, "d2"), s.id(t, "e")}
	wantDue(t, st, at, 0, all...)
	wantDue(t, st, at, 3, all[:3]...)
	wantDue(t, st, at, 1, all[0])
	wantDue(t, st, at, 100, all...)
}

func (s *suite) dueExcludesInactive(t *testing.T) {
	st := s.store(t)
	at := dueAt(2)
	due := at.Add(-time.Minute)
	with := func(suffix string, edit func(*operation.Record)) operation.Record {
		r := scheduled(s.id(t, suffix), due)
		edit(&r)
		return r
	}
	included := []operation.Record{
		with("accepted", func(*operation.Record) {}),
		// Failed but unresolved is still driven (refund chase).
		with("failed-unresolved", func(r *operation.Record) {
			r.Phase, r.Settlement = operation.PhaseFailed, operation.SettlementUnresolved
			r.Schedule.Due = due.Add(time.Second)
		}),
	}
	excluded := []operation.Record{
		with("delivered", func(r *operation.Record) { r.Phase = operation.PhaseDelivered }),
		with("failed-settled", func(r *operation.Record) {
			r.Phase, r.Settlement = operation.PhaseFailed, operation.SettlementSettled
		}),
		with("rejected", func(r *operation.Record) { r.Phase = operation.PhaseRejected }),
		with("superseded", func(r *operation.Record) { r.Phase = operation.PhaseSuperseded }),
		with("uncertain", func(r *operation.Record) { r.Phase = operation.PhaseUncertain }),
		with("stalled", func(r *operation.Record) { r.Phase = operation.PhaseStalled }),
		with("parked", func(r *operation.Record) {
			r.Parked = &operation.ParkedState{Reason: "operator", At: due}
		}),
		with("unscheduled", func(r *operation.Record) { r.Schedule = nil }),
	}
	for _, r := range append(slices.Clone(excluded), included...) {
		mustCreate(t, st, r)
	}
	wantDue(t, st, at, 0, ids(included)...)
}

func (s *suite) dueFollowsWrites(t *testing.T) {
	st := s.store(t)
	at := dueAt(3)
	id, other := s.id(t, "op"), s.id(t, "other")
	v := mustCreate(t, st, scheduled(id, at.Add(-time.Hour)))
	o := mustCreate(t, st, scheduled(other, at.Add(-30*time.Minute)))
	wantDue(t, st, at, 0, id, other)

	// Rescheduled into the future: out.
	v = revise(t, st, v, func(r *operation.Record) { r.Schedule.Due = at.Add(time.Hour) })
	wantDue(t, st, at, 0, other)

	// Back, later than other: in again, at its new place, as written.
	v = revise(t, st, v, func(r *operation.Record) {
		r.Schedule.Due, r.LastAppliedMessageID = at.Add(-10*time.Minute), "rescheduled"
	})
	got := wantDue(t, st, at, 0, other, id)
	equalRecord(t, "listed record after reschedule", got[1], v)

	// A refused write changes nothing.
	stale := v.Clone()
	stale.Schedule = nil
	if _, err := st.Update(t.Context(), stale, v.Revision-1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale update: want ErrConflict, got %v", err)
	}
	wantDue(t, st, at, 0, other, id)

	// Parked: out. Unparked via an audited write: in.
	v = revise(t, st, v, func(r *operation.Record) {
		r.Parked = &operation.ParkedState{Reason: "operator", At: at}
	})
	wantDue(t, st, at, 0, other)
	v = revise(t, st, v, func(r *operation.Record) { r.Parked = nil }, auditEntry(id, v.Phase, v.Phase, v.Revision))
	wantDue(t, st, at, 0, other, id)

	// Schedule cleared: out. Terminal: out.
	revise(t, st, o, func(r *operation.Record) { r.Schedule = nil })
	wantDue(t, st, at, 0, id)
	revise(t, st, v, func(r *operation.Record) { r.Phase = operation.PhaseDelivered })
	wantDue(t, st, at, 0)
}
