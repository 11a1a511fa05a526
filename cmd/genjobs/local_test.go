package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
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
	// The operator follows the printed hints alone, after a newer run has
	// moved latest: reconcile the lost response with the job the summary
	// names (looked up on the run's saved simulator, so no
	// --force-unverified), then resume the run, which carries out the
	// observation replay scheduled. Each hint runs as printed and reaches
	// this run, not the newest.
	hints := regexp.MustCompile(`(?m)^  (\S.*) (replay demo-lost-response --action reconcile --operator NAME --job-id \S+ .*)\n  (\S.*) (local --resume .*)$`).FindStringSubmatch(out)
	next := regexp.MustCompile(`(?m)^Next: (\S.*) (reviews .*\S)   \(then`).FindStringSubmatch(out)
	if hints == nil || next == nil || hints[1] != hints[3] || !strings.Contains(hints[2], "--job-id "+lostJob+" ") {
		t.Fatalf("no replay, resume and next hints for the lost response:\n%s", out)
	}
	if code, out, errOut := genjobs(t, "local", "--state", state, "--quiet", "--timeout", "90s", "--workload", writeWorkload(t), "--long-poll", "2s"); code != 0 {
		t.Fatalf("newer run: %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = genjobs(t, strings.Fields(next[2])...)
	if code != 0 || !strings.Contains(out, "demo-lost-response") || strings.Contains(out, "op-a") {
		t.Fatalf("next hint %q: %d %s %s", next[2], code, out, errOut)
	}
	code, out, errOut = genjobs(t, strings.Fields(strings.Replace(hints[2], "NAME", "test", 1))...)
	if code != 0 || !strings.Contains(out, "uncertain r3 → accepted r4 (audited)") || strings.Contains(out, "UNVERIFIED") ||
		!strings.Contains(out, "local --resume --run "+runDirOf(t, hints[4])) {
		// Its own hint to carry the follow-up out names this run too.
		t.Fatalf("replay: %d %s %s", code, out, errOut)
	}
	resumeArgs := append(strings.Fields(hints[4]), "--quiet", "--timeout", "60s", "--long-poll", "2s", "--accounting-budget", "2s")
	code, out, errOut = genjobs(t, resumeArgs...)
	if code != 0 || !regexp.MustCompile(`demo-lost-response\s+delivered`).MatchString(out) {
		t.Fatalf("resume: exit %d\n%s\n%s", code, out, errOut)
	}
	// The resumed run's report names its own directory, not latest's.
	b, err = os.ReadFile(filepath.Join(runDirOf(t, hints[4]), "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(string(filepath.Separator)+"latest"+string(filepath.Separator))) || !bytes.Contains(b, []byte(runDirOf(t, hints[4]))) {
		t.Errorf("the resumed run's report names latest, not its own directory:\n%s", b)
	}
	code, out, _ = genjobs(t, append([]string{"audit", "demo-lost-response", "--json"}, strings.Fields(next[2])[1:]...)...)
	if code != 0 || !strings.Contains(out, `"verification": "verified"`) {
		t.Errorf("audit after the loop: %d %s", code, out)
	}
}

// runDirOf is the --run value of a printed resume hint.
func runDirOf(t *testing.T, hint string) string {
	t.Helper()
	f := strings.Fields(hint)
	for i := range f[:len(f)-1] {
		if f[i] == "--run" {
			return f[i+1]
		}
	}
	t.Fatalf("resume hint %q has no --run", hint)
	return ""
}
