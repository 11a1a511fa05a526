// Package notify sends completion events: each operation that is
// delivered, fails (with its settlement), is rejected or superseded, or
// stops for a person emits one event, to EventBridge when deployed and to
// a JSON-lines file on a local run. The record owes the event from the
// write that causes it (operation.OwedEvent, stored with the transition),
// so the send is at least once: a Publisher sends it after that write and
// marks it sent; one whose send failed, or whose writer died first, the
// sweep sends again. Consumers deduplicate on Detail.EventID, the same on
// every resend.
package notify

import (
	"cmp"
	"github.com/genjobs/genjobs/client"
	"slices"

	"github.com/genjobs/genjobs/internal/operation"
)

// Source is the events' EventBridge source.
const Source = client.EventSource

// Event is one completion event as a sink sends it: its detail type and
// its detail, the public client's client.EventDetail (applications
// decode the one definition).
type Event struct {
	DetailType operation.EventType
	Detail     client.EventDetail
}

// Of is the event rec owes, built from rec as it stands; false when it
// owes none or has had it sent.
func Of(rec operation.Record) (Event, bool) {
	ev, ok := rec.UnsentEvent()
	if !ok {
		return Event{}, false
	}
	d := client.EventDetail{
		EventID: operation.EventID(rec.OperationID, ev.Revision), OperationID: rec.OperationID, Revision: ev.Revision,
		Phase: client.Phase(rec.Phase), Settlement: client.Settlement(rec.Settlement), ErrorCategory: operation.SafeCategory(rec.LastError, string(rec.Phase)), UpdatedAt: rec.Timestamps.Updated.UTC(),
	}
	if rec.Remote != nil {
		d.RemoteState = client.RemoteState(rec.Remote.State)
	}
	for _, del := range rec.Deliveries {
		d.Outputs = append(d.Outputs, client.Output{Index: del.Index, Key: del.Key, SizeBytes: del.SizeBytes, SHA256: del.SHA256})
	}
	slices.SortFunc(d.Outputs, func(a, b client.Output) int { return cmp.Compare(a.Index, b.Index) })
	return Event{DetailType: ev.Type, Detail: d}, true
}
