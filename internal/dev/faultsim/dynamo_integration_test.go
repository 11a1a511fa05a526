//go:build integration

package faultsim_test

import (
	"strings"
	"testing"

	"github.com/genjobs/genjobs/internal/dev/faultsim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/store/dynamo"
)

// TestSimulationOnDynamoDB runs a smaller simulation, every fault on, on
// the deployed store: DynamoDB Local, through internal/store/dynamo. The
// bbolt runs cannot see a bug in DynamoDB's revision condition, its
// terminal guard or its audit transaction; here every write the handlers,
// the sweep and the operator make goes through them, and the checks hold
// the result to the same invariants (c: no stale overwrite and no write
// of a terminal record; the operator's audited replays), the liveness
// bound and the two thresholds.
func TestSimulationOnDynamoDB(t *testing.T) {
	t.Parallel()
	client, table := handlertest.DynamoTable(t)
	// More of the application's concurrent writes than by default: each
	// meets the revision condition, and those right after an operation
	// ended meet the terminal guard.
	faults, err := faultsim.ParseFaults("all,store_conflict=0.1")
	if err != nil {
		t.Fatal(err)
	}
	res, err := faultsim.Run(faultsim.Config{Seed: 11, Operations: 300, Faults: faults, Store: dynamo.New(client, table)})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	res.WriteSummary(&out)
	t.Log("\n" + out.String())
	if len(res.Violations) > 0 {
		t.Errorf("%d invariant violations on DynamoDB Local (listed above)", len(res.Violations))
	}
	for _, th := range res.Thresholds() {
		t.Errorf("threshold exceeded: %s", th)
	}
	if res.LivenessMax > res.LivenessBound {
		t.Errorf("liveness: %s (%s), bound %s", res.LivenessMax, res.LivenessMaxOp, res.LivenessBound)
	}
	// The run must write through every guarded path of the store.
	if res.Writes == 0 || res.Paths["operator: replay reconcile --job-id (done)"]+res.Paths["operator: replay dispatch (done)"] == 0 {
		t.Errorf("the run made %d writes and no audited operator replay: it does not exercise the store", res.Writes)
	}
}
