package review

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
)

func TestForRecordKeepsPhaseAndRemoteStateApartAndNoInput(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	rec := operation.Record{
		OperationID: "op-1", Revision: 7, Phase: operation.PhaseFailed, Settlement: operation.SettlementUnresolved,
		RemoteJobID: "job_1", Input: json.RawMessage(`{"prompt":"a secret garden"}`), LastError: "refund_unresolved",
		Remote: &operation.Snapshot{State: operation.RemoteFailed, Credits: operation.Credits{Charged: 12, RefundState: operation.RefundNone}},
		Parked: &operation.ParkedState{Reason: "accounting budget spent"},
	}
	r := ForRecord(ParkedID(rec.OperationID, rec.Revision), SourceHandler, &rec, now)
	if r.ID != "op:op-1:r7" || r.Phase != operation.PhaseFailed || r.RemoteState != operation.RemoteFailed ||
		r.Recommended != operation.ActionSettleOutside || !r.Open || r.RemoteJobID != "job_1" || r.ErrorCategory != "refund_unresolved" {
		t.Fatalf("review %+v", r)
	}
	if !strings.Contains(r.Reason, "accounting budget spent") {
		t.Fatalf("reason %q lost the parked reason", r.Reason)
	}
	b, _ := json.Marshal(r)
	if strings.Contains(string(b), "secret garden") {
		t.Fatalf("the review carries the input: %s", b)
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	good := Record{ID: "dlq:m-1", Source: SourceDLQ, OperationID: "op-1", Phase: operation.PhaseAccepted, RemoteState: operation.RemoteRunning,
		Recommended: operation.ActionObserve, CreatedAt: time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC), Open: true}
	b, _ := json.Marshal(good)
	if got, err := Decode(b); err != nil || got.ID != good.ID || got.Recommended != good.Recommended {
		t.Fatalf("Decode = %+v, %v", got, err)
	}
	for name, body := range map[string]string{
		"unknown field":  `{"id":"x","source":"dlq","recommended_action":"observe","created_at":"2026-11-29T08:00:00Z","open":true,"prompt":"p"}`,
		"unknown action": `{"id":"x","source":"dlq","recommended_action":"redrive_all","created_at":"2026-11-29T08:00:00Z","open":true}`,
		"unknown phase":  `{"id":"x","source":"dlq","phase":"done","recommended_action":"observe","created_at":"2026-11-29T08:00:00Z","open":true}`,
		"no id":          `{"source":"dlq","recommended_action":"observe","created_at":"2026-11-29T08:00:00Z","open":true}`,
		"bad digest":     `{"id":"x","source":"dlq","body_digest":"abc","recommended_action":"acknowledge","created_at":"2026-11-29T08:00:00Z","open":true}`,
		"trailing":       `{"id":"x","source":"dlq","recommended_action":"observe","created_at":"2026-11-29T08:00:00Z","open":true} {}`,
	} {
		if _, err := Decode([]byte(body)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// FuzzDecodeReview: no input panics, and whatever decodes validates and
// round-trips.
func FuzzDecodeReview(f *testing.F) {
	f.Add([]byte(`{"id":"dlq:m-1","source":"dlq","operation_id":"op-1","phase":"accepted","remote_state":"running","recommended_action":"observe","created_at":"2026-11-29T08:00:00Z","open":true}`))
	f.Add([]byte(`{"id":"op:x:r3","source":"handler","body_digest":"` + strings.Repeat("a", 64) + `","recommended_action":"reconcile","created_at":"2026-11-29T08:00:00Z","open":false,"closed_by":"ops","closed_at":"2026-11-29T09:00:00Z"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("decoded record does not validate: %v", err)
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(again); err != nil {
			t.Fatalf("round trip: %v", err)
		}
	})
}
