package operation

import (
	"reflect"
	"testing"
	"time"
)

func TestOwedEvent(t *testing.T) {
	t.Parallel()
	at := t0.Add(time.Hour)
	in := func(p Phase, s Settlement) func(*Record) {
		return func(r *Record) { r.Phase, r.Settlement, r.Revision, r.Timestamps.Updated = p, s, 7, at }
	}
	owed := func(typ EventType, s Settlement) *EventState {
		return &EventState{Revision: 7, Type: typ, Settlement: s, Due: at}
	}
	sentAt3 := &EventState{Revision: 3, Type: EventFailed, Settlement: SettlementUnresolved, Due: t0, Sent: true}
	tests := []struct {
		name string
		rec  Record
		want *EventState
	}{
		{"prepared", with(prepared(), in(PhasePrepared, "")), nil},
		{"accepted", with(prepared(), in(PhaseAccepted, "")), nil},
		{"succeeded, delivering", with(prepared(), in(PhaseSucceeded, "")), nil},
		{"delivered", with(prepared(), in(PhaseDelivered, "")), owed(EventDelivered, "")},
		{"rejected", with(prepared(), in(PhaseRejected, "")), owed(EventRejected, "")},
		{"superseded", with(prepared(), in(PhaseSuperseded, "")), owed(EventSuperseded, "")},
		{"failed, refund unresolved", with(prepared(), in(PhaseFailed, SettlementUnresolved)), owed(EventFailed, SettlementUnresolved)},
		{"failed and settled", with(prepared(), in(PhaseFailed, SettlementSettled)), owed(EventFailed, SettlementSettled)},
		{"uncertain", with(prepared(), in(PhaseUncertain, "")), owed(EventNeedsAttention, "")},
		{"stalled", with(prepared(), in(PhaseStalled, "")), owed(EventNeedsAttention, "")},
		{"parked delivery", with(prepared(), func(r *Record) { in(PhaseSucceeded, "")(r); r.Parked = &ParkedState{Reason: "x"} }), owed(EventNeedsAttention, "")},
		{"parked failure", with(prepared(), func(r *Record) { in(PhaseFailed, SettlementUnresolved)(r); r.Parked = &ParkedState{} }),
			owed(EventNeedsAttention, SettlementUnresolved)},
		// A later write of the same state keeps the event: its id, and
		// whether it was sent.
		{"failed again, already sent", with(prepared(), func(r *Record) { in(PhaseFailed, SettlementUnresolved)(r); r.Event = sentAt3 }), sentAt3},
		{"failed again, unsent", with(prepared(), func(r *Record) {
			in(PhaseFailed, SettlementUnresolved)(r)
			r.Event = &EventState{Revision: 3, Type: EventFailed, Settlement: SettlementUnresolved, Due: t0}
		}), &EventState{Revision: 3, Type: EventFailed, Settlement: SettlementUnresolved, Due: t0}},
		// Settling is a new event, though the type stays.
		{"settled after an unresolved failure", with(prepared(), func(r *Record) { in(PhaseFailed, SettlementSettled)(r); r.Event = sentAt3 }),
			owed(EventFailed, SettlementSettled)},
		{"parked after an unresolved failure", with(prepared(), func(r *Record) {
			in(PhaseFailed, SettlementUnresolved)(r)
			r.Parked = &ParkedState{}
			r.Event = sentAt3
		}), owed(EventNeedsAttention, SettlementUnresolved)},
		// Resumed by an operator: driven again, nothing owed.
		{"resumed after a park", with(prepared(), func(r *Record) {
			in(PhaseAccepted, "")(r)
			r.Event = &EventState{Revision: 3, Type: EventNeedsAttention, Due: t0}
		}), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := OwedEvent(tt.rec)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("OwedEvent = %+v, want %+v", got, tt.want)
			}
			if got != nil && got == tt.rec.Event {
				t.Fatal("OwedEvent returned the record's own pointer: a write would alias it")
			}
		})
	}
}

func TestIndexDue(t *testing.T) {
	t.Parallel()
	due := t0.Add(time.Minute)
	ev := func(at time.Time, sent bool) *EventState {
		return &EventState{Revision: 2, Type: EventDelivered, Due: at, Sent: sent}
	}
	tests := []struct {
		name string
		rec  Record
		ok   bool
		at   time.Time
	}{
		{"delivered, event unsent", with(prepared(), func(r *Record) { r.Phase = PhaseDelivered; r.Event = ev(t0, false) }), true, t0},
		{"delivered, event sent", with(prepared(), func(r *Record) { r.Phase = PhaseDelivered; r.Event = ev(t0, true) }), false, time.Time{}},
		{"parked, event unsent", with(prepared(), func(r *Record) { r.Phase = PhaseAccepted; r.Parked = &ParkedState{}; r.Event = ev(due, false) }), true, due},
		{"action first", with(prepared(), func(r *Record) {
			r.Phase = PhaseFailed
			r.Schedule = &NextAction{Due: t0}
			r.Event = ev(due, false)
		}), true, t0},
		{"event first", with(prepared(), func(r *Record) {
			r.Phase = PhaseFailed
			r.Schedule = &NextAction{Due: due}
			r.Event = ev(t0, false)
		}), true, t0},
		{"action only, event sent", with(prepared(), func(r *Record) {
			r.Phase = PhaseFailed
			r.Schedule = &NextAction{Due: due}
			r.Event = ev(t0, true)
		}), true, due},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			at, ok := tt.rec.IndexDue()
			if ok != tt.ok || !at.Equal(tt.at) {
				t.Fatalf("IndexDue = %v, %t; want %v, %t", at, ok, tt.at, tt.ok)
			}
		})
	}
}
