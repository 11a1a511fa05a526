package storetest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

// AckLoss is how a conditional write whose answer was lost reaches its
// caller.
type AckLoss int

const (
	// AckRetried: the store's client sends the write again (the AWS SDK's
	// retryer does after a connection reset), and the second send meets
	// the write the first one already applied.
	AckRetried AckLoss = iota + 1
	// AckErrored: the write ends in an error that is no verdict (a
	// timeout, a reset), and its caller sends the same write again.
	AckErrored
)

func (l AckLoss) String() string {
	switch l {
	case AckRetried:
		return "retried"
	case AckErrored:
		return "errored"
	}
	return fmt.Sprintf("AckLoss(%d)", int(l))
}

// LostAck is a store with the fault "apply the write, then lose its
// answer" on demand.
type LostAck struct {
	Store store.Store
	// Lose arms the fault for the next conditional write (Update or
	// UpdateWithAudit), as loss says (with AckErrored, for every attempt
	// the store's client makes of it). disarm reports how many answers
	// were lost, so a test can tell that the fault fired.
	Lose func(loss AckLoss) (disarm func() (lost int))
}

// LoseAcks wraps st so one conditional write loses its answer: st applies
// it, the answer is dropped, and the write is sent to st again
// (AckRetried) or a timeout is reported (AckErrored). For a store with no
// transport (bbolt) this is the fault itself; for DynamoDB the faithful
// fault is a dropped HTTP response below the SDK, which its integration
// tests inject.
func LoseAcks(st store.Store) LostAck {
	l := &ackLoser{Store: st}
	return LostAck{Store: l, Lose: l.lose}
}

type ackLoser struct {
	store.Store
	mu    sync.Mutex
	armed AckLoss
	lost  int
}

func (l *ackLoser) lose(loss AckLoss) func() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed, l.lost = loss, 0
	return func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.armed = 0
		return l.lost
	}
}

// take reports the fault the next write meets, counting it as fired.
func (l *ackLoser) take() AckLoss {
	l.mu.Lock()
	defer l.mu.Unlock()
	loss := l.armed
	if loss != 0 {
		l.armed = 0
		l.lost++
	}
	return loss
}

// errAckLost is what an AckErrored write reports: a timeout, which says
// nothing about whether the write was applied.
var errAckLost = fmt.Errorf("answer lost: %w", os.ErrDeadlineExceeded)

func (l *ackLoser) write(id string, send func() (operation.Record, error)) (operation.Record, error) {
	saved, err := send()
	switch l.take() {
	case 0:
		return saved, err
	case AckRetried:
		return send()
	}
	return operation.Record{}, fmt.Errorf("update %s: %w", id, errAckLost)
}

func (l *ackLoser) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	return l.write(rec.OperationID, func() (operation.Record, error) { return l.Store.Update(ctx, rec, expected) })
}

func (l *ackLoser) UpdateWithAudit(ctx context.Context, rec operation.Record, expected int64, entry review.AuditEntry) (operation.Record, error) {
	return l.write(rec.OperationID, func() (operation.Record, error) { return l.Store.UpdateWithAudit(ctx, rec, expected, entry) })
}

// RunLostAck is the part of the suite that needs the fault: a write whose
// answer was lost is its writer's own (store.WithWriter), and the store
// must say it succeeded, never that someone else wrote first. open
// returns a store for one subtest, as Run's does, with the fault;
// RunLostAck closes it.
func RunLostAck(t *testing.T, open func(t *testing.T) LostAck) {
	s := &suite{run: rand.Text()}
	for _, loss := range []AckLoss{AckRetried, AckErrored} {
		for i, name := range []string{"Update", "UpdateWithAudit"} {
			audited := i == 1
			t.Run(name+"/"+loss.String(), func(t *testing.T) {
				t.Parallel()
				s.lostAck(t, open, loss, audited)
			})
		}
	}
}

func (s *suite) lostAck(t *testing.T, open func(t *testing.T) LostAck, loss AckLoss, audited bool) {
	la := open(t)
	st := closeAtEnd(t, la.Store)
	id := s.id(t, "op")
	mustCreate(t, st, newRecord(id))
	// Every field set, nanosecond times, one of them not in UTC: the
	// store must know its own write through its encoding.
	next := FullRecord(id)
	entry := auditEntry(id, operation.PhasePrepared, operation.PhaseAccepted, 1)
	ctx := store.WithWriter(t.Context(), next.Writer) // every handler names its writer
	write := func() (operation.Record, error) { return update(ctx, st, next, 1, entry, audited) }

	disarm := la.Lose(loss)
	got, err := write()
	if lost := disarm(); lost == 0 {
		t.Fatalf("the fault never fired (write returned %v)", err)
	}
	if loss == AckErrored {
		if err == nil || errors.Is(err, store.ErrConflict) {
			t.Fatalf("a write whose answers were all lost: want an error that is no verdict, got %v", err)
		}
		got, err = write() // the caller sends the same write again
	}
	if err != nil {
		t.Fatalf("the store took its own applied write for a lost race: %v", err)
	}
	want := next
	want.Revision = 2
	equalRecord(t, "write's result", got, want)
	equalRecord(t, "stored record", mustGet(t, st, id), want)
	wantAudit(t, st, id, writtenIf(audited, entry, id)...)
}

// ownWriteResent: the same write sent again (by its caller; no fault
// needed) is written once, and the second send hears that it succeeded,
// also when the write made the record terminal, and with its audit entry.
func (s *suite) ownWriteResent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		terminal, audited bool
		// anonymous writes with no writer: nothing tells its second send
		// from another writer's, so it must lose like any stale write.
		anonymous bool
	}{
		{"update", false, false, false},
		{"terminal", true, false, false},
		{"audited", false, true, false},
		{"anonymous", false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, id, _ := s.created(t)
			next := FullRecord(id)
			if tc.terminal {
				next.Phase, next.Parked = operation.PhaseDelivered, nil
			}
			entry := auditEntry(id, operation.PhasePrepared, next.Phase, 1)
			ctx := store.WithWriter(t.Context(), next.Writer)
			if tc.anonymous {
				ctx, next.Writer = t.Context(), ""
			}
			want := next
			want.Revision = 2
			want.Event = operation.OwedEvent(want) // terminal: a new event, owed
			for send := 1; send <= 2; send++ {
				got, err := update(ctx, st, next, 1, entry, tc.audited)
				if tc.anonymous && send == 2 {
					wantConflictWithCurrent(t, st, err, 1, want)
					return
				}
				if err != nil {
					t.Fatalf("send %d: %v", send, err)
				}
				equalRecord(t, fmt.Sprintf("send %d's result", send), got, want)
			}
			equalRecord(t, "stored record", mustGet(t, st, id), want)
			wantAudit(t, st, id, writtenIf(tc.audited, entry, id)...) // one entry for the write sent twice
		})
	}
}

// otherWriteConflicts: a write that differs from the record at
// expected+1 in any field, however little, or whose audit entry differs,
// is another writer's, and loses as any stale write does.
func (s *suite) otherWriteConflicts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(r *operation.Record, e *review.AuditEntry)
		// audited sends both writes with an audit entry.
		audited bool
	}{
		// The same message received twice, the same answer at the same
		// instant: only the writer tells the two workers apart.
		{"writer", func(r *operation.Record, _ *review.AuditEntry) { r.Writer = "observe/receive-other" }, false},
		{"message id", func(r *operation.Record, _ *review.AuditEntry) { r.LastAppliedMessageID = "msg-other" }, false},
		{"one nanosecond", func(r *operation.Record, _ *review.AuditEntry) { r.Timestamps.Updated = r.Timestamps.Updated.Add(1) }, false},
		{"claim owner", func(r *operation.Record, _ *review.AuditEntry) { r.Claim.Owner = "submit/worker-2" }, false},
		{"an output fewer", func(r *operation.Record, _ *review.AuditEntry) { r.Remote.Outputs = r.Remote.Outputs[:2] }, false},
		{"input", func(r *operation.Record, _ *review.AuditEntry) { r.Input = []byte(`{"prompt":"a lighthouse at dawn"}`) }, false},
		{"audit operator", func(_ *operation.Record, e *review.AuditEntry) { e.Operator = "bob" }, true},
		{"audit time", func(_ *operation.Record, e *review.AuditEntry) { e.At = e.At.Add(1) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, id, _ := s.created(t)
			first, firstEntry := FullRecord(id), auditEntry(id, operation.PhasePrepared, operation.PhaseAccepted, 1)
			other, otherEntry := first.Clone(), firstEntry
			other.Remote.Outputs = slices.Clone(first.Remote.Outputs)
			tc.change(&other, &otherEntry)
			write := func(r operation.Record, e review.AuditEntry) (operation.Record, error) {
				return update(store.WithWriter(t.Context(), r.Writer), st, r, 1, e, tc.audited)
			}
			want, err := write(first, firstEntry)
			if err != nil {
				t.Fatalf("first write: %v", err)
			}
			_, err = write(other, otherEntry)
			wantConflictWithCurrent(t, st, err, 1, want)
			wantAudit(t, st, id, writtenIf(tc.audited, firstEntry, id)...) // the first writer's one entry, if any
		})
	}
}
