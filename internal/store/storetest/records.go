package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store"
)

func (s *suite) createIfAbsent(t *testing.T) {
	st, id := s.parallel(t)
	rec := newRecord(id)
	got := mustCreate(t, st, rec)
	if got.Revision != 1 {
		t.Fatalf("create returned revision %d, want 1", got.Revision)
	}
	want := rec
	want.Revision = 1
	equalRecord(t, "create's result", got, want)
	equalRecord(t, "stored record", mustGet(t, st, id), want)

	again := newRecord(id)
	again.UserID = "someone-else"
	again.Revision = 1
	if _, err := st.Create(t.Context(), again); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second create: want ErrExists, got %v", err)
	}
	equalRecord(t, "record after the second create", mustGet(t, st, id), want)

	// A record already at revision 1 is accepted as is.
	one := newRecord(s.id(t, "at-one"))
	one.Revision = 1
	if got := mustCreate(t, st, one); got.Revision != 1 {
		t.Fatalf("create at revision 1 returned revision %d", got.Revision)
	}
}

func (s *suite) createRejectsBadInput(t *testing.T) {
	st, id := s.parallel(t)
	rec := newRecord(id)
	rec.Revision = 5
	if _, err := st.Create(t.Context(), rec); err == nil {
		t.Fatal("create at revision 5 succeeded")
	}
	if _, err := st.Get(t.Context(), id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused create left a record (get: %v)", err)
	}
	if _, err := st.Create(t.Context(), newRecord("")); err == nil {
		t.Fatal("create with an empty id succeeded")
	}
}

func (s *suite) getMissing(t *testing.T) {
	st, id := s.parallel(t)
	if _, err := st.Get(t.Context(), id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get missing: want ErrNotFound, got %v", err)
	}
}

func (s *suite) updateRoundTrips(t *testing.T) {
	st, id, _ := s.created(t)

	full := FullRecord(id)
	full.Revision = 99 // the store sets the revision, whatever came in
	ctx := store.WithWriter(t.Context(), full.Writer)
	got, err := st.Update(ctx, full, 1)
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	want := full
	want.Revision = 2
	equalRecord(t, "update's result", got, want)
	stored := mustGet(t, st, id)
	if zero := zeroFields(reflect.ValueOf(stored), "Record"); len(zero) > 0 {
		t.Fatalf("fields empty after the round trip: %v (a new field? set it in storetest's FullRecord)", zero)
	}
	equalRecord(t, "stored full record", stored, want)

	// Writing back what was read keeps it all too, but for the writer:
	// that is whoever writes now (the context's), not who wrote before.
	stored.Counters.Observations++
	stored.Writer = "the previous writer"
	if _, err := st.Update(ctx, stored, 2); err != nil {
		t.Fatalf("read-modify-write: %v", err)
	}
	want.Revision, want.Counters.Observations = 3, want.Counters.Observations+1
	equalRecord(t, "record after a read-modify-write", mustGet(t, st, id), want)
}

func (s *suite) updateRejectsBadInput(t *testing.T) {
	st, id, created := s.created(t)
	for name, tc := range map[string]struct {
		rec      operation.Record
		expected int64
	}{
		"empty id":   {newRecord(""), 1},
		"revision 0": {newRecord(id), 0},
	} {
		_, err := st.Update(t.Context(), tc.rec, tc.expected)
		if err == nil || errors.Is(err, store.ErrConflict) {
			t.Errorf("%s: want a plain error, got %v", name, err)
		}
	}
	equalRecord(t, "record after refused updates", mustGet(t, st, id), created)
}

func (s *suite) updateMissing(t *testing.T) {
	st, id := s.parallel(t)
	_, err := st.Update(t.Context(), newRecord(id), 1)
	if ce := conflictOf(t, err, id, 1); ce.Current != nil {
		t.Fatalf("conflict on a missing record has a current record: %+v", ce.Current)
	}
	if _, err := st.Get(t.Context(), id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of a missing record created it (get: %v)", err)
	}
}

func (s *suite) staleRevision(t *testing.T) {
	st, _, v1 := s.created(t)
	v2 := revise(t, st, v1, func(r *operation.Record) {
		r.Phase, r.LastAppliedMessageID = operation.PhaseSubmitting, "msg-2"
	})

	stale := v1.Clone()
	stale.LastAppliedMessageID = "msg-stale"
	_, err := st.Update(t.Context(), stale, 1)
	wantConflictWithCurrent(t, st, err, 1, v2)

	// Ahead of the stored revision is as wrong as behind it.
	_, err = st.Update(t.Context(), stale, 5)
	wantConflictWithCurrent(t, st, err, 5, v2)
}

func (s *suite) concurrentWriters(t *testing.T) {
	st, id, _ := s.created(t)

	const writers = 16
	errs := make([]error, writers)
	var read, done sync.WaitGroup
	gate := make(chan struct{})
	for i := range writers {
		read.Add(1)
		done.Go(func() {
			cur, err := st.Get(t.Context(), id)
			read.Done()
			if err != nil {
				errs[i] = fmt.Errorf("get: %w", err)
				return
			}
			<-gate
			cur.LastAppliedMessageID = fmt.Sprintf("writer-%02d", i)
			cur.Counters.Observations = i + 1
			_, errs[i] = st.Update(t.Context(), cur, cur.Revision)
		})
	}
	read.Wait() // every writer holds revision 1 before any writes
	close(gate)
	done.Wait()

	winner := -1
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Fatalf("writers %d and %d both wrote on revision 1", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("no writer won: %v", errs)
	}
	stored := mustGet(t, st, id)
	wantMarker := fmt.Sprintf("writer-%02d", winner)
	if stored.Revision != 2 || stored.LastAppliedMessageID != wantMarker || stored.Counters.Observations != winner+1 {
		t.Fatalf("stored revision %d by %q, want revision 2 by %q", stored.Revision, stored.LastAppliedMessageID, wantMarker)
	}
	for i, err := range errs {
		if i == winner {
			continue
		}
		ce := conflictOf(t, err, id, 1)
		if ce.Current == nil {
			t.Fatalf("writer %d: conflict without the current record", i)
		}
		equalRecord(t, fmt.Sprintf("writer %d's conflict", i), *ce.Current, stored)
	}
}

func (s *suite) noLostUpdates(t *testing.T) {
	st, id, _ := s.created(t)

	const goroutines, increments = 8, 20
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range increments {
				cur, err := st.Get(t.Context(), id)
				if err != nil {
					errs <- err
					return
				}
				for attempt := 0; ; attempt++ {
					if attempt == 1000 {
						errs <- errors.New("no progress after 1000 conflicts")
						return
					}
					next := cur.Clone()
					next.Counters.Observations++
					_, err := st.Update(t.Context(), next, cur.Revision)
					if err == nil {
						break
					}
					var ce *store.ConflictError
					if !errors.As(err, &ce) || ce.Current == nil {
						errs <- fmt.Errorf("update: %w", err)
						return
					}
					cur = *ce.Current // retry on what actually stands
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := mustGet(t, st, id)
	if got.Counters.Observations != goroutines*increments || got.Revision != goroutines*increments+1 {
		t.Fatalf("counter %d at revision %d, want %d at %d (a lost update)",
			got.Counters.Observations, got.Revision, goroutines*increments, goroutines*increments+1)
	}
}

func (s *suite) terminal(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		phase operation.Phase
		settl operation.Settlement
	}{
		{"delivered", operation.PhaseDelivered, operation.SettlementNone},
		{"failed-settled", operation.PhaseFailed, operation.SettlementSettled},
		{"rejected", operation.PhaseRejected, operation.SettlementNone},
		{"superseded", operation.PhaseSuperseded, operation.SettlementNone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, id := s.parallel(t)
			v1 := mustCreate(t, st, scheduled(id, base))
			// Becoming terminal is a write like any other.
			final := revise(t, st, v1, func(r *operation.Record) { r.Phase, r.Settlement = tc.phase, tc.settl })
			if !final.Terminal() {
				t.Fatalf("fixture %s is not terminal", tc.name)
			}

			// The correct revision does not help.
			again := final.Clone()
			again.Phase, again.Settlement = operation.PhaseAccepted, operation.SettlementNone
			_, err := st.Update(t.Context(), again, 2)
			wantConflictWithCurrent(t, st, err, 2, final)
			// Nor does an audited write.
			_, err = st.UpdateWithAudit(t.Context(), again, 2, auditEntry(id, tc.phase, operation.PhaseAccepted, 2))
			wantConflictWithCurrent(t, st, err, 2, final)
			wantAudit(t, st, id)
			// A stale writer is refused too.
			_, err = st.Update(t.Context(), v1, 1)
			wantConflictWithCurrent(t, st, err, 1, final)
		})
	}
	// The control: failed but unresolved is not terminal, and must stay
	// writable (the refund is still being chased).
	t.Run("failed-unresolved-stays-writable", func(t *testing.T) {
		st, id := s.parallel(t)
		v1 := mustCreate(t, st, scheduled(id, base))
		v2 := revise(t, st, v1, func(r *operation.Record) {
			r.Phase, r.Settlement = operation.PhaseFailed, operation.SettlementUnresolved
		})
		v2.Settlement = operation.SettlementSettled
		mustUpdate(t, st, v2, 2)
	})
}
