package operation

import (
	"fmt"
	"time"

	"github.com/genjobs/genjobs/client"
)

// EventType is the detail type of a completion event: what an operation
// reached that its application must hear of (internal/notify sends it).
// The names are the public client's, which applications decode with.
type EventType = client.EventType

// The completion events' detail types.
const (
	// EventDelivered: every output is in our storage.
	EventDelivered = client.EventDelivered
	// EventFailed: the render failed or was canceled. The event carries
	// the settlement; a failed operation whose refund is unresolved
	// emits again once it is settled (or parked).
	EventFailed = client.EventFailed
	// EventRejected: Genace refused the request; nothing was charged.
	EventRejected = client.EventRejected
	// EventSuperseded: the user replaced or withdrew the request.
	EventSuperseded = client.EventSuperseded
	// EventNeedsAttention: automation stopped for a person (uncertain,
	// stalled, or parked with a review).
	EventNeedsAttention = client.EventNeedsAttention
)

// EventTypes lists every detail type.
var EventTypes = []EventType{EventDelivered, EventFailed, EventRejected, EventSuperseded, EventNeedsAttention}

// EventState is the completion event a record owes. It is written with
// the transition that causes it, in the same conditional write, so a
// crash between the write and the send loses nothing: the sweep finds
// it unsent and sends it.
type EventState struct {
	// Revision is the revision whose write recorded the event: with the
	// operation id, the event's id (EventID), the same on every resend.
	Revision int64 `json:"revision" dynamodbav:"event_revision"`
	// Type is the detail type, and Settlement the settlement it was
	// recorded for: a change of either is a new event.
	Type       EventType  `json:"type" dynamodbav:"type"`
	Settlement Settlement `json:"settlement,omitempty" dynamodbav:"settlement,omitempty"`
	// Due is when the sweep takes it as unsent: the transition's time,
	// or later after a send the sweep saw fail.
	Due time.Time `json:"due" dynamodbav:"due"`
	// Sent: a sink accepted it.
	Sent bool `json:"sent,omitempty" dynamodbav:"sent,omitempty"`
}

// EventID is the stable id consumers deduplicate on: "<operation id>:r<revision>".
func EventID(operationID string, revision int64) string {
	return fmt.Sprintf("%s:r%d", operationID, revision)
}

// CompletionEvent says which event the record, as it stands, calls for:
// delivered, failed, rejected or superseded, or needs attention when
// automation has stopped for a person. ok is false while automation
// still drives it.
func (r *Record) CompletionEvent() (EventType, bool) {
	switch {
	case r.Phase == PhaseDelivered:
		return EventDelivered, true
	case r.Phase == PhaseRejected:
		return EventRejected, true
	case r.Phase == PhaseSuperseded:
		return EventSuperseded, true
	case r.Phase == PhaseFailed && r.Settlement == SettlementSettled:
		return EventFailed, true
	case r.Parked != nil || r.Phase == PhaseUncertain || r.Phase == PhaseStalled:
		return EventNeedsAttention, true
	case r.Phase == PhaseFailed:
		return EventFailed, true
	}
	return "", false
}

// OwedEvent is the event state a write of rec at rec.Revision stores:
// rec's own when it already describes what rec is (sent or not, so a
// resend keeps its id), a new unsent one (due at the write's time) when
// rec reached something else worth an event, and none while automation
// drives it. An unsent event of a state the operation has left is
// replaced: consumers hear of the state it is in.
func OwedEvent(rec Record) *EventState {
	typ, ok := rec.CompletionEvent()
	if !ok {
		return nil
	}
	if e := rec.Event; e != nil && e.Type == typ && e.Settlement == rec.Settlement {
		v := *e
		return &v
	}
	return &EventState{Revision: rec.Revision, Type: typ, Settlement: rec.Settlement, Due: rec.Timestamps.Updated.UTC()}
}

// UnsentEvent reports the event the record owes and has not had sent.
func (r *Record) UnsentEvent() (EventState, bool) {
	if r.Event == nil || r.Event.Sent {
		return EventState{}, false
	}
	return *r.Event, true
}

// IndexDue is where the record sorts in the sweep's sparse index: the
// earlier of its next action (SweepDue) and its unsent event's due time.
// An unsent event keeps even a terminal or parked record there, until it
// is sent.
func (r *Record) IndexDue() (time.Time, bool) {
	at, ok := r.SweepDue()
	if e, unsent := r.UnsentEvent(); unsent && (!ok || e.Due.Before(at)) {
		return e.Due, true
	}
	return at, ok
}
