package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/store/bolt"
)

// seed writes the recovery fixtures into a fresh embedded store file.
func seed(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "genjobs.db")
	st, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	handlertest.SeedRecovery(t, st)
	return path
}

func genjobs(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestOperatorCommands(t *testing.T) {
	t.Parallel()
	db := seed(t)
	code, out, _ := genjobs(t, "reviews", "--db", db)
	if code != 0 || !strings.Contains(out, "op-failed-reconcile-jobs-fail") || !strings.Contains(out, "LOCAL PHASE") || !strings.Contains(out, "REMOTE STATE") {
		t.Fatalf("reviews: %d\n%s", code, out)
	}
	// Local phase and remote state are shown apart.
	code, out, _ = genjobs(t, "plan", "op-failed-submission-failure-refund-pending", "--db", db)
	// Its command to replay names the store it was planned on, so it
	// runs as printed whatever run is newest by then.
	for _, want := range []string{"local phase   failed (settlement unresolved)", "remote state  failed", "next action   inspect_accounting", "replay would  inspects accounting", "ok   job_id_known",
		"--action inspect_accounting --operator NAME --db " + db} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("plan lacks %q (exit %d):\n%s", want, code, out)
		}
	}
	code, out, _ = genjobs(t, "plan", "--json", "--db", db, "op-prepared-never-dispatched")
	var plan struct {
		Recommendation struct{ Action, Effect string }
		Checks         []struct {
			Name string
			OK   bool
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &plan) != nil || plan.Recommendation.Action != "dispatch" || len(plan.Checks) != 5 {
		t.Fatalf("plan --json: %d %s", code, out)
	}
	// Bad input: a clear error, exit status, and no change.
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"replay", "op-accepted-job-known", "--action", "dispatch", "--operator", "eve"}, 1, "the plan for op-accepted-job-known"},
		{[]string{"replay", "op-accepted-job-known", "--action", "observe"}, 2, "--operator is required"},
		{[]string{"replay", "op-accepted-job-known", "--action", "redrive-all", "--operator", "eve"}, 2, "unknown action"},
		{[]string{"replay", "op-nobody", "--action", "observe", "--operator", "eve"}, 1, "not found"},
		{[]string{"replay", "op-uncertain-lost-response", "--action", "reconcile", "--operator", "eve"}, 1, "exactly one of --job-id or --confirmed-not-submitted"},
		{[]string{"plan", "--bogus", "op-x"}, 2, "unknown flag"},
		{[]string{"plan", "a", "b"}, 2, "exactly one OPERATION_ID"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"audit", "op-nobody"}, 1, "not found"},
	} {
		code, _, errOut := genjobs(t, append(tc.args, "--db", db)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
	code, out, _ = genjobs(t, "audit", "op-accepted-job-known", "--db", db)
	if code != 0 || !strings.Contains(out, "no audit entries") {
		t.Fatalf("bad input left an audit trail: %s", out)
	}
	// A real replay: one entry, the reviews of the operation closed.
	code, out, errOut := genjobs(t, "replay", "op-stalled-job-known", "--action", "observe", "--operator", "frank", "--db", db)
	if code != 0 || !strings.Contains(out, "stalled r1 → accepted r2 (audited)") || !strings.Contains(out, "scheduled on the record") || !strings.Contains(out, "closed reviews") {
		t.Fatalf("replay: %d\n%s%s", code, out, errOut)
	}
	code, out, _ = genjobs(t, "audit", "--json", "op-stalled-job-known", "--db", db)
	var entries []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &entries) != nil || len(entries) != 1 || entries[0]["operator"] != "frank" || entries[0]["resulting_revision"] != 2.0 {
		t.Fatalf("audit: %d %s", code, out)
	}
	code, out, _ = genjobs(t, "reviews", "--db", db)
	if code != 0 || strings.Contains(out, "op-stalled-job-known") {
		t.Fatalf("the replayed operation's review is still open:\n%s", out)
	}
	// Replaying a completed operation acknowledges it and changes nothing.
	code, out, _ = genjobs(t, "replay", "op-delivered", "--action", "acknowledge", "--operator", "frank", "--db", db)
	if code != 0 || !strings.Contains(out, "nothing changed") {
		t.Fatalf("acknowledge: %d %s", code, out)
	}
}

func TestMissingStoreIsAnErrorNotAnEmptyList(t *testing.T) {
	t.Parallel()
	code, _, errOut := genjobs(t, "reviews", "--db", filepath.Join(t.TempDir(), "typo.db"))
	if code != 1 || !strings.Contains(errOut, "no embedded store at") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}
