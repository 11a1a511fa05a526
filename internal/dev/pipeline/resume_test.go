package pipeline_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

// A run cut off (its queues, and every delayed message in them, gone, as
// when the process dies) leaves next actions due later: a POST after a
// 429, an accounting re-read, an observation's backoff. The resumed run,
// given no workload, finds the operations in the store and carries out
// each of those actions within onTime of its due time (or of the
// resume's start, for one due already), not when the sweep finds it
// overdue.
//
// onTime is the batching window the template gives submit and deliver
// (1 s: a message waits up to that long for others to share its
// invocation), plus a busy function's own queue when many actions fall
// due at once, on a loaded machine (the whole suite runs beside it on 2
// cores); the sweep that was the only way back before re-arms 36 s late,
// so the bound still tells a resume's own re-send from it.
const onTime = 8 * time.Second

func TestResumeCarriesOutEveryNextActionOnTime(t *testing.T) {
	t.Parallel()
	sim := genacesim.New(genacesim.Config{
		APIKey:             "k",
		DefaultModel:       genacesim.ModelConfig{Price: 10, QueueFor: 500 * time.Millisecond, RunFor: 4 * time.Second, OutputCount: 1},
		Models:             map[string]genacesim.ModelConfig{"fail": {Price: 8, RunFor: 300 * time.Millisecond, Outcome: genacesim.OutcomeFail}},
		RefundSettleAfter:  5 * time.Second,
		RateLimitPerSecond: 2,
	}, clock.Real{})
	var items []workload.Item
	for i, m := range []string{"flux", "flux", "flux", "fail", "fail", "flux"} {
		items = append(items, workload.Item{OperationID: "op-" + string(rune('a'+i)), UserID: "u", Model: m, Input: json.RawMessage(`{"prompt":"x"}`), BudgetCredits: 50})
	}
	state := t.TempDir()
	base := pipeline.Config{StateDir: state, Sim: sim, GenaceKey: "k", LongPoll: 2 * time.Second, Accounting: 20 * time.Second}
	first := base
	first.Workload, first.Timeout = items, time.Minute
	// Cut off as a crash is, with no deadline the functions could see
	// coming, once a follow-up is scheduled well ahead (a POST after a
	// 429, a retry): the next actions a resume must carry out on time,
	// not only those already due. Timing on the real clock
	// varies, so the cut waits for that rather than for a fixed time.
	ctx, cut := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Second, cut)
	first.Trace = cutAt{cut: cut, ahead: 1500 * time.Millisecond}
	if rep, err := pipeline.Run(ctx, first); !errors.Is(err, context.Canceled) || !rep.Interrupted {
		t.Fatalf("first run: %v (want it cut off)", err)
	}
	st, err := bolt.Open(pipeline.DBPath(state))
	if err != nil {
		t.Fatal(err)
	}
	due, err := st.Due(context.Background(), time.Now().Add(time.Hour), 0)
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	later := 0
	// A submission claimed at the cut may have had its POST on the wire:
	// no one can know whether Genace made a job, so the resume rightly
	// takes it to uncertain, for a person to reconcile.
	claimed := map[string]bool{}
	for _, rec := range due {
		if rec.Phase == operation.PhaseSubmitting && rec.Claim != nil {
			claimed[rec.OperationID] = true
		}
		if rec.Schedule != nil && time.Until(rec.Schedule.Due) > 500*time.Millisecond {
			later++
		}
	}
	if later == 0 {
		t.Fatalf("the cut-off run left no next action due later: %d active records", len(due))
	}

	var trace bytes.Buffer
	resumed := base
	resumed.Resume, resumed.Timeout, resumed.Trace = true, time.Minute, &trace
	start := time.Now()
	rep, err := pipeline.Run(context.Background(), resumed)
	if err != nil || rep.TimedOut || len(rep.Operations) != len(items) {
		var buf bytes.Buffer
		if rep != nil {
			rep.WriteSummary(&buf)
		}
		t.Fatalf("resume: %v\n%s", err, buf.String())
	}
	var evs []pipeline.TraceEvent
	for sc := bufio.NewScanner(&trace); sc.Scan(); {
		var ev pipeline.TraceEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	for _, rec := range due {
		if rec.Schedule == nil || rec.Phase == operation.PhaseSubmitting {
			continue
		}
		by := rec.Schedule.Due
		if start.After(by) {
			by = start
		}
		at := time.Time{}
		for _, ev := range evs {
			if ev.Event == "receive" && ev.OperationID == rec.OperationID && string(ev.Action) == rec.Schedule.Action && ev.Revision >= rec.Revision {
				at = ev.At
				break
			}
		}
		if at.IsZero() || at.Sub(by) > onTime || at.Before(rec.Schedule.Due.Add(-100*time.Millisecond)) {
			t.Errorf("%s %s r%d due %s (resume at %s): carried out at %s", rec.OperationID, rec.Schedule.Action, rec.Revision,
				rec.Schedule.Due.Format("15:04:05.000"), start.Format("15:04:05.000"), at.Format("15:04:05.000"))
		}
	}
	for _, op := range rep.Operations {
		js := sim.JobsForOperation(op.OperationID)
		if claimed[op.OperationID] && op.Phase == operation.PhaseUncertain {
			if len(js) > 1 || len(op.Reviews) == 0 {
				t.Errorf("%s: claimed at the cut, uncertain with Genace jobs %v and open reviews %v (want at most one job, and a review)", op.OperationID, js, op.Reviews)
			}
			continue
		}
		if !op.Terminal || len(js) != 1 || js[0] != op.RemoteJobID {
			t.Errorf("%s: %s holding %q, Genace made %v", op.OperationID, op.Phase, op.RemoteJobID, js)
		}
	}
}

// cutAt is a trace writer that cuts the run off at the first follow-up
// sent to arrive at least ahead later.
type cutAt struct {
	cut   context.CancelFunc
	ahead time.Duration
}

func (c cutAt) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		var ev pipeline.TraceEvent
		if json.Unmarshal(line, &ev) == nil && ev.Event == "send" && ev.Due != nil && ev.Due.Sub(ev.At) >= c.ahead {
			c.cut()
		}
	}
	return len(p), nil
}

// A run killed while seeding created only some of its records: the
// resume creates the others from the workload the run kept, and drives
// all of them.
func TestResumeCreatesWhatSeedingDidNot(t *testing.T) {
	t.Parallel()
	sim := genacesim.New(genacesim.Config{APIKey: "k", DefaultModel: genacesim.ModelConfig{Price: 10, RunFor: 200 * time.Millisecond}}, clock.Real{})
	state := t.TempDir()
	kept := `[{"operation_id":"op-a","user_id":"u","model":"m","input":{"prompt":"x"},"budget_credits":50},` +
		`{"operation_id":"op-b","user_id":"u","model":"m","input":{"prompt":"y"},"budget_credits":50,"scenario":"success"}]`
	if err := os.WriteFile(filepath.Join(state, "workload.json"), []byte(kept), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := bolt.Open(pipeline.DBPath(state))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := st.Create(context.Background(), operation.Record{OperationID: "op-a", SpecRevision: 1, Phase: operation.PhasePrepared, UserID: "u", Model: "m",
		Input: json.RawMessage(`{"prompt":"x"}`), Authorized: true, AuthorizedSpecRevision: 1, BudgetCredits: 50,
		Timestamps: operation.Timestamps{Created: now, Updated: now}, Schedule: &operation.NextAction{Action: "submit_generation", Due: now}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	rep, err := pipeline.Run(context.Background(), pipeline.Config{StateDir: state, Sim: sim, GenaceKey: "k", Resume: true, LongPoll: time.Second, Timeout: time.Minute})
	if err != nil || rep.TimedOut {
		t.Fatalf("resume: %v", err)
	}
	if len(rep.Operations) != 2 {
		t.Fatalf("resumed %d operations, want op-a and op-b", len(rep.Operations))
	}
	for _, op := range rep.Operations {
		if op.Phase != operation.PhaseDelivered || len(sim.JobsForOperation(op.OperationID)) != 1 {
			t.Errorf("%s: %s with jobs %v", op.OperationID, op.Phase, sim.JobsForOperation(op.OperationID))
		}
	}
	if rep.Operations[1].Scenario != string(workload.ScenarioSuccess) {
		t.Errorf("op-b's scenario %q, want the kept one", rep.Operations[1].Scenario)
	}
}
