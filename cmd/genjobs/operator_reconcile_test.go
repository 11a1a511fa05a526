package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store/bolt"
)

// uncertain is an operation whose one POST has an unknown outcome, as the
// sweep leaves it after a claim expired.
func uncertain(id string) operation.Record {
	rec := handlertest.Prepared(id)
	rec.Phase, rec.Posts, rec.LastError = operation.PhaseUncertain, 1, "claim_expired"
	rec.Claim = &operation.Claim{Owner: "submit-1", MessageID: "m-1", At: handlertest.Start}
	rec.Parked = &operation.ParkedState{Reason: "claim_expired", At: handlertest.Start}
	return rec
}

// seedStore writes records (and the reviews a handler would have opened)
// into a fresh embedded store file.
func seedStore(t *testing.T, recs []operation.Record, reviews []review.Record) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "genjobs.db")
	st, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, r := range recs {
		if _, err := st.Create(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range reviews {
		if _, err := st.PutReview(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// keptJobReview is what submit's keepJobID writes when a 202's job id
// could not be attached to the record.
func keptJobReview(rec operation.Record, jobID string) review.Record {
	r := review.ForRecord("job:"+jobID, review.SourceHandler, &rec, handlertest.Start)
	r.RemoteJobID, r.ErrorCategory, r.Recommended = jobID, "job_id_not_attached", operation.ActionReconcile
	return r
}

func readRecord(t *testing.T, db, id string) operation.Record {
	t.Helper()
	st, err := bolt.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	return handlertest.Get(t, st, id)
}

// Hole 4: a job id kept only in a review (the accepted outcome could not
// be written) must show in plan, and --confirmed-not-submitted must be
// refused while it is known, or a dispatch would POST a second time.
func TestPlanShowsAJobKeptOnlyInAReview(t *testing.T) {
	t.Parallel()
	rec := uncertain("op-kept")
	rec.Revision = 1
	db := seedStore(t, []operation.Record{rec}, []review.Record{
		keptJobReview(rec, "job_kept1"),
		review.ForRecord(review.ParkedID(rec.OperationID, 1), review.SourceSweep, &rec, handlertest.Start),
	})
	code, out, errOut := genjobs(t, "plan", "op-kept", "--db", db)
	if code != 0 || !strings.Contains(out, "job_kept1") {
		t.Errorf("plan does not show the job kept in review job:job_kept1 (exit %d):\n%s%s", code, out, errOut)
	}
	if strings.Contains(out, "or --confirmed-not-submitted") {
		t.Errorf("plan offers --confirmed-not-submitted while job_kept1 is known:\n%s", out)
	}
	code, out, errOut = genjobs(t, "replay", "op-kept", "--action", "reconcile", "--confirmed-not-submitted", "--operator", "eve", "--db", db)
	if code != 1 || !strings.Contains(errOut, "job_kept1") {
		t.Errorf("confirmed-not-submitted with job_kept1 known: exit %d, want 1 naming the job\n%s%s", code, out, errOut)
	}
	if got := readRecord(t, db, "op-kept"); got.Phase != operation.PhaseUncertain || got.Revision != 1 {
		t.Errorf("record moved to %s r%d; want it left uncertain at r1", got.Phase, got.Revision)
	}
	code, out, _ = genjobs(t, "reviews", "--db", db)
	if code != 0 || !strings.Contains(out, "job:job_kept1") {
		t.Errorf("review job:job_kept1 is no longer open:\n%s", out)
	}
}

// genaceFor starts a simulator with a key and returns its URL, key and a
// client to create jobs on it (as a POST of ours, or another client's,
// would have).
func genaceFor(t *testing.T) (string, string, *genace.Client) {
	t.Helper()
	const key = "sim-key-for-reconcile"
	sim := genacesim.New(genacesim.Config{APIKey: key}, clock.Real{})
	srv := httptest.NewServer(sim)
	t.Cleanup(func() { sim.Close(); srv.Close() })
	c, err := genace.New(srv.URL, key, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	return srv.URL, key, c
}

// createJob is a POST made for operation opID: its job carries
// metadata.operation_id = opID.
func createJob(t *testing.T, c *genace.Client, opID string) string {
	t.Helper()
	res := c.Submit(context.Background(), genace.SubmitRequest{OperationID: opID, Model: "flux-pro-2", Input: json.RawMessage(`{"prompt":"x"}`)}, 10*time.Second)
	if res.Outcome != genace.OutcomeAccepted || res.JobID == "" {
		t.Fatalf("create job for %s: %+v", opID, res)
	}
	return res.JobID
}

// Hole 4: --job-id is evidence the operator found; it is checked on
// Genace and in the store before it is written, and an override is
// audited with its reason. Not parallel: it sets the environment the
// operator's shell would.
func TestReconcileVerifiesTheJob(t *testing.T) {
	url, key, c := genaceFor(t)
	t.Setenv("GENACE_BASE_URL", url)
	t.Setenv("GENACE_API_KEY", key)

	otherJob := createJob(t, c, "op-other")   // a job of another operation
	heldJob := createJob(t, c, "op-held")     // names op-held, but op-holder holds it
	goodJob := createJob(t, c, "op-verified") // the job op-verified's lost POST created
	holder := handlertest.Prepared("op-holder")
	holder.Phase, holder.RemoteJobID, holder.Posts = operation.PhaseAccepted, heldJob, 1
	recs := []operation.Record{holder}
	for _, id := range []string{"op-missing", "op-foreign", "op-held", "op-forced", "op-held-forced", "op-verified"} {
		recs = append(recs, uncertain(id))
	}
	db := seedStore(t, recs, nil)

	reconcile := func(op, job string, extra ...string) (int, string, string) {
		args := append([]string{"replay", op, "--action", "reconcile", "--operator", "eve", "--job-id", job, "--db", db}, extra...)
		return genjobs(t, args...)
	}
	for _, tc := range []struct {
		name, op, job string
		extra         []string
		want          string
	}{
		{"no such job", "op-missing", "job_nonexistent00000000", nil, "no such job on Genace"},
		{"job of another operation", "op-foreign", otherJob, nil, "names operation op-other"},
		{"job held by another operation", "op-held", heldJob, nil, "held by operation op-holder"},
		{"override never shares a held job", "op-held-forced", heldJob, []string{"--force-unverified", "--reason", "ticket 4711"}, "held by operation op-holder"},
		{"override without a reason", "op-forced", otherJob, []string{"--force-unverified"}, "--reason"},
	} {
		code, out, errOut := reconcile(tc.op, tc.job, tc.extra...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want a refusal saying %q\n%s", tc.name, code, errOut, tc.want, out)
		}
		if got := readRecord(t, db, tc.op); got.Phase != operation.PhaseUncertain || got.RemoteJobID != "" {
			t.Errorf("%s: record became %s with job %q; want it untouched", tc.name, got.Phase, got.RemoteJobID)
		}
	}

	audit := func(op string) []map[string]any {
		t.Helper()
		code, out, errOut := genjobs(t, "audit", "--json", op, "--db", db)
		var entries []map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &entries) != nil {
			t.Fatalf("audit %s: %d %s%s", op, code, out, errOut)
		}
		return entries
	}
	// Verified: the job names this operation and nobody holds it.
	if code, out, errOut := reconcile("op-verified", goodJob); code != 0 {
		t.Fatalf("verified job refused: %d %s%s", code, out, errOut)
	}
	if e := audit("op-verified"); len(e) != 1 || e[0]["remote_job_id"] != goodJob || e[0]["verification"] != "verified" {
		t.Errorf("audit of a verified attach: %v", e)
	}
	// The override, with its reason in the audit entry.
	const reason = "Genace support ticket 4711: job created by the old client"
	if code, out, errOut := reconcile("op-forced", otherJob, "--force-unverified", "--reason", reason); code != 0 {
		t.Fatalf("override refused: %d %s%s", code, out, errOut)
	}
	e := audit("op-forced")
	if len(e) != 1 || e[0]["reason"] != reason || e[0]["remote_job_id"] != otherJob || !strings.Contains(e[0]["verification"].(string), "op-other") {
		t.Errorf("audit of the override: %v", e)
	}
	if got := readRecord(t, db, "op-forced"); got.Phase != operation.PhaseAccepted || got.RemoteJobID != otherJob {
		t.Errorf("override: record %s with job %q", got.Phase, got.RemoteJobID)
	}
}
