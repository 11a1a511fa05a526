//go:build integration

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/pipeline"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/operator"
	"github.com/genjobs/genjobs/internal/store/bolt"
)

// onTime is how late after its due time (or after the resumed process
// started, if that is later) a next action a killed run left may be
// carried out: the batching window the template gives submit and deliver
// (1 s), the new process's start-up (open the store, restore the
// simulator, rearm), and a busy function's own queue (the mapping's
// concurrency, when a kill left many actions due at once), on a loaded
// machine. The old resume was 36 s late (the sweep's overdue threshold);
// the figure sits well below that and well above the 2 s measured at
// worst, so a test run beside the whole suite on 2 cores does not flake.
const onTime = 10 * time.Second

// pending is a next action a killed run's store holds.
type pending struct {
	op     string
	action message.Action
	rev    int64
	due    time.Time
}

// TestLocalSurvivesSIGKILL kills `genjobs local` with SIGKILL at four
// points (after the first POSTs, with a long poll held, while a follow-up
// is delayed — a POST after a 429, a read retry after a 429, an accounting
// re-read, a render's backoff — and with a download half done) and resumes it each time, then to
// completion. Every next action the store held at a kill is carried out
// by the next process within onTime of when it was due, and Genace (the
// simulator's saved state) made at most one job per operation, the one
// the record holds.
func TestLocalSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "genjobs")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	var w strings.Builder
	models := []string{"flux-pro-2", "flux-pro-2", "flux-pro-2", "flux-pro-2", "flux-pro-2", "flux-pro-2", "demo-slow", "demo-slow", "demo-fail", "demo-fail"}
	for i, m := range models {
		fmt.Fprintf(&w, `{"operation_id":"op-%02d","user_id":"u","model":%q,"input":{"prompt":"x"},"budget_credits":100}`+"\n", i, m)
	}
	wl := filepath.Join(dir, "w.jsonl")
	if err := os.WriteFile(wl, []byte(w.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	state, tracePath := filepath.Join(dir, "state"), filepath.Join(dir, "trace.jsonl")
	// Faults are not saved with the simulator: every process asks for
	// them. Each download takes a second, so a kill can land in one.
	common := []string{"--state", state, "--trace", tracePath, "--quiet", "--long-poll", "2s", "--accounting-budget", "5s", "--timeout", "120s",
		"--read-fault-rate", "0.3", "--download-delay", "1s", "--seed", "7"}
	first := append([]string{"local", "--workload", wl, "--queue-for", "500ms", "--run-for", "3s", "--refund-settle", "3s",
		"--rate-limit", "3"}, common...)
	resume := append([]string{"local", "--resume"}, common...)

	// Each kill comes hold after the event that names it, so the work it
	// names is in flight: a long poll held, a download under way (the
	// deliver function reads the job, then downloads for a second).
	kills := []struct {
		name string
		hold time.Duration
		at   func(ev pipeline.TraceEvent) bool
	}{
		{"after the first POSTs", 100 * time.Millisecond, func(ev pipeline.TraceEvent) bool {
			return ev.Event == "send" && ev.Action == message.ActionObserveGeneration
		}},
		{"a long poll held", 500 * time.Millisecond, func(ev pipeline.TraceEvent) bool {
			return ev.Event == "receive" && ev.Action == message.ActionObserveGeneration
		}},
		{"a follow-up delayed", 100 * time.Millisecond, func(ev pipeline.TraceEvent) bool {
			return ev.Event == "send" && ev.Due.Sub(ev.At) > 1500*time.Millisecond
		}},
		{"a download under way", 400 * time.Millisecond, func(ev pipeline.TraceEvent) bool {
			return ev.Event == "receive" && ev.Action == message.ActionDeliverArtifacts
		}},
	}
	var left []pending
	checked := 0
	for i, k := range kills {
		args := resume
		if i == 0 {
			args = first
		}
		start, offset := time.Now(), traceSize(t, tracePath)
		cmd := exec.Command(bin, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		evs := waitFor(t, tracePath, offset, k.at, exited)
		if evs == nil {
			t.Fatalf("kill %d (%s): the run ended first:\n%s", i+1, k.name, out.String())
		}
		time.Sleep(k.hold)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		end := time.Now()
		checked += checkOnTime(t, left, readTrace(t, tracePath, offset), start, end)
		left = pendingIn(t, state)
		t.Logf("killed at %s after %s: %d next actions in the store", k.name, end.Sub(start).Round(time.Millisecond), len(left))
	}
	start, offset := time.Now(), traceSize(t, tracePath)
	out, err := exec.Command(bin, resume...).CombinedOutput()
	if err != nil {
		t.Fatalf("final resume: %v\n%s", err, out)
	}
	checked += checkOnTime(t, left, readTrace(t, tracePath, offset), start, time.Now())
	if checked == 0 {
		t.Error("no next action left by a kill was checked")
	}
	t.Logf("%d next actions left by the kills were carried out on time", checked)

	runDir := operator.Resolved(filepath.Join(state, operator.LatestLink))
	var rep pipeline.Report
	readJSON(t, pipeline.ReportPath(runDir), &rep)
	var sim struct {
		Jobs []struct {
			ID          string `json:"id"`
			OperationID string `json:"operation_id"`
		} `json:"jobs"`
	}
	readJSON(t, filepath.Join(runDir, simStateFile), &sim)
	jobs := map[string][]string{}
	for _, j := range sim.Jobs {
		jobs[j.OperationID] = append(jobs[j.OperationID], j.ID)
	}
	if len(rep.Operations) != len(models) || rep.TimedOut {
		t.Fatalf("report: %d operations, timed out %t\n%s", len(rep.Operations), rep.TimedOut, out)
	}
	for _, op := range rep.Operations {
		js := jobs[op.OperationID]
		switch {
		case len(js) > 1:
			t.Errorf("%s: Genace made %d jobs %v", op.OperationID, len(js), js)
		case op.Phase == operation.PhaseUncertain:
			// A POST in flight at a kill: a person reconciles it (invariant 1).
		case !op.Terminal:
			t.Errorf("%s: %s, not terminal", op.OperationID, op.Phase)
		case len(js) != 1 || js[0] != op.RemoteJobID:
			t.Errorf("%s: %s holding %q; Genace made %v", op.OperationID, op.Phase, op.RemoteJobID, js)
		}
	}
}

// waitFor polls the trace from offset until an event matches (returning
// the events read) or the process exits (nil).
func waitFor(t *testing.T, path string, offset int64, match func(pipeline.TraceEvent) bool, exited <-chan error) []pipeline.TraceEvent {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		evs := readTrace(t, path, offset)
		for _, ev := range evs {
			if match(ev) {
				return evs
			}
		}
		select {
		case <-exited:
			return nil
		case <-deadline:
			t.Fatal("no kill point within 60s")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func traceSize(t *testing.T, path string) int64 {
	fi, err := os.Stat(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// readTrace reads the trace's complete lines after offset (a killed
// process may leave half a line).
func readTrace(t *testing.T, path string, offset int64) []pipeline.TraceEvent {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var evs []pipeline.TraceEvent
	sc := bufio.NewScanner(bytes.NewReader(b[offset:]))
	for sc.Scan() {
		var ev pipeline.TraceEvent
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			evs = append(evs, ev)
		}
	}
	return evs
}

// pendingIn lists the next actions the (killed) run's store holds.
func pendingIn(t *testing.T, state string) []pending {
	t.Helper()
	st, err := bolt.OpenExisting(pipeline.DBPath(operator.Resolved(filepath.Join(state, operator.LatestLink))), true)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	due, err := st.Due(context.Background(), time.Now().Add(time.Hour), 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []pending
	for _, rec := range due {
		if rec.Active() && rec.Schedule != nil && rec.Phase != operation.PhaseSubmitting { // not one in the index for its unsent event only
			out = append(out, pending{op: rec.OperationID, action: message.Action(rec.Schedule.Action), rev: rec.Revision, due: rec.Schedule.Due})
		}
	}
	return out
}

// checkOnTime checks that the process that ran from start to end received
// each next action the store held when it started (that action for that
// operation, at that revision or a later one a re-arm wrote) within onTime of
// max(due, start), and not before it was due; one it did not receive must
// not have been due by then (the next kill's store holds it again). It
// returns how many it saw carried out.
func checkOnTime(t *testing.T, left []pending, evs []pipeline.TraceEvent, start, end time.Time) int {
	t.Helper()
	n, worst := 0, time.Duration(0)
	defer func() {
		if n > 0 {
			t.Logf("%d of the %d next actions carried out, the latest %s after max(due, process start)", n, len(left), worst.Round(time.Millisecond))
		}
	}()
	for _, p := range left {
		by := p.due
		if start.After(by) {
			by = start
		}
		by = by.Add(onTime)
		var got *pipeline.TraceEvent
		for i, ev := range evs {
			if ev.Event == "receive" && ev.OperationID == p.op && ev.Action == p.action && ev.Revision >= p.rev {
				got = &evs[i]
				break
			}
		}
		switch {
		case got == nil && end.After(by):
			t.Errorf("%s %s r%d due %s: not carried out by %s (process ran until %s)", p.op, p.action, p.rev, p.due.Format("15:04:05.000"), by.Format("15:04:05.000"), end.Format("15:04:05.000"))
		case got == nil:
		case got.At.After(by):
			t.Errorf("%s %s r%d due %s: carried out at %s, %s late", p.op, p.action, p.rev, p.due.Format("15:04:05.000"), got.At.Format("15:04:05.000"), got.At.Sub(by.Add(-onTime)))
		case got.At.Before(p.due.Add(-100 * time.Millisecond)):
			t.Errorf("%s %s r%d due %s: carried out early, at %s", p.op, p.action, p.rev, p.due.Format("15:04:05.000"), got.At.Format("15:04:05.000"))
		default:
			n++
			worst = max(worst, got.At.Sub(by.Add(-onTime)))
		}
	}
	return n
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
