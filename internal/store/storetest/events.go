package storetest

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store"
)

// failedAt edits a record into a failure with settlement s, written at at.
func failedAt(s operation.Settlement, at time.Time) func(*operation.Record) {
	return func(r *operation.Record) {
		r.Phase, r.Settlement, r.Schedule, r.Timestamps.Updated = operation.PhaseFailed, s, nil, at
	}
}

func wantEvent(t *testing.T, what string, rec operation.Record, want *operation.EventState) {
	t.Helper()
	got := rec.Event
	if got != nil {
		v := *got
		v.Due = v.Due.UTC()
		got = &v
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: event %+v, want %+v", what, got, want)
	}
}

func (s *suite) eventRecorded(t *testing.T) {
	st, id, v := s.created(t)
	wantEvent(t, "created prepared", v, nil)
	t1, t2 := base.Add(time.Minute), base.Add(2*time.Minute)
	v = revise(t, st, v, failedAt(operation.SettlementUnresolved, t1))
	unresolved := &operation.EventState{Revision: 2, Type: operation.EventFailed, Settlement: operation.SettlementUnresolved, Due: t1}
	wantEvent(t, "failed", v, unresolved)
	wantEvent(t, "failed, stored", mustGet(t, st, id), unresolved)
	// Written again in the same state: the same event, its id kept.
	v = revise(t, st, v, func(r *operation.Record) { r.Counters.Observations++ })
	wantEvent(t, "failed again", mustGet(t, st, id), unresolved)
	v = revise(t, st, v, failedAt(operation.SettlementSettled, t2))
	wantEvent(t, "settled", mustGet(t, st, id),
		&operation.EventState{Revision: 4, Type: operation.EventFailed, Settlement: operation.SettlementSettled, Due: t2})
	if !v.Terminal() {
		t.Fatal("a settled failure is terminal")
	}
}

func (s *suite) setEventTerminal(t *testing.T) {
	st, id, v := s.created(t)
	v = revise(t, st, v, func(r *operation.Record) {
		r.Phase, r.Timestamps.Updated = operation.PhaseDelivered, base.Add(time.Minute)
	})
	sent := v.Clone()
	sent.Event.Sent = true
	for _, attempt := range []string{"first", "again"} { // a retry of a lost answer is the same write
		got, err := st.SetEvent(t.Context(), sent)
		if err != nil {
			t.Fatalf("set event (%s): %v", attempt, err)
		}
		equalRecord(t, "set event's result", got, sent)
		equalRecord(t, "stored after set event", mustGet(t, st, id), sent)
	}
	// Still terminal: no write moves it.
	next := sent.Clone()
	next.Phase = operation.PhaseFailed
	if _, err := st.Update(t.Context(), next, sent.Revision); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update of a terminal record after set event: want ErrConflict, got %v", err)
	}
}

func (s *suite) setEventStale(t *testing.T) {
	st, id, created := s.created(t)
	if _, err := st.SetEvent(t.Context(), created); err == nil || errors.Is(err, store.ErrConflict) {
		t.Fatalf("set event of a record that owes none: want an input error, got %v", err)
	}
	owesNone := created.Clone()
	owesNone.Event = &operation.EventState{Revision: 1, Type: operation.EventDelivered, Sent: true}
	conflictOf(t, fst(st.SetEvent(t.Context(), owesNone)), id, 1)

	v := revise(t, st, created, failedAt(operation.SettlementUnresolved, base.Add(time.Minute)))
	wrongEvent := v.Clone()
	wrongEvent.Event.Revision, wrongEvent.Event.Sent = 1, true
	conflictOf(t, fst(st.SetEvent(t.Context(), wrongEvent)), id, v.Revision)

	read := v.Clone()
	v = revise(t, st, v, func(r *operation.Record) { r.Counters.Observations++ })
	read.Event.Sent = true
	ce := conflictOf(t, fst(st.SetEvent(t.Context(), read)), id, read.Revision)
	if ce.Current == nil || ce.Current.Revision != v.Revision {
		t.Fatalf("conflict's current record: %+v, want revision %d", ce.Current, v.Revision)
	}
	equalRecord(t, "record after refused set events", mustGet(t, st, id), v)
}

// fst is the error of a (record, error) pair.
func fst(_ operation.Record, err error) error { return err }

func (s *suite) dueUnsentEvent(t *testing.T) {
	st := s.store(t)
	at := dueAt(4)
	// Uncertain, not terminal: a terminal record from these old times
	// would be past a retention, and gone (TestConformsWithRetention).
	// Terminal records keep their place the same way (IndexDue).
	uncertain, parked := s.id(t, "uncertain"), s.id(t, "parked")
	d := newRecord(uncertain)
	d.Phase, d.Timestamps.Updated = operation.PhaseUncertain, at.Add(-time.Hour)
	dv := mustCreate(t, st, d)
	p := scheduled(parked, at.Add(-2*time.Hour))
	pv := mustCreate(t, st, p)
	pv = revise(t, st, pv, func(r *operation.Record) {
		r.Parked, r.Timestamps.Updated = &operation.ParkedState{Reason: "operator", At: at}, at.Add(-30*time.Minute)
	})
	// Uncertain and parked, each in the index for its unsent event.
	wantDue(t, st, at, 0, uncertain, parked)
	wantDue(t, st, at.Add(-45*time.Minute), 0, uncertain)

	// Sent: out. Deferred: due again at its new time.
	sent := dv.Clone()
	sent.Event.Sent = true
	if _, err := st.SetEvent(t.Context(), sent); err != nil {
		t.Fatalf("set event: %v", err)
	}
	deferred := pv.Clone()
	deferred.Event.Due = at.Add(time.Minute)
	if _, err := st.SetEvent(t.Context(), deferred); err != nil {
		t.Fatalf("defer event: %v", err)
	}
	wantDue(t, st, at, 0)
	wantDue(t, st, at.Add(time.Minute), 0, parked)
}
