package faultsim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/faultsim"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store"
)

// marksSent is a store that marks every event it records as sent, so
// nothing ever publishes one.
type marksSent struct{ store.Store }

func (s marksSent) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	saved, err := s.Store.Update(ctx, rec, expected)
	if err != nil || saved.Event == nil || saved.Event.Sent {
		return saved, err
	}
	saved.Event.Sent = true
	return s.Store.SetEvent(ctx, saved)
}

// announcesEarly is the handlers' store answering a write of a
// succeeded render as if it owed the delivered event, while deliver
// still has the outputs to store: the event is sent, and no write
// recorded it.
type announcesEarly struct{ faultsim.Records }

func (s announcesEarly) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	saved, err := s.Records.Update(ctx, rec, expected)
	if err == nil && saved.Phase == operation.PhaseSucceeded && saved.Event == nil {
		saved.Event = &operation.EventState{Revision: saved.Revision, Type: operation.EventDelivered, Due: saved.Timestamps.Updated}
	}
	return saved, err
}

// deferMarks changes the sweep's deferral of a refused event: it marks
// the event sent, or (late) defers it six hours.
type deferMarks struct {
	faultsim.Records
	late bool
}

func (s deferMarks) SetEvent(ctx context.Context, rec operation.Record) (operation.Record, error) {
	if rec.Event != nil && !rec.Event.Sent {
		rec = rec.Clone()
		if s.late {
			rec.Event.Due = rec.Event.Due.Add(6 * time.Hour)
		} else {
			rec.Event.Sent = true
		}
	}
	return s.Records.SetEvent(ctx, rec)
}

func TestCheckEvents(t *testing.T) {
	t.Parallel()
	rec := operation.Record{OperationID: "op-1", Revision: 7, Phase: operation.PhaseDelivered, Input: []byte(`{"prompt":"a secret prompt"}`),
		Deliveries: []operation.Delivery{{Index: 0, Key: "k0"}}, Event: &operation.EventState{Revision: 7, Type: operation.EventDelivered, Sent: true}}
	ok := faultsim.SentEvent{ID: "op-1:r7", Type: operation.EventDelivered, Phase: operation.PhaseDelivered, Keys: []string{"k0"}, Detail: []byte(`{}`)}
	unsent := rec.Clone()
	unsent.Event.Sent = false
	wrongKeys, leaks, older := ok, ok, ok
	wrongKeys.Keys = []string{"k1"}
	leaks.Detail = []byte(`{"x":"a secret prompt"}`)
	older.ID = "op-1:r6"
	cases := []struct {
		name string
		rec  operation.Record
		sent []faultsim.SentEvent
		want string // substring of the one problem; "" for none
	}{
		{"sent", rec, []faultsim.SentEvent{ok}, ""},
		{"never sent", rec, []faultsim.SentEvent{older}, "never sent"},
		{"not marked", unsent, []faultsim.SentEvent{ok}, "not marked sent"},
		{"other outputs", rec, []faultsim.SentEvent{wrongKeys}, "names outputs"},
		{"input", rec, []faultsim.SentEvent{leaks}, "carries the input"},
		{"none recorded", operation.Record{OperationID: "op-1", Phase: operation.PhaseRejected}, nil, "records none"},
		{"automation drives", operation.Record{OperationID: "op-1", Phase: operation.PhaseAccepted}, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := faultsim.CheckEvents(tc.rec, tc.sent)
			if tc.want == "" && len(got) > 0 || tc.want != "" && (len(got) != 1 || !strings.Contains(got[0].Detail, tc.want)) {
				t.Fatalf("got %v, want %q", got, tc.want)
			}
		})
	}
}
