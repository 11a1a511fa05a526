package benchmark

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store/dynamo"
)

// epoch anchors the test records; only differences from it matter.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// observed is an accepted record with the job's snapshot, one output and
// its next observation due at due.
func observed(due time.Time, observations int) operation.Record {
	return operation.Record{
		OperationID: "op-01JQ8Z5F0C9B7A6D4E3F2G1H0J", Revision: 5, SpecRevision: 1, Phase: operation.PhaseAccepted,
		UserID: "user-7f3a9c2e", Model: "genace-v2", Authorized: true, AuthorizedSpecRevision: 1, BudgetCredits: 50, EstimatedCredits: 12,
		Input:       json.RawMessage(`{"prompt":"a lighthouse on a cliff at dusk, oil painting, warm light","size":"1024x1024"}`),
		RemoteJobID: "job_01JQ8Z6W4N3KX7V2M5T9R0B1CD",
		Claim:       &operation.Claim{Owner: "submit/9c1e4f2a7b3d5e60", MessageID: "3f2b9c1e-4a5d-4e6f-8a7b-9c0d1e2f3a4b", At: epoch},
		Remote: &operation.Snapshot{State: operation.RemoteRunning, Progress: 0.5,
			Credits:   operation.Credits{Reserved: 12, RefundState: operation.RefundNone},
			Outputs:   []operation.OutputDescriptor{{ContentType: "image/png", SizeBytes: 1843217, SHA256: strings.Repeat("5e", 32)}},
			CreatedAt: epoch, UpdatedAt: due, StartedAt: &epoch, ObservedAt: due},
		Posts: 1, Schedule: &operation.NextAction{Action: "observe_generation", Due: due},
		Counters:             operation.Counters{Observations: observations, WindowObservations: observations},
		Timestamps:           operation.Timestamps{Created: epoch, Updated: due, Accepted: &epoch},
		LastAppliedMessageID: "8d7c6b5a-4f3e-4d2c-9b1a-0f9e8d7c6b5a", Writer: "observe/4e1f9a0c2b7d3e58",
	}
}

// Status index writes follow DynamoDB's rules for a sparse keys-only GSI.
func TestIndexWrites(t *testing.T) {
	t.Parallel()
	done := operation.Record{OperationID: "op-1", Phase: operation.PhaseDelivered}
	a, a2, b := observed(epoch, 1), observed(epoch, 2), observed(epoch.Add(time.Second), 1)
	for name, c := range map[string]struct {
		old  *operation.Record
		rec  operation.Record
		want float64
	}{
		"enter": {nil, a, 1}, "same key": {&a, a2, 0}, "key moves": {&a, b, 2}, "leave": {&a, done, 1}, "never in": {&done, done, 0},
	} {
		if got := indexWrites(c.old, c.rec); got != c.want {
			t.Errorf("%s: %v index WRU, want %v", name, got, c.want)
		}
	}
}

// An observe write of an observed record costs one unit for the item
// (it is under 1 KB) and the index only when the due key moves.
func TestObserveWriteWRU(t *testing.T) {
	t.Parallel()
	if n := recordSize(observed(epoch, 1)); n < 300 || n >= writeUnit {
		t.Fatalf("observed record's item %d bytes, want under %d and plausible", n, writeUnit)
	}
	for name, c := range map[string]struct {
		next operation.Record
		want float64
	}{
		"due key stays": {observed(epoch, 2), 1},
		"due key moves": {observed(epoch.Add(30*time.Second), 2), 3},
	} {
		s := &countingStore{c: &counter{}, cache: &sync.Map{}}
		old := observed(epoch, 1)
		s.cache.Store(old.OperationID, old)
		s.charge(c.next, false)
		if got := s.c.snapshot().WRU; got != c.want {
			t.Errorf("%s: %v WRU, want %v", name, got, c.want)
		}
	}
}

// indexWrites is the status index's write units for replacing old (nil:
// no record before) by rec.
func indexWrites(old *operation.Record, rec operation.Record) float64 {
	var oldItem map[string]types.AttributeValue
	if old != nil {
		oldItem = recordItem(*old)
	}
	return float64(dynamo.IndexWriteUnits(oldItem, recordItem(rec)))
}
