package main

import (
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/operation"
)

// auditOf reads an operation's audit trail as `audit --json` prints it.
func auditOf(t *testing.T, db, op string) []map[string]any {
	t.Helper()
	code, out, errOut := genjobs(t, "audit", "--json", op, "--db", db)
	var entries []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &entries) != nil {
		t.Fatalf("audit %s: %d %s%s", op, code, out, errOut)
	}
	return entries
}

// Every replay is audited, acknowledge included: the entry is appended at
// the terminal record's revision, which stays as it was.
func TestAcknowledgeIsAudited(t *testing.T) {
	t.Parallel()
	db := seed(t)
	code, out, errOut := genjobs(t, "replay", "op-delivered", "--action", "acknowledge", "--operator", "frank", "--json", "--db", db)
	var res struct {
		Audit struct {
			Operator string `json:"operator"`
			Action   string `json:"action"`
			Revision int64  `json:"resulting_revision"`
		} `json:"audit"`
		Decision string `json:"decision"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Audit.Operator != "frank" || res.Audit.Action != "acknowledge" || res.Audit.Revision != 1 {
		t.Errorf("acknowledge --json: exit %d, audit %+v; want frank's entry at r1\n%s%s", code, res.Audit, out, errOut)
	}
	code, out, _ = genjobs(t, "replay", "op-delivered", "--action", "acknowledge", "--operator", "grace", "--db", db)
	if code != 0 || !strings.Contains(out, "audited") {
		t.Errorf("acknowledge: exit %d, want it to say it is audited:\n%s", code, out)
	}
	e := auditOf(t, db, "op-delivered")
	if len(e) != 2 || e[0]["operator"] != "frank" || e[1]["operator"] != "grace" || e[1]["decision"] != "acknowledged" {
		t.Errorf("audit after two acknowledgements: %v", e)
	}
	if got := readRecord(t, db, "op-delivered"); got.Revision != 1 || got.Phase != operation.PhaseDelivered {
		t.Errorf("acknowledging wrote the terminal record: %s r%d", got.Phase, got.Revision)
	}
}

// A refund Genace never settles closes with a terminal, audited
// settlement outside Genace, which needs a reason.
func TestSettleOutsideClosesARefundGenaceNeverSettles(t *testing.T) {
	t.Parallel()
	db := seed(t)
	const op = "op-failed-reconcile-jobs-fail"
	code, out, _ := genjobs(t, "plan", op, "--db", db)
	for _, want := range []string{"next action   settle_outside", "12 credits", "--reason"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("plan lacks %q (exit %d):\n%s", want, code, out)
		}
	}
	code, _, errOut := genjobs(t, "replay", op, "--action", "settle_outside", "--operator", "acct", "--db", db)
	if code == 0 || !strings.Contains(errOut, "--reason") {
		t.Errorf("settle_outside without a reason: exit %d, stderr %q", code, errOut)
	}
	const reason = "credit note CN-2291 issued by accounting"
	code, out, errOut = genjobs(t, "replay", op, "--action", "settle_outside", "--operator", "acct", "--reason", reason, "--db", db)
	if code != 0 || !strings.Contains(out, "closed reviews") {
		t.Fatalf("settle_outside: exit %d\n%s%s", code, out, errOut)
	}
	got := readRecord(t, db, op)
	if got.Phase != operation.PhaseFailed || got.Settlement != operation.SettlementSettled || !got.Terminal() || got.Parked != nil {
		t.Errorf("after settle_outside: %s/%s parked=%v, want failed and settled", got.Phase, got.Settlement, got.Parked)
	}
	e := auditOf(t, db, op)
	if len(e) != 1 || e[0]["operator"] != "acct" || e[0]["reason"] != reason || e[0]["credits"] != 12.0 || e[0]["action"] != "settle_outside" {
		t.Errorf("audit of settle_outside: %v", e)
	}
	if code, out, _ := genjobs(t, "reviews", "--db", db); code != 0 || strings.Contains(out, op) {
		t.Errorf("the settled operation's review is still open:\n%s", out)
	}
	if code, out, _ := genjobs(t, "plan", op, "--db", db); code != 0 || !strings.Contains(out, "next action   acknowledge") {
		t.Errorf("plan after settle_outside:\n%s", out)
	}
}

// The operator name goes into audit entries: one rule, a short name.
func TestOperatorNameIsChecked(t *testing.T) {
	t.Parallel()
	db := seed(t)
	for _, name := range []string{"https://evil.example/x?sig=abc", "eve smith", "eve\nroot", strings.Repeat("a", 65), "eve;rm"} {
		code, _, errOut := genjobs(t, "replay", "op-delivered", "--action", "acknowledge", "--operator", name, "--db", db)
		if code != 2 || !strings.Contains(errOut, "operator") {
			t.Errorf("--operator %q: exit %d, stderr %q; want a usage error", name, code, errOut)
		}
	}
	if e := auditOf(t, db, "op-delivered"); len(e) != 0 {
		t.Errorf("a refused operator name was audited: %v", e)
	}
	if code, out, errOut := genjobs(t, "replay", "op-delivered", "--action", "acknowledge", "--operator", "ops.eve-2@example.com", "--db", db); code != 0 {
		t.Errorf("a good name refused: %d %s%s", code, out, errOut)
	}
}

// The audit table shows the job an entry attached and its verification.
func TestAuditTableShowsJobAndVerification(t *testing.T) {
	url, key, c := genaceFor(t)
	t.Setenv("GENACE_BASE_URL", url)
	t.Setenv("GENACE_API_KEY", key)
	job := createJob(t, c, "op-table")
	db := seedStore(t, []operation.Record{uncertain("op-table")}, nil)
	if code, out, errOut := genjobs(t, "replay", "op-table", "--action", "reconcile", "--operator", "eve", "--job-id", job, "--db", db); code != 0 {
		t.Fatalf("reconcile: %d %s%s", code, out, errOut)
	}
	code, out, _ := genjobs(t, "audit", "op-table", "--db", db)
	for _, want := range []string{"JOB", "VERIFICATION", job, "verified"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("audit table lacks %q:\n%s", want, out)
		}
	}
}

// localRun is a local run's directory: an embedded store with recs and
// the simulator it saved, holding a job for each of jobsFor.
func localRun(t *testing.T, recs []operation.Record, jobsFor ...string) string {
	t.Helper()
	db := seedStore(t, recs, nil)
	sim := genacesim.New(genacesim.Config{APIKey: localSimKey}, clock.Real{})
	srv := httptest.NewServer(sim)
	defer func() { srv.Close(); sim.Close() }()
	c, err := genace.New(srv.URL, localSimKey, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range jobsFor {
		createJob(t, c, op)
	}
	if err := saveSim(filepath.Dir(db), sim); err != nil {
		t.Fatal(err)
	}
	return db
}

// On a local run, "not submitted" is checked against the run's saved
// simulator; everywhere it needs a reason, and the plan says what the
// later dispatch charges.
func TestConfirmedNotSubmittedOnALocalRun(t *testing.T) {
	t.Parallel()
	held, free := uncertain("op-held"), uncertain("op-free")
	held.EstimatedCredits, free.EstimatedCredits = 12, 12
	db := localRun(t, []operation.Record{held, free}, "op-held")

	code, out, _ := genjobs(t, "plan", "op-free", "--db", db)
	for _, want := range []string{"charges about 12 credits", "--reason"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("reconcile plan lacks %q:\n%s", want, out)
		}
	}
	code, _, errOut := genjobs(t, "replay", "op-held", "--action", "reconcile", "--confirmed-not-submitted", "--operator", "eve", "--reason", "looked", "--db", db)
	if code != 1 || !strings.Contains(errOut, "job_") || !strings.Contains(errOut, "simulator") {
		t.Errorf("not-submitted while the simulator holds a job: exit %d, stderr %q; want a refusal naming the job", code, errOut)
	}
	if got := readRecord(t, db, "op-held"); got.Phase != operation.PhaseUncertain {
		t.Errorf("op-held moved to %s", got.Phase)
	}
	code, _, errOut = genjobs(t, "replay", "op-free", "--action", "reconcile", "--confirmed-not-submitted", "--operator", "eve", "--db", db)
	if code == 0 || !strings.Contains(errOut, "--reason") || !strings.Contains(errOut, "12 credits") {
		t.Errorf("not-submitted without a reason: exit %d, stderr %q", code, errOut)
	}
	const why = "Genace support ticket 88: no job for op-free"
	code, out, errOut = genjobs(t, "replay", "op-free", "--action", "reconcile", "--confirmed-not-submitted", "--operator", "eve", "--reason", why, "--db", db)
	if code != 0 || !strings.Contains(out, "charges about 12 credits") {
		t.Fatalf("not-submitted with a reason: exit %d, want the next dispatch's charge said\n%s%s", code, out, errOut)
	}
	// The dispatch that follows rests on that word: it shows its charge
	// and needs a reason too.
	code, out, _ = genjobs(t, "plan", "op-free", "--db", db)
	for _, want := range []string{"next action   dispatch", "charges about 12 credits", "second paid job", "--reason"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("dispatch plan lacks %q:\n%s", want, out)
		}
	}
	code, _, errOut = genjobs(t, "replay", "op-free", "--action", "dispatch", "--operator", "eve", "--db", db)
	if code == 0 || !strings.Contains(errOut, "--reason") || !strings.Contains(errOut, "12 credits") {
		t.Errorf("dispatch after not-submitted without a reason: exit %d, stderr %q", code, errOut)
	}
	if code, out, errOut := genjobs(t, "replay", "op-free", "--action", "dispatch", "--operator", "eve", "--reason", "user asked again, ticket 88", "--db", db); code != 0 {
		t.Fatalf("dispatch with a reason: %d %s%s", code, out, errOut)
	}
	e := auditOf(t, db, "op-free")
	if len(e) != 2 || e[0]["reason"] != why || e[1]["action"] != "dispatch" || e[1]["credits"] != 12.0 {
		t.Errorf("audit: %v", e)
	}
}
