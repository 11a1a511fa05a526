package pipeline_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/pipeline"
	"github.com/genjobs/genjobs/internal/dev/workload"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store/bolt"
)

// The whole demo through the real handlers, checked against the
// simulator's own ground truth.
func TestDemoEndToEnd(t *testing.T) {
	t.Parallel()
	sim := genacesim.New(genacesim.Config{
		APIKey:       "k",
		DefaultModel: genacesim.ModelConfig{Price: 10, QueueFor: 200 * time.Millisecond, RunFor: time.Second, OutputCount: 1},
		Models: map[string]genacesim.ModelConfig{
			"demo-fail": {Price: 8, QueueFor: 100 * time.Millisecond, RunFor: 500 * time.Millisecond, Outcome: genacesim.OutcomeFail},
			"demo-slow": {Price: 20, QueueFor: 200 * time.Millisecond, RunFor: 3 * time.Second, OutputCount: 2},
		},
		RefundSettleAfter: 500 * time.Millisecond,
	}, clock.Real{})
	state := t.TempDir()
	items := workload.Demo()
	rep, err := pipeline.Run(context.Background(), pipeline.Config{
		StateDir: state, Workload: items, Sim: sim, GenaceKey: "k", Timeout: 2 * time.Minute,
		LongPoll: 2 * time.Second, Accounting: 3 * time.Second,
		Prices: map[string]int64{"flux-pro-2": 10, "demo-fail": 8, "demo-slow": 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.TimedOut || len(rep.Operations) != len(items) {
		t.Fatalf("timed out %t with %d operations", rep.TimedOut, len(rep.Operations))
	}
	want := map[workload.Scenario]struct {
		phase      operation.Phase
		settlement operation.Settlement
		review     operation.Action
	}{
		workload.ScenarioSuccess:          {operation.PhaseDelivered, "", ""},
		workload.ScenarioSlow:             {operation.PhaseDelivered, "", ""},
		workload.ScenarioRenderFailure:    {operation.PhaseFailed, operation.SettlementSettled, ""},
		workload.ScenarioSubmissionFailed: {operation.PhaseFailed, operation.SettlementSettled, ""},
		workload.ScenarioLostResponse:     {operation.PhaseUncertain, "", operation.ActionReconcile},
		workload.ScenarioReconcileFail:    {operation.PhaseFailed, operation.SettlementUnresolved, operation.ActionSettleOutside},
	}
	for _, op := range rep.Operations {
		w := want[workload.Scenario(op.Scenario)]
		if op.Phase != w.phase || op.Settlement != w.settlement {
			t.Errorf("%s (%s): %s/%s, want %s/%s", op.OperationID, op.Scenario, op.Phase, op.Settlement, w.phase, w.settlement)
		}
		if (w.review == "") != (len(op.Reviews) == 0) || (w.review != "" && op.Reviews[0].Recommended != w.review) {
			t.Errorf("%s: reviews %+v, want %q", op.OperationID, op.Reviews, w.review)
		}
		// Ground truth: at most one POST, and every job Genace made is recorded.
		if n := sim.PostCount(op.OperationID); n != 1 {
			t.Errorf("%s: %d POSTs", op.OperationID, n)
		}
		jobs := sim.JobsForOperation(op.OperationID)
		if op.Scenario != string(workload.ScenarioLostResponse) && (len(jobs) != 1 || jobs[0] != op.RemoteJobID) {
			t.Errorf("%s: record holds %q, Genace made %v", op.OperationID, op.RemoteJobID, jobs)
		}
		if op.Phase == operation.PhaseDelivered {
			truth, _ := sim.Job(op.RemoteJobID)
			if truth.State != "succeeded" || len(op.Artifacts) == 0 {
				t.Errorf("%s: delivered %d artifacts of a %s job", op.OperationID, len(op.Artifacts), truth.State)
			}
			for _, a := range op.Artifacts {
				b, err := os.ReadFile(a.Path)
				if err != nil {
					t.Fatal(err)
				}
				sum := sha256.Sum256(b)
				if hex.EncodeToString(sum[:]) != a.SHA256 || int64(len(b)) != a.SizeBytes {
					t.Errorf("%s: %s does not match its recorded size and sha256", op.OperationID, a.Path)
				}
			}
		}
	}
	if rep.Totals.Posts != len(items) || rep.Totals.Posts != sim.TotalPosts() || rep.Totals.GenaceJobs != len(items) {
		t.Errorf("totals %+v vs simulator %d POSTs", rep.Totals, sim.TotalPosts())
	}
	// The state stays for the operator commands.
	st, err := bolt.Open(filepath.Join(state, "genjobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	open, err := st.OpenReviews(context.Background())
	if err != nil || len(open) != 2 {
		t.Fatalf("open reviews %d, %v; want 2 (uncertain, inspect accounting)", len(open), err)
	}
}

// Downloads that fail several times in a row (a flaky Genace file host)
// are retried on the run's time scale: the deployed backoff (10 s
// doubling) put three failures 70 s apart, past a local run's timeout,
// and the crash test's resumes timed out on it.
func TestFailedDownloadsRetryOnTheRunsTimeScale(t *testing.T) {
	t.Parallel()
	sim := genacesim.New(genacesim.Config{APIKey: "k", DefaultModel: genacesim.ModelConfig{Price: 10, RunFor: 200 * time.Millisecond, OutputCount: 1}}, clock.Real{})
	down := genacesim.Fault{Kind: genacesim.FaultServerErrorNoJob, Status: 503}
	sim.ScriptFile("", down, down, down)
	rep, err := pipeline.Run(context.Background(), pipeline.Config{
		StateDir: t.TempDir(), Sim: sim, GenaceKey: "k", Timeout: 40 * time.Second, LongPoll: time.Second,
		Workload: []workload.Item{{OperationID: "op-a", UserID: "u", Model: "m", Input: []byte(`{"prompt":"x"}`), BudgetCredits: 50}},
	})
	if err != nil || rep.TimedOut || rep.Operations[0].Phase != operation.PhaseDelivered || sim.FileGets() < 4 {
		t.Fatalf("%v: timed out %t, %+v after %d downloads", err, rep != nil && rep.TimedOut, rep, sim.FileGets())
	}
}
