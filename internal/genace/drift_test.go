package genace_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
)

// validJob is a contract-valid 202 body for job_drift.
const validJob = `{"id":"job_drift","model":"flux-pro-2","state":"queued","submission_failure":false,` +
	`"created_at":"2026-11-29T08:00:00Z","updated_at":"2026-11-29T08:00:00Z","started_at":null,"finished_at":null,` +
	`"progress":0,"outputs":null,"error":null,` +
	`"credits":{"reserved":12,"charged":0,"refunded":0,"refund_state":"none"},"metadata":{"operation_id":"op-d"}}`

// TestSubmitKeepsJobIDWhateverElseDrifts: a body that names a job id
// yields that id, whatever else in it breaks the contract. The job exists
// for certain once Genace named it; losing the id would leave an
// operation that nobody can observe.
func TestSubmitKeepsJobIDWhateverElseDrifts(t *testing.T) {
	t.Parallel()
	swap := func(old, new string) string {
		if !strings.Contains(validJob, old) {
			t.Fatalf("fixture lacks %q", old)
		}
		return strings.Replace(validJob, old, new, 1)
	}
	tests := []struct {
		name      string
		status    int
		body      string
		truncate  bool // Content-Length promises more than is sent
		want      genace.Outcome
		wantJobID string
		wantDrift bool
	}{
		{"202 valid", 202, validJob, false, genace.OutcomeAccepted, "job_drift", false},
		{"202 unknown state", 202, swap(`"state":"queued"`, `"state":"paused"`), false, genace.OutcomeAccepted, "job_drift", true},
		{"202 missing credits", 202, swap(`"credits":{"reserved":12,"charged":0,"refunded":0,"refund_state":"none"},`, ``), false, genace.OutcomeAccepted, "job_drift", true},
		{"202 credits wrong type", 202, swap(`"credits":{"reserved":12,"charged":0,"refunded":0,"refund_state":"none"}`, `"credits":"12"`), false, genace.OutcomeAccepted, "job_drift", true},
		{"202 unknown refund state", 202, swap(`"refund_state":"none"`, `"refund_state":"maybe"`), false, genace.OutcomeAccepted, "job_drift", true},
		{"202 negative credits", 202, swap(`"reserved":12`, `"reserved":-1`), false, genace.OutcomeAccepted, "job_drift", true},
		{"202 trailing junk", 202, validJob + ` <html>oops</html>`, false, genace.OutcomeAccepted, "job_drift", true},
		{"202 outputs not a list", 202, swap(`"outputs":null`, `"outputs":{"url":"x"}`), false, genace.OutcomeAccepted, "job_drift", true},
		{"202 output url relative", 202, swap(`"outputs":null`, `"outputs":[{"url":"/files/x?sig=SECRETSIG"}]`), false, genace.OutcomeAccepted, "job_drift", true},
		{"202 bad timestamp", 202, swap(`"created_at":"2026-11-29T08:00:00Z"`, `"created_at":"yesterday"`), false, genace.OutcomeAccepted, "job_drift", true},
		{"202 id last, after junk fields", 202, `{"state":7,"credits":[],"id":"job_drift"}`, false, genace.OutcomeAccepted, "job_drift", true},
		{"202 truncated after the id", 202, validJob[:strings.Index(validJob, `,"model"`)], true, genace.OutcomeAccepted, "job_drift", true},
		{"200 valid", 200, validJob, false, genace.OutcomeAccepted, "job_drift", false},
		{"202 no id", 202, swap(`"id":"job_drift",`, ``), false, genace.OutcomeUnknown, "", false},
		{"202 null id", 202, swap(`"id":"job_drift"`, `"id":null`), false, genace.OutcomeUnknown, "", false},
		{"202 garbage", 202, "{\"id\": \"job_\x00\xff<html>502 Bad Gateway", false, genace.OutcomeUnknown, "", false},
		{"202 truncated inside the id", 202, `{"id":"job_dr`, true, genace.OutcomeUnknown, "", false},
		{"202 two different ids", 202, swap(`"id":"job_drift"`, `"id":"job_a","id":"job_b"`), false, genace.OutcomeUnknown, "", false},
		{"202 id in capitals", 202, swap(`"id":"job_drift"`, `"ID":"job_drift"`), false, genace.OutcomeAccepted, "job_drift", false},
		{"202 id twice, differing in case", 202, swap(`"id":"job_drift"`, `"id":"job_drift","Id":"job_other"`), false, genace.OutcomeUnknown, "", false},
		{"202 nested id only", 202, `{"job":{"id":"job_drift"}}`, false, genace.OutcomeUnknown, "", false},
		{"202 oversized body", 202, swap(`"model":"flux-pro-2"`, `"model":"`+strings.Repeat("x", genace.MaxBodyBytes)+`"`), false, genace.OutcomeAccepted, "job_drift", true},

		{"502 envelope", 502, `{"error":{"code":"submission_failed","message":"m","job_id":"job_drift"}}`, false, genace.OutcomeSubmissionFailed, "job_drift", false},
		{"502 code wrong type", 502, `{"error":{"code":500,"message":{"text":"x"},"job_id":"job_drift"}}`, false, genace.OutcomeSubmissionFailed, "job_drift", true},
		{"500 trailing junk", 500, `{"error":{"code":"internal","job_id":"job_drift"}} <html>`, false, genace.OutcomeSubmissionFailed, "job_drift", true},
		{"503 extra fields", 503, `{"error":{"code":"upstream_unavailable","job_id":"job_drift","retry":true},"trace":[1,2]}`, false, genace.OutcomeSubmissionFailed, "job_drift", false},
		{"504 truncated after job_id", 504, `{"error":{"code":"submission_failed","job_id":"job_drift"`, true, genace.OutcomeSubmissionFailed, "job_drift", true},
		{"503 null job_id", 503, `{"error":{"code":"upstream_unavailable","job_id":null}}`, false, genace.OutcomeUnknown, "", false},
		{"503 job_id at top level", 503, `{"job_id":"job_drift","error":{"code":"internal"}}`, false, genace.OutcomeUnknown, "", false},
		// The contract says these create nothing; an envelope that names a
		// job anyway is drift, and the job is kept rather than forgotten.
		{"400 with job_id", 400, `{"error":{"code":"invalid_request","job_id":"job_drift"}}`, false, genace.OutcomeSubmissionFailed, "job_drift", true},
		{"429 with job_id", 429, `{"error":{"code":"rate_limited","job_id":"job_drift"}}`, false, genace.OutcomeSubmissionFailed, "job_drift", true},
		{"408 with job_id", 408, `{"error":{"code":"request_timeout","job_id":"job_drift"}}`, false, genace.OutcomeSubmissionFailed, "job_drift", true},
		{"408 without job_id", 408, `{"error":{"code":"request_timeout"}}`, false, genace.OutcomeUnknown, "", false},
		{"400 without job_id", 400, `{"error":{"code":"invalid_request"}}`, false, genace.OutcomeRejected, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := newRawServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if tc.truncate {
					w.Header().Set("Content-Length", strconv.Itoa(len(tc.body)+100))
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
				if tc.truncate {
					_ = http.NewResponseController(w).Flush()
					panic(http.ErrAbortHandler)
				}
			})
			c, err := genace.New(base, testKey, &http.Client{Transport: &http.Transport{}})
			if err != nil {
				t.Fatal(err)
			}
			res := c.Submit(context.Background(), req("op-d"), 5*time.Second)
			if res.Outcome != tc.want || res.JobID != tc.wantJobID {
				t.Fatalf("outcome %s job %q, want %s job %q (err %v)", res.Outcome, res.JobID, tc.want, tc.wantJobID, res.Err)
			}
			if (res.Drift != nil) != tc.wantDrift {
				t.Errorf("drift = %v, want drift %v", res.Drift, tc.wantDrift)
			}
			if tc.want == genace.OutcomeAccepted && (res.Job == nil) != tc.wantDrift {
				t.Errorf("job = %v with drift %v: a drifted body must give no Job, a good one must", res.Job, res.Drift)
			}
			if res.Job != nil && res.Job.ID != res.JobID {
				t.Errorf("Job.ID %q != JobID %q", res.Job.ID, res.JobID)
			}
			if tc.want == genace.OutcomeSubmissionFailed && (res.Err == nil || !strings.Contains(res.Err.Error(), "HTTP "+strconv.Itoa(tc.status))) {
				t.Errorf("err = %v", res.Err)
			}
			if strings.Contains(tc.name, "two different ids") && res.UnusableJobID != `"job_a", "job_b"` {
				t.Errorf("conflicting ids kept as evidence %q", res.UnusableJobID)
			}
			assertNoLeak(t, res)
		})
	}
}

// assertNoLeak checks a result's every printable form for the fixtures'
// secrets: the key and a signed URL's signature.
func assertNoLeak(t *testing.T, res genace.SubmitResult) {
	t.Helper()
	lc := newLeakCheck(t, testKey, "SECRETSIG")
	lc.log("result", res)
	if res.Err != nil {
		lc.buf.WriteString(res.Err.Error())
	}
	if res.Drift != nil {
		lc.buf.WriteString(res.Drift.Error())
	}
	lc.buf.WriteString(res.UnusableJobID)
	lc.check()
}

// TestSubmitKeepsUnusableJobIDAsEvidence: an id outside the definition is
// not a handle, but it is not dropped either.
func TestSubmitKeepsUnusableJobIDAsEvidence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, status, body, want string
	}{
		{"202 slash", "202", `{"id":"job/01","state":"queued"}`, `"job/01"`},
		{"202 unicode", "202", `{"id":"jöb\u0000x"}`, `"j\u00f6b\x00x"`},
		{"202 number", "202", `{"id":12345,"state":"queued"}`, `12345`},
		{"202 object", "202", `{"id":{"v":"job_1"}}`, `an object`},
		{"202 url with signature", "202", `{"id":"https://h/files/j?sig=SECRETSIG"}`, `"https://h/files/j?[redacted]"`},
		{"202 overlong", "202", `{"id":"` + strings.Repeat("a", 300) + `"}`, `"` + strings.Repeat("a", 128) + `..."`},
		{"502 space", "502", `{"error":{"code":"submission_failed","job_id":"job 01"}}`, `"job 01"`},
		{"400 slash", "400", `{"error":{"code":"invalid_request","job_id":"a/b"}}`, `"a/b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			status, _ := strconv.Atoi(tc.status)
			base := newRawServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(status)
				_, _ = w.Write([]byte(tc.body))
			})
			c, err := genace.New(base, testKey, &http.Client{Transport: &http.Transport{}})
			if err != nil {
				t.Fatal(err)
			}
			res := c.Submit(context.Background(), req("op-d"), 5*time.Second)
			if res.Outcome != genace.OutcomeUnknown || res.JobID != "" || res.UnusableJobID != tc.want || !res.RequestSent {
				t.Fatalf("outcome %s job %q evidence %q sent %v; want unknown, no job, evidence %q", res.Outcome, res.JobID, res.UnusableJobID, res.RequestSent, tc.want)
			}
			assertNoLeak(t, res)
		})
	}
}

// TestSimulatorDriftKeepsJobID runs each of the simulator's body drifts
// (the ones the fault simulation injects) through the client: the id of
// the job Genace really created always comes back.
func TestSimulatorDriftKeepsJobID(t *testing.T) {
	t.Parallel()
	for _, d := range genacesim.BodyDrifts {
		faults := []genacesim.Fault{genacesim.Drifted(d)}
		if d.BendsEnvelope() {
			faults = append(faults, genacesim.SubmissionFailed(502).WithDrift(d))
		}
		for _, f := range faults {
			t.Run(f.String(), func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, genacesim.Config{Models: models})
				e.sim.ScriptPOST("op-1", f)
				res := e.client.Submit(context.Background(), req("op-1"), 5*time.Second)
				ids := e.sim.JobsForOperation("op-1")
				if len(ids) != 1 || res.JobID != ids[0] || res.Drift == nil {
					t.Fatalf("outcome %s job %q drift %v; simulator created %v", res.Outcome, res.JobID, res.Drift, ids)
				}
				want := genace.OutcomeAccepted
				if f.Kind == genacesim.FaultServerErrorWithJobID {
					want = genace.OutcomeSubmissionFailed
				}
				if res.Outcome != want {
					t.Fatalf("outcome %s, want %s", res.Outcome, want)
				}
			})
		}
	}
}

// TestJobIDOneDefinition: an id the client hands back as a job id must be
// one the queue envelope carries, or every follow-up for the job fails to
// encode; an id outside the definition is not handed back as a handle.
func TestJobIDOneDefinition(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id     string
		usable bool
	}{
		{"job_01J9ZK", true},
		{"job.01:x", true},
		{"J-1", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"job/01", false},
		{"job 01", false},
		{"job?sig=abc", false},
		{"-job", false},
		{".job", false},
		{"jöb", false},
		{"job\u200b01", false},
	} {
		t.Run(tc.id, func(t *testing.T) {
			t.Parallel()
			if got := message.ValidJobID(tc.id); got != tc.usable {
				t.Fatalf("message.ValidJobID(%q) = %v, want %v", tc.id, got, tc.usable)
			}
			base := newRawServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusAccepted)
				_, _ = w.Write([]byte(strings.Replace(validJob, `"job_drift"`, strconv.Quote(tc.id), 1)))
			})
			c, err := genace.New(base, testKey, &http.Client{Transport: &http.Transport{}})
			if err != nil {
				t.Fatal(err)
			}
			res := c.Submit(context.Background(), req("op-d"), 5*time.Second)
			if !tc.usable {
				if res.Outcome != genace.OutcomeUnknown || res.JobID != "" || res.UnusableJobID == "" {
					t.Fatalf("id %q outside the definition came back as outcome %s job %q evidence %q", tc.id, res.Outcome, res.JobID, res.UnusableJobID)
				}
				return
			}
			if res.Outcome != genace.OutcomeAccepted || res.JobID != tc.id {
				t.Fatalf("outcome %s job %q (err %v)", res.Outcome, res.JobID, res.Err)
			}
			next := message.Envelope{Action: message.ActionObserveGeneration, OperationID: "op-d", ExpectedRevision: 3, ExpectedRemoteJobID: res.JobID, Attempt: 1}
			if _, err := next.Encode(); err != nil {
				t.Fatalf("the follow-up for job %q cannot be encoded: %v", res.JobID, err)
			}
		})
	}
}

// TestSubmit408IsUnknown: 408 is not among the contract's "nothing
// created" answers; a proxy may send it after Genace acted.
func TestSubmit408IsUnknown(t *testing.T) {
	t.Parallel()
	base := newRawServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusRequestTimeout)
	})
	c, err := genace.New(base, testKey, &http.Client{Transport: &http.Transport{}})
	if err != nil {
		t.Fatal(err)
	}
	res := c.Submit(context.Background(), req("op-408"), 5*time.Second)
	if res.Outcome != genace.OutcomeUnknown || !res.RequestSent || res.StatusCode != 408 {
		t.Fatalf("408: outcome %s, sent %v, status %d; want unknown, sent, 408", res.Outcome, res.RequestSent, res.StatusCode)
	}
}
