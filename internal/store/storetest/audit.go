package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

// ackEntry is an acknowledgement of the record at rev: a decision that
// changes nothing.
func ackEntry(id string, phase operation.Phase, rev int64, at time.Time) review.AuditEntry {
	return review.AuditEntry{OperationID: id, Operator: "carol", Action: operation.ActionAcknowledge, Decision: "acknowledged",
		FromPhase: phase, ToPhase: phase, FromRevision: rev, Revision: rev, At: at}
}

// appendAuditTerminal: an acknowledgement of a terminal record is kept
// without writing the record, after the entry that produced its revision
// and before the next revision's; the same entry twice is one entry.
func (s *suite) appendAuditTerminal(t *testing.T) {
	st, id, v1 := s.created(t)
	v2 := revise(t, st, v1, func(r *operation.Record) { r.Phase = operation.PhaseSuperseded },
		auditEntry(id, operation.PhasePrepared, operation.PhaseSuperseded, 1))
	first := ackEntry(id, operation.PhaseSuperseded, 2, base.Add(2*time.Hour))
	later := ackEntry(id, operation.PhaseSuperseded, 2, base.Add(2*time.Hour+time.Nanosecond))
	later.Operator = "dave"
	for _, e := range []review.AuditEntry{later, first, first} { // out of order, and once again
		if err := st.AppendAudit(t.Context(), e); err != nil {
			t.Fatalf("append audit by %s: %v", e.Operator, err)
		}
	}
	clash := first
	clash.Operator = "mallory" // another entry at the same instant
	if err := st.AppendAudit(t.Context(), clash); !errors.Is(err, store.ErrExists) {
		t.Errorf("another entry at the same revision and time: got %v, want ErrExists", err)
	}
	changed := ackEntry(id, operation.PhasePrepared, 2, base.Add(3*time.Hour))
	changed.ToPhase = operation.PhaseSuperseded
	withJob := ackEntry(id, operation.PhaseSuperseded, 2, base.Add(3*time.Hour))
	withJob.RemoteJobID = "job-x"
	for name, e := range map[string]review.AuditEntry{"a change of phase": changed, "a job attached": withJob} {
		if err := st.AppendAudit(t.Context(), e); err == nil || errors.Is(err, store.ErrConflict) {
			t.Errorf("%s: want a plain error, got %v", name, err)
		}
	}
	equalRecord(t, "record after the acknowledgements", mustGet(t, st, id), v2)
	var got []string
	for _, e := range mustAudit(t, st, id) {
		got = append(got, fmt.Sprintf("%s r%d", e.Operator, e.Revision))
	}
	if want := []string{"alice r2", "carol r2", "dave r2"}; !slices.Equal(got, want) {
		t.Fatalf("audit %v, want %v", got, want)
	}
}

// appendAuditStale: an entry about a revision the record has left, or
// of a record that does not exist, is refused with the current record.
func (s *suite) appendAuditStale(t *testing.T) {
	st, id, v1 := s.created(t)
	v2 := revise(t, st, v1, func(r *operation.Record) { r.LastAppliedMessageID = "msg-2" })
	err := st.AppendAudit(t.Context(), ackEntry(id, operation.PhasePrepared, 1, base.Add(time.Hour)))
	wantConflictWithCurrent(t, st, err, 1, v2)
	wantAudit(t, st, id)
	absent := s.id(t, "absent")
	if err := st.AppendAudit(t.Context(), ackEntry(absent, operation.PhasePrepared, 1, base)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("append audit of a missing record: got %v, want ErrConflict", err)
	}
	wantAudit(t, st, absent)
}

func (s *suite) auditWritesBoth(t *testing.T) {
	st, id, v1 := s.created(t)
	next := v1.Clone()
	next.Phase = operation.PhaseSuperseded
	entry := auditEntry(id, operation.PhasePrepared, operation.PhaseSuperseded, 1)
	got := mustUpdate(t, st, next, 1, entry)
	want := next
	want.Revision = 2
	want.Event = operation.OwedEvent(want) // superseded: the write owes its event
	equalRecord(t, "update with audit's result", got, want)
	equalRecord(t, "stored record", mustGet(t, st, id), want)
	wantAudit(t, st, id, written(entry, id, 2))
}

func (s *suite) auditStale(t *testing.T) {
	st, id, v1 := s.created(t)
	v2 := revise(t, st, v1, func(r *operation.Record) { r.LastAppliedMessageID = "msg-2" })

	stale := v1.Clone()
	stale.Phase = operation.PhaseSuperseded
	_, err := st.UpdateWithAudit(t.Context(), stale, 1, auditEntry(id, operation.PhasePrepared, operation.PhaseSuperseded, 1))
	wantConflictWithCurrent(t, st, err, 1, v2)
	wantAudit(t, st, id)
}

func (s *suite) oneAuditPerRevision(t *testing.T) {
	st, id, v1 := s.created(t)
	first := v1.Clone()
	first.LastAppliedMessageID = "replay-1"
	firstEntry := auditEntry(id, operation.PhasePrepared, operation.PhasePrepared, 1)
	v2 := mustUpdate(t, st, first, 1, firstEntry)

	second := v1.Clone()
	second.LastAppliedMessageID = "replay-2"
	secondEntry := auditEntry(id, operation.PhasePrepared, operation.PhasePrepared, 1)
	secondEntry.Operator, secondEntry.Revision = "bob", 2
	_, err := st.UpdateWithAudit(t.Context(), second, 1, secondEntry)
	wantConflictWithCurrent(t, st, err, 1, v2)
	wantAudit(t, st, id, written(firstEntry, id, 2)) // alice's, for revision 2
}

func (s *suite) auditConcurrent(t *testing.T) {
	st, id, v1 := s.created(t)

	const operators = 8
	errs := make([]error, operators)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range operators {
		wg.Go(func() {
			next := v1.Clone()
			next.LastAppliedMessageID = fmt.Sprintf("operator-%d", i)
			e := auditEntry(id, operation.PhasePrepared, operation.PhasePrepared, 1)
			e.Operator = fmt.Sprintf("operator-%d", i)
			<-gate
			_, errs[i] = st.UpdateWithAudit(t.Context(), next, 1, e)
		})
	}
	close(gate)
	wg.Wait()

	winners := 0
	for i, err := range errs {
		switch {
		case err == nil:
			winners++
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("operator %d: want success or ErrConflict, got %v", i, err)
		}
	}
	if winners != 1 {
		t.Fatalf("%d operators won, want exactly 1: %v", winners, errs)
	}
	stored := mustGet(t, st, id)
	entries := mustAudit(t, st, id)
	if len(entries) != 1 || entries[0].Operator != stored.LastAppliedMessageID {
		t.Fatalf("audit = %+v for a record written by %q, want that operator's one entry", entries, stored.LastAppliedMessageID)
	}
}

func (s *suite) auditMismatch(t *testing.T) {
	st, id, v1 := s.created(t)
	next := v1.Clone()
	next.Phase = operation.PhaseSuperseded

	wrongRev := auditEntry(id, operation.PhasePrepared, operation.PhaseSuperseded, 1)
	wrongRev.Revision = 3 // the update produces 2
	wrongOp := auditEntry(id, operation.PhasePrepared, operation.PhaseSuperseded, 1)
	wrongOp.OperationID = s.id(t, "other")
	for name, e := range map[string]review.AuditEntry{"wrong revision": wrongRev, "wrong operation": wrongOp} {
		_, err := st.UpdateWithAudit(t.Context(), next, 1, e)
		if err == nil || errors.Is(err, store.ErrConflict) {
			t.Errorf("%s: want a plain error, got %v", name, err)
		}
	}
	equalRecord(t, "record after refused audited writes", mustGet(t, st, id), v1)
	wantAudit(t, st, id)
}

func (s *suite) auditOrder(t *testing.T) {
	st, id, cur := s.created(t)
	// 12 entries: revisions 2..13 cross from one digit to two, where a
	// store sorting unpadded strings would put 10 before 2.
	for rev := int64(1); rev <= 12; rev++ {
		cur = revise(t, st, cur, func(r *operation.Record) { r.Counters.Observations++ },
			auditEntry(id, operation.PhasePrepared, operation.PhasePrepared, rev))
	}
	entries := mustAudit(t, st, id)
	var revs []int64
	for _, e := range entries {
		revs = append(revs, e.Revision)
	}
	want := []int64{2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
	if !slices.Equal(revs, want) {
		t.Fatalf("audit revisions %v, want %v", revs, want)
	}
	wantAudit(t, st, s.id(t, "absent"))
}
