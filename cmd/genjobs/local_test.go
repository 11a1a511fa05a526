package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// genjobs local end to end on the demo, checked through its report and
// the operator commands on the state it leaves.
func TestLocalRunsTheDemo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	state, report := filepath.Join(dir, "state"), filepath.Join(dir, "report.json")
	code, out, errOut := genjobs(t, "local", "--state", state, "--report", report, "--quiet", "--timeout", "90s",
		"--queue-for", "100ms", "--run-for", "800ms", "--refund-settle", "300ms", "--long-poll", "2s", "--accounting-budget", "2s")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"demo-lost-response    uncertain", "8 POSTs, 8 jobs", "genjobs replay demo-lost-response --action reconcile"} {
		if !strings.Contains(out, want) {
			t.Fatalf("summary lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		TimedOut   bool `json:"timed_out"`
		Operations []struct {
			OperationID string   `json:"operation_id"`
			Phase       string   `json:"phase"`
			Posts       int      `json:"posts"`
			GenaceJobs  []string `json:"genace_jobs"`
			RemoteJobID string   `json:"remote_job_id"`
			Artifacts   []struct {
				Path   string `json:"path"`
				SHA256 string `json:"sha256"`
			} `json:"artifacts"`
		} `json:"operations"`
		Totals struct{ Posts int } `json:"totals"`
	}
	if err := json.Unmarshal(b, &rep); err != nil || rep.TimedOut || len(rep.Operations) != 8 || rep.Totals.Posts != 8 {
		t.Fatalf("report: %v, %+v", err, rep)
	}
	var lostJob string
	for _, op := range rep.Operations {
		if op.Posts > 1 {
			t.Errorf("%s: %d POSTs", op.OperationID, op.Posts)
		}
		if op.Phase == "delivered" {
			for _, a := range op.Artifacts {
				if _, err := os.Stat(a.Path); err != nil || len(a.SHA256) != 64 {
					t.Errorf("%s: artifact %s: %v", op.OperationID, a.Path, err)
				}
			}
		}
		if op.OperationID == "demo-lost-response" {
			if op.Phase != "uncertain" || op.RemoteJobID != "" || len(op.GenaceJobs) != 1 {
				t.Fatalf("lost response: %+v", op)
			}
			lostJob = op.GenaceJobs[0]
		}
	}
	// The operator reconciles the lost response with the job the report
	// shows. The simulator has exited, so nothing can look the job up:
	// the attach is refused unless forced, with a reason.
	db := filepath.Join(state, "latest", "genjobs.db")
	code, _, errOut = genjobs(t, "replay", "demo-lost-response", "--action", "reconcile", "--operator", "test", "--job-id", lostJob, "--db", db)
	if code != 1 || !strings.Contains(errOut, "not verified") {
		t.Fatalf("unverifiable job: exit %d %s", code, errOut)
	}
	code, out, errOut = genjobs(t, "replay", "demo-lost-response", "--action", "reconcile", "--operator", "test", "--job-id", lostJob,
		"--force-unverified", "--reason", "the local run's report lists it", "--db", db)
	if code != 0 || !strings.Contains(out, "uncertain r3 → accepted r4 (audited)") || !strings.Contains(out, "UNVERIFIED") {
		t.Fatalf("replay: %d %s %s", code, out, errOut)
	}
}
