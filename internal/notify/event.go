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
	"slices"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
)

// Source is the events' EventBridge source.
const Source = "genjobs"

// Event is one completion event as a sink sends it.
type Event struct {
	// DetailType is one of operation.EventTypes.
	DetailType operation.EventType `json:"detail_type"`
	Detail     Detail              `json:"detail"`
}

// Detail is the event's detail: what an application needs to act on the
// outcome, and nothing it must not see. Never a signed URL, the input
// (prompt) or an error text; the outputs are named by their keys in our
// storage.
//
//	{
//	  "event_id": "order-42:r9",
//	  "operation_id": "order-42",
//	  "revision": 9,
//	  "phase": "delivered",
//	  "remote_state": "succeeded",
//	  "outputs": [{"index": 0, "key": "ops/order-42/job_01J/0.png", "size_bytes": 123456, "sha256": "9f86…"}],
//	  "updated_at": "2026-12-04T01:02:03.456Z"
//	}
type Detail struct {
	// EventID is "<operation id>:r<revision>": stable across resends,
	// what consumers deduplicate on (EventBridge's own event id differs
	// on every put).
	EventID     string `json:"event_id"`
	OperationID string `json:"operation_id"`
	// Revision is the record revision whose write reached this state.
	Revision int64           `json:"revision"`
	Phase    operation.Phase `json:"phase"`
	// RemoteState is Genace's job state as last observed (empty when no
	// job is known: rejected, uncertain, superseded before submission).
	RemoteState operation.RemoteState `json:"remote_state,omitempty"`
	// Settlement is a failure's: "unresolved" (credits may still be held)
	// or "settled"; empty otherwise.
	Settlement operation.Settlement `json:"settlement,omitempty"`
	// ErrorCategory is the last failure's category (a short word, never
	// error text), which says why an operation needs attention.
	ErrorCategory string `json:"error_category,omitempty"`
	// Outputs are the outputs stored in our storage, by index.
	Outputs []Output `json:"outputs,omitempty"`
	// UpdatedAt is the record's last update.
	UpdatedAt time.Time `json:"updated_at"`
}

// Output is one stored output.
type Output struct {
	Index     int    `json:"index"`
	Key       string `json:"key"`
	SizeBytes int64  `json:"size_bytes"`
	SHA256    string `json:"sha256"`
}

// Of is the event rec owes, built from rec as it stands; false when it
// owes none or has had it sent.
func Of(rec operation.Record) (Event, bool) {
	ev, ok := rec.UnsentEvent()
	if !ok {
		return Event{}, false
	}
	d := Detail{
		EventID: operation.EventID(rec.OperationID, ev.Revision), OperationID: rec.OperationID, Revision: ev.Revision,
		Phase: rec.Phase, Settlement: rec.Settlement, ErrorCategory: rec.LastError, UpdatedAt: rec.Timestamps.Updated.UTC(),
	}
	if rec.Remote != nil {
		d.RemoteState = rec.Remote.State
	}
	for _, del := range rec.Deliveries {
		d.Outputs = append(d.Outputs, Output{Index: del.Index, Key: del.Key, SizeBytes: del.SizeBytes, SHA256: del.SHA256})
	}
	slices.SortFunc(d.Outputs, func(a, b Output) int { return cmp.Compare(a.Index, b.Index) })
	return Event{DetailType: ev.Type, Detail: d}, true
}
