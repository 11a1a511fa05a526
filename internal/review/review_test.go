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
		OperationID: "op-1", Revision: 7, Phase: operation.Failed, Settlement: operation.SettlementUnresolved,
		RemoteJobID: "job_1", Input: json.RawMessage(`{"prompt":"a secret garden"}`), LastError: "refund_unresolved",
		Remote: &operation.Snapshot{State: operation.RemoteFailed, Credits: operation.Credits{Charged: 12, RefundState: operation.RefundNone}},
		Parked: &operation.ParkedState{Reason: "accounting budget spent"},
	}
	r := ForRecord(ParkedID(rec.OperationID, rec.Revision), SourceHandler, &rec, now)
	if r.ID != "op:op-1:r7" || r.Phase != operation.Failed || r.RemoteState != operation.RemoteFailed ||
		r.Recommended != operation.ActionInspectAccounting || !r.Open || r.RemoteJobID != "job_1" || r.ErrorCategory != "refund_unresolved" {
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
