package faultsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/notify"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/sweep"
)

// SentEvent is one completion event the sink accepted, as invariant n
// holds it to the record.
type SentEvent struct {
	ID          string
	Type        operation.EventType
	OperationID string
	Phase       operation.Phase
	Revision    int64
	Keys        []string
	// Detail is the detail as encoded for the bus.
	Detail []byte
	At     time.Time
}

// owed is an event as the write that recorded it: when, of which type.
type owed struct {
	at  time.Time
	typ operation.EventType
}

// eventSink is the sink of every handler and the sweep: it records each
// event it accepts, on the virtual clock, and refuses whole sends
// (EventSendFail). It also learns from the recorder which write recorded
// each event (owe), for the liveness bound.
type eventSink struct {
	w        *world
	mu       sync.Mutex
	accepted map[string][]SentEvent // by operation id, in order
	refused  map[string]int         // by event id
	owed     map[string]owed        // by event id
	dups     int
}

func newEventSink(w *world) *eventSink {
	return &eventSink{w: w, accepted: map[string][]SentEvent{}, refused: map[string]int{}, owed: map[string]owed{}}
}

var errSendRefused = errors.New("faultsim: the event bus refused the send")

// Publish implements notify.Sink.
func (s *eventSink) Publish(_ context.Context, events []notify.Event) error {
	if s.w.inj.hit(EventSendFail) {
		s.mu.Lock()
		for _, ev := range events {
			s.refused[ev.Detail.EventID]++
			s.w.tracef(ev.Detail.OperationID, "FAULT %s: event %s refused", EventSendFail, ev.Detail.EventID)
		}
		s.mu.Unlock()
		return errSendRefused
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range events {
		b, err := json.Marshal(ev.Detail)
		if err != nil {
			return fmt.Errorf("faultsim: encode event %s: %w", ev.Detail.EventID, err)
		}
		d := ev.Detail
		e := SentEvent{ID: d.EventID, Type: ev.DetailType, OperationID: d.OperationID, Phase: operation.Phase(d.Phase), Revision: d.Revision, Detail: b, At: s.w.clk.Now()}
		for _, o := range d.Outputs {
			e.Keys = append(e.Keys, o.Key)
		}
		for _, prev := range s.accepted[d.OperationID] {
			if prev.ID == e.ID {
				s.dups++
				break
			}
		}
		s.accepted[d.OperationID] = append(s.accepted[d.OperationID], e)
		s.w.tracef(d.OperationID, "event %s %s sent", e.ID, e.Type)
	}
	return nil
}

// owe notes the event a fresh write recorded, and an event on a record
// automation still drives (invariant n).
func (s *eventSink) owe(saved operation.Record) {
	typ, ok := saved.CompletionEvent()
	if !ok && saved.Event != nil {
		s.w.violate(InvEvents, saved.OperationID, fmt.Sprintf("r%d %s, driven by automation, records event %s", saved.Revision, saved.Phase, saved.Event.Type))
	}
	if saved.Event == nil || saved.Event.Revision != saved.Revision {
		return
	}
	if saved.Event.Type != typ {
		s.w.violate(InvEvents, saved.OperationID, fmt.Sprintf("r%d %s records event %s, not the %s it calls for", saved.Revision, saved.Phase, saved.Event.Type, typ))
	}
	s.mu.Lock()
	s.owed[operation.EventID(saved.OperationID, saved.Revision)] = owed{at: s.w.clk.Now(), typ: saved.Event.Type}
	s.mu.Unlock()
}

// EventCounts are the run's completion events (Result.Events).
type EventCounts struct {
	// Sent counts the sends the sink accepted, Duplicates those of an
	// event it had accepted already, Refused the sends it refused
	// (EventSendFail), MarksLost the marks lost (EventMarkLost).
	Sent       int `json:"sent"`
	Duplicates int `json:"duplicates"`
	Refused    int `json:"refused"`
	MarksLost  int `json:"marks_lost"`
	// Resent counts the accepted sends of events some send of which had
	// failed, refused or unmarked, before.
	Resent int `json:"resent"`
}

// checkEvents applies invariant n to every final record and the events
// sent: each owed event sent within its bound, and none the writes did
// not record.
func (w *world) checkEvents(res *Result, finals []Final) {
	s := w.events
	s.mu.Lock()
	defer s.mu.Unlock()
	res.Events.Duplicates, res.Events.MarksLost = s.dups, int(w.inj.snapshot()[EventMarkLost])
	for _, n := range s.refused {
		res.Events.Refused += n
	}
	for _, f := range finals {
		id := f.Record.OperationID
		sent := s.accepted[id]
		res.Events.Sent += len(sent)
		for _, v := range CheckEvents(f.Record, sent) {
			w.violate(v.Invariant, v.OperationID, v.Detail)
		}
		seen := map[string]bool{}
		for _, e := range sent {
			if seen[e.ID] || s.refused[e.ID] > 0 {
				res.Events.Resent++
			}
			seen[e.ID] = true
			if o, ok := s.owed[e.ID]; !ok || o.typ != e.Type {
				w.violate(InvEvents, id, fmt.Sprintf("event %s %s was sent, but no write recorded it", e.ID, e.Type))
			}
		}
		if f.Record.Event == nil {
			continue
		}
		ev := operation.EventID(id, f.Record.Event.Revision)
		o := s.owed[ev]
		done := w.clk.Now()
		for _, e := range sent {
			if e.ID == ev {
				done = e.At
				break
			}
		}
		crashes := 0
		for _, t := range w.sweepCrashes {
			if !t.Before(o.at) && !t.After(done) {
				crashes++
			}
		}
		if took, bound := done.Sub(o.at), EventBound(s.refused[ev]+crashes); took > bound {
			w.violate(InvEvents, id, fmt.Sprintf("event %s sent %s after its write (or unsent at the run's end), beyond its bound %s (%d refused sends, %d sweep crashes)", ev, took, bound, s.refused[ev], crashes))
		}
	}
}

// EventBound is how long an owed event may stay unsent: the sweep's
// horizon and cadence, and EventRetry and a cadence more per send the
// sink refused (or sweep run that died).
func EventBound(failed int) time.Duration {
	horizon := min(topology.Stack.Sweep.ClaimTimeout, topology.Stack.Sweep.OverdueAfter)
	return horizon + sweepEvery + time.Duration(failed)*(sweep.EventRetry+sweepEvery)
}

// CheckEvents holds one final record to the events sent for it
// (invariant n): the event the record calls for was sent, is marked
// sent, names its phase and, if delivered, exactly its outputs; and no
// event carries the input.
func CheckEvents(rec operation.Record, sent []SentEvent) []Violation {
	var out []Violation
	add := func(format string, args ...any) {
		out = append(out, Violation{Invariant: InvEvents, OperationID: rec.OperationID, Detail: fmt.Sprintf(format, args...)})
	}
	for _, e := range sent {
		if len(rec.Input) > 0 && inputIn(e.Detail, rec.Input) {
			add("event %s carries the input", e.ID)
		}
	}
	typ, ok := rec.CompletionEvent()
	if !ok {
		return out
	}
	if rec.Event == nil {
		add("r%d %s calls for event %s, and records none", rec.Revision, rec.Phase, typ)
		return out
	}
	id := operation.EventID(rec.OperationID, rec.Event.Revision)
	if !rec.Event.Sent {
		add("event %s is not marked sent", id)
	}
	var got *SentEvent
	for i := range sent {
		if sent[i].ID == id {
			got = &sent[i]
		}
	}
	switch {
	case got == nil:
		add("event %s %s was never sent (%d other events sent)", id, typ, len(sent))
	case got.Type != typ || got.Phase != rec.Phase:
		add("event %s says %s %s, the record is %s %s", id, got.Type, got.Phase, typ, rec.Phase)
	case typ == operation.EventDelivered && !sameKeys(got.Keys, rec.Deliveries):
		add("event %s names outputs %v, the record %d deliveries", id, got.Keys, len(rec.Deliveries))
	}
	return out
}

func sameKeys(keys []string, ds []operation.Delivery) bool {
	want := map[string]bool{}
	for _, d := range ds {
		want[d.Key] = true
	}
	if len(keys) != len(ds) || len(want) != len(ds) {
		return false
	}
	for _, k := range keys {
		if !want[k] {
			return false
		}
	}
	return true
}

// inputIn reports whether detail holds the input, or any string of it
// long enough to be the prompt's.
func inputIn(detail, input []byte) bool {
	if bytes.Contains(detail, input) {
		return true
	}
	var v any
	if json.Unmarshal(input, &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case string:
			return len(v) >= 8 && bytes.Contains(detail, []byte(v))
		case map[string]any:
			return slices.ContainsFunc(slices.Collect(maps.Values(v)), walk)
		case []any:
			return slices.ContainsFunc(v, walk)
		}
		return false
	}
	return walk(v)
}
