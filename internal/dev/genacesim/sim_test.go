package genacesim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
)

const key = "sim-test-key"

var t0 = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

type harness struct {
	sim *Simulator
	srv *httptest.Server
	clk *clock.Manual
	hc  *http.Client
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	cfg.APIKey = key
	clk := clock.NewManual(t0)
	return wrap(t, New(cfg, clk), clk)
}

// wrap serves sim over HTTP for a test.
func wrap(t *testing.T, sim *Simulator, clk *clock.Manual) *harness {
	t.Helper()
	srv := httptest.NewServer(sim)
	tr := &http.Transport{}
	t.Cleanup(srv.Close)
	t.Cleanup(tr.CloseIdleConnections)
	t.Cleanup(sim.Close)
	return &harness{sim: sim, srv: srv, clk: clk, hc: &http.Client{Transport: tr}}
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) envelope(t *testing.T) wireEnvelopeError {
	t.Helper()
	var env wireEnvelope
	if err := json.Unmarshal(r.body, &env); err != nil {
		t.Fatalf("not an envelope (%d): %q", r.status, r.body)
	}
	return env.Error
}

func (r reply) job(t *testing.T) wireJob {
	t.Helper()
	var j wireJob
	if err := json.Unmarshal(r.body, &j); err != nil {
		t.Fatalf("not a job (%d): %q", r.status, r.body)
	}
	return j
}

func (h *harness) do(t *testing.T, method, path, auth, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

func (h *harness) post(t *testing.T, op, model string) reply {
	t.Helper()
	return h.do(t, "POST", "/api/v1/jobs", key, fmt.Sprintf(`{"model":%q,"input":{"p":1},"metadata":{"operation_id":%q}}`, model, op))
}

func TestLazyStateMachine(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{
		RefundSettleAfter: 2 * time.Second,
		Models: map[string]ModelConfig{
			"ok":   {Price: 5, QueueFor: 10 * time.Second, RunFor: 20 * time.Second, OutputCount: 3},
			"bad":  {Price: 9, QueueFor: time.Second, RunFor: time.Second, Outcome: OutcomeFail},
			"free": {},
		},
	})
	ok := h.post(t, "a", "ok").job(t)
	bad := h.post(t, "b", "bad").job(t)
	if ok.State != StateQueued || ok.Credits != (Credits{Reserved: 5, RefundState: RefundNone}) || ok.Outputs != nil {
		t.Fatalf("accepted: %+v", ok)
	}
	steps := []struct {
		at                time.Duration
		okState, badState string
		badRefund         string
	}{
		{0, StateQueued, StateQueued, RefundNone},
		{1500 * time.Millisecond, StateQueued, StateRunning, RefundNone},
		{2 * time.Second, StateQueued, StateFailed, RefundPending},
		{4 * time.Second, StateQueued, StateFailed, RefundSettled},
		{10 * time.Second, StateRunning, StateFailed, RefundSettled},
		{30 * time.Second, StateSucceeded, StateFailed, RefundSettled},
	}
	for _, s := range steps {
		h.clk.Set(t0.Add(s.at))
		a, _ := h.sim.Job(ok.ID)
		b, _ := h.sim.Job(bad.ID)
		if a.State != s.okState || b.State != s.badState || b.Credits.RefundState != s.badRefund {
			t.Fatalf("at %s: ok %s bad %s/%s", s.at, a.State, b.State, b.Credits.RefundState)
		}
	}
	b, _ := h.sim.Job(bad.ID)
	if b.Credits != (Credits{Reserved: 9, Charged: 9, Refunded: 9, RefundState: RefundSettled}) {
		t.Errorf("bad credits %+v", b.Credits)
	}
	j := h.do(t, "GET", "/api/v1/jobs/"+ok.ID, key, "").job(t)
	if j.State != StateSucceeded || len(j.Outputs) != 3 || j.Credits.Charged != 5 || j.Progress != 1 ||
		j.FinishedAt == nil || !j.FinishedAt.Equal(t0.Add(30*time.Second)) || j.Metadata["operation_id"] != "a" {
		t.Fatalf("succeeded: %+v", j)
	}
	bj := h.do(t, "GET", "/api/v1/jobs/"+bad.ID, key, "").job(t)
	if bj.Error == nil || bj.Error.Code != "render_failed" || bj.Outputs != nil {
		t.Fatalf("failed: %+v", bj)
	}
	// A zero-config model in Models gets one output and succeeds at once.
	free := h.post(t, "c", "free").job(t)
	if free.State != StateSucceeded || len(free.Outputs) != 1 {
		t.Fatalf("free: %+v", free)
	}
}

func TestRunningProgress(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{DefaultModel: ModelConfig{Price: 1, QueueFor: 0, RunFor: 10 * time.Second}})
	j := h.post(t, "a", "m").job(t)
	h.clk.Advance(4 * time.Second)
	g := h.do(t, "GET", "/api/v1/jobs/"+j.ID, key, "").job(t)
	if g.State != StateRunning || g.Progress < 0.39 || g.Progress > 0.41 {
		t.Fatalf("%+v", g)
	}
}

func TestHTTPValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	job := h.post(t, "x", "m").job(t)
	tests := []struct {
		name, method, path, auth, body string
		status                         int
		code                           string
	}{
		{"post no key", "POST", "/api/v1/jobs", "", `{"model":"m","input":{}}`, 401, "unauthorized"},
		{"post wrong key", "POST", "/api/v1/jobs", "nope", `{"model":"m","input":{}}`, 401, "unauthorized"},
		{"post not json", "POST", "/api/v1/jobs", key, `hello`, 400, "invalid_request"},
		{"post no model", "POST", "/api/v1/jobs", key, `{"input":{}}`, 400, "invalid_request"},
		{"post no input", "POST", "/api/v1/jobs", key, `{"model":"m"}`, 400, "invalid_request"},
		{"post input array", "POST", "/api/v1/jobs", key, `{"model":"m","input":[1]}`, 400, "invalid_request"},
		{"post metadata not strings", "POST", "/api/v1/jobs", key, `{"model":"m","input":{},"metadata":{"a":1}}`, 400, "invalid_request"},
		{"post trailing", "POST", "/api/v1/jobs", key, `{"model":"m","input":{}} {}`, 400, "invalid_request"},
		{"get no key", "GET", "/api/v1/jobs/" + job.ID, "", "", 401, "unauthorized"},
		{"get unknown", "GET", "/api/v1/jobs/job_nope", key, "", 404, "not_found"},
		{"get wait 31", "GET", "/api/v1/jobs/" + job.ID + "?wait=31", key, "", 400, "invalid_request"},
		{"get wait -1", "GET", "/api/v1/jobs/" + job.ID + "?wait=-1", key, "", 400, "invalid_request"},
		{"get wait abc", "GET", "/api/v1/jobs/" + job.ID + "?wait=abc", key, "", 400, "invalid_request"},
		{"unknown path", "GET", "/api/v2/things", key, "", 404, "not_found"},
		{"admin no key", "POST", "/admin/reconcile-jobs", "", `{"job_ids":[],"fail":true}`, 401, "unauthorized"},
		{"admin fail false", "POST", "/admin/reconcile-jobs", key, `{"job_ids":[],"fail":false}`, 400, "invalid_request"},
		{"admin bad body", "POST", "/admin/reconcile-jobs", key, `[`, 400, "invalid_request"},
		{"file bad sig", "GET", "/files/" + job.ID + "/0?expires=99999999999&sig=00", "", "", 403, "forbidden"},
		{"file no sig", "GET", "/files/" + job.ID + "/0", "", "", 403, "forbidden"},
	}
	for _, tc := range tests {
		r := h.do(t, tc.method, tc.path, tc.auth, tc.body)
		if r.status != tc.status {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, r.status, tc.status, r.body)
			continue
		}
		if env := r.envelope(t); env.Code != tc.code || env.JobID != "" {
			t.Errorf("%s: envelope %+v", tc.name, env)
		}
	}
	if n := len(h.sim.Jobs()); n != 1 {
		t.Errorf("%d jobs created, want 1", n)
	}
	if h.sim.TotalPosts() != 9 || h.sim.PostCount("x") != 1 || h.sim.PostCount("") != 8 {
		t.Errorf("posts: total %d, x %d, none %d", h.sim.TotalPosts(), h.sim.PostCount("x"), h.sim.PostCount(""))
	}
	if h.sim.GetCount(job.ID) != 4 || h.sim.GetCount("job_nope") != 1 || h.sim.TotalGets() != 5 || h.sim.FileGets() != 2 {
		t.Errorf("gets: job %d nope %d total %d files %d", h.sim.GetCount(job.ID), h.sim.GetCount("job_nope"), h.sim.TotalGets(), h.sim.FileGets())
	}
}

func TestPostFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fault   Fault
		status  int // 0: connection dropped
		code    string
		jobID   bool // envelope carries job_id
		created bool
		subFail bool
	}{
		{NoFault(), 202, "", false, true, false},
		{SubmissionFailed(0), 502, "submission_failed", true, true, true},
		{Status5xx(500, true), 500, "submission_failed", true, true, true},
		{ServerErrorNoJob(0), 503, "upstream_unavailable", false, false, false},
		{ServerErrorJobCreated(504), 504, "upstream_unavailable", false, true, false},
		{ServerErrorJobCreated(0), 500, "internal", false, true, false},
		{RateLimited(2500 * time.Millisecond), 429, "rate_limited", false, false, false},
		{Reject(402, ""), 402, "insufficient_credits", false, false, false},
		{Reject(422, "bad_prompt"), 422, "bad_prompt", false, false, false},
		{GarbageBody(), 202, "", false, true, false},
		{AcceptThenDrop(), 0, "", false, true, false},
		{TimeoutAfterCreate(), 408, "request_timeout", false, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.fault.String(), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{})
			h.sim.ScriptPOST("op", tc.fault)
			req, _ := http.NewRequest("POST", h.srv.URL+"/api/v1/jobs", strings.NewReader(`{"model":"m","input":{},"metadata":{"operation_id":"op"}}`))
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := h.hc.Do(req)
			if tc.status == 0 {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("expected a dropped connection, got %d", resp.StatusCode)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				r := reply{resp.StatusCode, resp.Header, b}
				if r.status != tc.status {
					t.Fatalf("status %d, want %d", r.status, tc.status)
				}
				if tc.code != "" {
					env := r.envelope(t)
					if env.Code != tc.code || (env.JobID != "") != tc.jobID {
						t.Fatalf("envelope %+v", env)
					}
				}
				if tc.status == 429 && r.header.Get("Retry-After") != "3" {
					t.Errorf("Retry-After %q", r.header.Get("Retry-After"))
				}
				if tc.fault.Kind == FaultGarbageBody && json.Valid(b) {
					t.Error("garbage body is valid JSON")
				}
			}
			ids := h.sim.JobsForOperation("op")
			if (len(ids) == 1) != tc.created || len(ids) > 1 {
				t.Fatalf("jobs %v, created %v", ids, tc.created)
			}
			if tc.created {
				truth, _ := h.sim.Job(ids[0])
				if truth.SubmissionFailure != tc.subFail {
					t.Fatalf("truth %+v", truth)
				}
				if tc.subFail && (truth.State != StateFailed || truth.Credits != (Credits{Reserved: 10, Charged: 10, RefundState: RefundPending})) {
					t.Fatalf("submission failure truth %+v", truth)
				}
			}
			if h.sim.PostCount("op") != 1 {
				t.Fatalf("post count %d", h.sim.PostCount("op"))
			}
		})
	}
}

func TestScriptsAndFaultFunc(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	h.sim.ScriptPOST("op", Reject(402, ""), NoFault())
	h.sim.ScriptPOST("", ServerErrorNoJob(503))
	var mu sync.Mutex
	var infos []RequestInfo
	h.sim.SetFaultFunc(func(ri RequestInfo) Fault {
		mu.Lock()
		infos = append(infos, ri)
		mu.Unlock()
		if ri.Kind == KindPost && ri.Attempt == 1 {
			return RateLimited(time.Second)
		}
		return NoFault()
	})
	want := []int{402, 202, 503, 202, 202}
	for i, w := range want {
		if got := h.post(t, "op", "m").status; got != w {
			t.Fatalf("POST %d: status %d, want %d", i+1, got, w)
		}
	}
	// The 4th POST was the first to reach the FaultFunc, but it is the 4th
	// attempt for op; only "other" sees Attempt 1.
	if got := h.post(t, "other", "m").status; got != 429 {
		t.Fatalf("other: %d", got)
	}
	id := h.sim.JobsForOperation("op")[0]
	h.sim.ScriptGET(id, RateLimited(time.Second))
	if got := h.do(t, "GET", "/api/v1/jobs/"+id, key, "").status; got != 429 {
		t.Fatalf("scripted GET: %d", got)
	}
	if got := h.do(t, "GET", "/api/v1/jobs/"+id, key, "").status; got != 200 {
		t.Fatalf("GET after script: %d", got)
	}
	mu.Lock()
	defer mu.Unlock()
	var posts []string
	for _, ri := range infos {
		posts = append(posts, fmt.Sprintf("%s:%s:%s:%d", ri.Kind, ri.OperationID, ri.JobID, ri.Attempt))
	}
	got := strings.Join(posts, ",")
	wantInfo := fmt.Sprintf("post:op::4,post:op::5,post:other::1,get::%s:2", id)
	if got != wantInfo {
		t.Fatalf("fault func saw %s, want %s", got, wantInfo)
	}
	if n := len(h.sim.JobsForOperation("op")); n != 3 {
		t.Fatalf("op jobs %d", n)
	}
}

func TestSubmissionFailureRefundOnlyOnGet(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{RefundSettleAfter: 2 * time.Second})
	h.sim.ScriptPOST("op", SubmissionFailed(502))
	env := h.post(t, "op", "m").envelope(t)
	h.clk.Advance(time.Second)
	if j := h.do(t, "GET", "/api/v1/jobs/"+env.JobID, key, "").job(t); j.Credits.RefundState != RefundPending || !j.SubmissionFailure {
		t.Fatalf("early GET: %+v", j)
	}
	h.clk.Advance(time.Hour)
	// A faulted GET does not observe the job.
	h.sim.ScriptGET(env.JobID, ServerErrorNoJob(503))
	h.do(t, "GET", "/api/v1/jobs/"+env.JobID, key, "")
	if truth, _ := h.sim.Job(env.JobID); truth.Credits.RefundState != RefundPending {
		t.Fatalf("advanced without an answered GET: %+v", truth)
	}
	j := h.do(t, "GET", "/api/v1/jobs/"+env.JobID, key, "").job(t)
	if j.Credits != (Credits{Reserved: 10, Charged: 10, Refunded: 10, RefundState: RefundSettled}) || !j.UpdatedAt.Equal(h.clk.Now()) {
		t.Fatalf("settled: %+v at %s", j, h.clk.Now())
	}
}

func TestReconcile(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{DefaultModel: ModelConfig{Price: 4, QueueFor: time.Minute, RunFor: time.Minute}})
	a := h.post(t, "a", "m").job(t)
	b := h.post(t, "b", "m").job(t)
	h.clk.Advance(3 * time.Minute) // b will be terminal; reconcile a new one
	c := h.post(t, "c", "m").job(t)
	r := h.do(t, "POST", "/admin/reconcile-jobs", key, fmt.Sprintf(`{"job_ids":[%q,%q,"job_x"],"fail":true}`, b.ID, c.ID))
	var out struct{ Reconciled []string }
	if err := json.Unmarshal(r.body, &out); err != nil || r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if len(out.Reconciled) != 1 || out.Reconciled[0] != c.ID {
		t.Fatalf("reconciled %v", out.Reconciled)
	}
	h.clk.Advance(24 * time.Hour)
	truth, _ := h.sim.Job(c.ID)
	if truth.State != StateFailed || !truth.Reconciled || truth.Credits != (Credits{Reserved: 4, Charged: 4, RefundState: RefundNone}) {
		t.Fatalf("reconciled truth %+v", truth)
	}
	j := h.do(t, "GET", "/api/v1/jobs/"+c.ID, key, "").job(t)
	if j.Error == nil || j.Error.Code != "reconciled" || j.Outputs != nil {
		t.Fatalf("%+v", j)
	}
	if got := h.sim.Reconcile(c.ID, a.ID); len(got) != 0 {
		t.Fatalf("reconciled terminal jobs %v", got)
	}
	empty := h.do(t, "POST", "/admin/reconcile-jobs", key, `{"job_ids":[],"fail":true}`)
	if string(bytes.TrimSpace(empty.body)) != `{"reconciled":[]}` {
		t.Fatalf("empty reconcile: %s", empty.body)
	}
}

func TestSignedFiles(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{SignedURLTTL: time.Minute, DefaultModel: ModelConfig{Price: 1, OutputCount: 2}})
	j := h.post(t, "a", "m").job(t)
	if len(j.Outputs) != 2 {
		t.Fatalf("%+v", j)
	}
	for i, o := range j.Outputs {
		path := strings.TrimPrefix(o.URL, h.srv.URL)
		r := h.do(t, "GET", path, "", "")
		if r.status != 200 || r.header.Get("Content-Type") != "image/png" || int64(len(r.body)) != o.SizeBytes || sha256Hex(r.body) != o.SHA256 {
			t.Fatalf("output %d: %d %d bytes", i, r.status, len(r.body))
		}
		if _, err := png.Decode(bytes.NewReader(r.body)); err != nil {
			t.Fatal(err)
		}
	}
	if j.Outputs[0].SHA256 == j.Outputs[1].SHA256 {
		t.Error("outputs are identical")
	}
	h.clk.Advance(time.Minute)
	r := h.do(t, "GET", strings.TrimPrefix(j.Outputs[0].URL, h.srv.URL), "", "")
	if r.status != http.StatusGone || r.envelope(t).Code != "url_expired" {
		t.Fatalf("expired: %d %s", r.status, r.body)
	}
	// A signature for index 0 does not open index 1.
	p := strings.Replace(strings.TrimPrefix(j.Outputs[0].URL, h.srv.URL), "/0?", "/1?", 1)
	if r := h.do(t, "GET", p, "", ""); r.status != http.StatusForbidden {
		t.Fatalf("cross-index: %d", r.status)
	}
}

func TestDeterministicSeed(t *testing.T) {
	t.Parallel()
	first := func(seed int64) wireJob {
		h := newHarness(t, Config{Seed: seed, DefaultModel: ModelConfig{Price: 1}})
		return h.post(t, "a", "m").job(t)
	}
	a, b, c := first(7), first(7), first(8)
	if a.ID != b.ID || a.Outputs[0].SHA256 != b.Outputs[0].SHA256 {
		t.Fatal("same seed gave different jobs")
	}
	if a.ID == c.ID || a.Outputs[0].SHA256 == c.Outputs[0].SHA256 {
		t.Fatal("different seeds gave the same job")
	}
}

func TestLongPollAndClose(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{DefaultModel: ModelConfig{Price: 1, QueueFor: time.Hour}})
	j := h.post(t, "a", "m").job(t)
	done := make(chan reply, 1)
	go func() { done <- h.do(t, "GET", "/api/v1/jobs/"+j.ID+"?wait=30", key, "") }()
	for {
		if _, ok := h.clk.NextWaiter(); ok {
			break
		}
		time.Sleep(time.Millisecond)
	}
	h.sim.Close()
	select {
	case r := <-done:
		if r.status != 200 || r.job(t).State != StateQueued {
			t.Fatalf("%d %s", r.status, r.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not release the long poll")
	}
}

func TestDelayedPostClientGivesUp(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	h.sim.ScriptPOST("op", DelayResponse(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", h.srv.URL+"/api/v1/jobs", strings.NewReader(`{"model":"m","input":{},"metadata":{"operation_id":"op"}}`))
	req.Header.Set("Authorization", "Bearer "+key)
	if resp, err := h.hc.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("expected a timeout")
	}
	if n := len(h.sim.JobsForOperation("op")); n != 1 {
		t.Fatalf("jobs %d", n)
	}
}

func TestRateLimitConfig(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{RateLimitPerSecond: 2})
	j := h.post(t, "a", "m").job(t)
	if r := h.do(t, "GET", "/api/v1/jobs/"+j.ID, key, ""); r.status != 200 {
		t.Fatal(r.status)
	}
	r := h.do(t, "GET", "/api/v1/jobs/"+j.ID, key, "")
	if r.status != 429 || r.header.Get("Retry-After") != "1" {
		t.Fatalf("%d %v", r.status, r.header)
	}
	h.clk.Advance(time.Second)
	if r := h.do(t, "GET", "/api/v1/jobs/"+j.ID, key, ""); r.status != 200 {
		t.Fatal(r.status)
	}
}

func TestStartLoopbackOnly(t *testing.T) {
	t.Parallel()
	sim := New(Config{APIKey: key}, clock.Real{})
	if _, _, err := sim.Start("0.0.0.0:0"); err == nil {
		t.Fatal("listened on a non-loopback address")
	}
	base, stop, err := sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get(base + "/api/v1/jobs/job_x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	stop()
	if _, err := http.Get(base + "/"); err == nil {
		t.Fatal("still serving after stop")
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	sim := New(Config{APIKey: key, DefaultModel: ModelConfig{Price: 1, QueueFor: 5 * time.Millisecond, RunFor: 10 * time.Millisecond}}, clock.Real{})
	srv := httptest.NewServer(sim)
	defer srv.Close()
	defer sim.Close()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				op := fmt.Sprintf("g%d-%d", g, i)
				req, _ := http.NewRequest("POST", srv.URL+"/api/v1/jobs", strings.NewReader(`{"model":"m","input":{},"metadata":{"operation_id":"`+op+`"}}`))
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				var j wireJob
				json.NewDecoder(resp.Body).Decode(&j)
				resp.Body.Close()
				req, _ = http.NewRequest("GET", srv.URL+"/api/v1/jobs/"+j.ID+"?wait=1", nil)
				req.Header.Set("Authorization", "Bearer "+key)
				if resp, err = http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
				sim.Jobs()
				sim.Reconcile(j.ID)
				sim.PostCount(op)
			}
		}()
	}
	wg.Wait()
	if sim.TotalPosts() != 80 || len(sim.Jobs()) != 80 || sim.TotalGets() != 80 {
		t.Fatalf("posts %d jobs %d gets %d", sim.TotalPosts(), len(sim.Jobs()), sim.TotalGets())
	}
}

// A duplicate is a second job for the first one's operation, charged like
// it, which the truth marks as Genace's own; the truth describes every
// output as the file URLs serve it.
func TestDuplicateAndOutputTruth(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{DefaultModel: ModelConfig{Price: 7, OutputCount: 2}})
	first := h.post(t, "op", "m").job(t)
	dup, ok := h.sim.Duplicate(first.ID)
	if !ok || dup == first.ID {
		t.Fatalf("Duplicate(%s) = %q, %t", first.ID, dup, ok)
	}
	if _, ok := h.sim.Duplicate("job_nope"); ok {
		t.Fatal("an unknown job was duplicated")
	}
	if ids := h.sim.JobsForOperation("op"); len(ids) != 2 || ids[0] != first.ID || ids[1] != dup {
		t.Fatalf("jobs of op %v, want [%s %s]", ids, first.ID, dup)
	}
	if h.sim.PostCount("op") != 1 {
		t.Fatalf("post count %d: a duplicate is no POST of the client's", h.sim.PostCount("op"))
	}
	orig, _ := h.sim.Job(first.ID)
	d, _ := h.sim.Job(dup)
	if orig.DuplicateOf != "" || d.DuplicateOf != first.ID || d.Metadata["operation_id"] != "op" || d.Model != "m" {
		t.Fatalf("truth: first %+v, duplicate %+v", orig, d)
	}
	h.clk.Advance(time.Minute)
	wj := h.do(t, "GET", "/api/v1/jobs/"+dup, key, "").job(t)
	if wj.State != StateSucceeded || wj.Credits.Charged != 7 || len(wj.Outputs) != 2 {
		t.Fatalf("duplicate after a minute: %+v", wj)
	}
	d, _ = h.sim.Job(dup)
	for i, o := range wj.Outputs {
		if d.Outputs[i] != (OutputTruth{SizeBytes: o.SizeBytes, SHA256: o.SHA256}) {
			t.Fatalf("output %d: truth %+v, served %+v", i, d.Outputs[i], o)
		}
	}
	// A GET answered 408 changes nothing.
	h.sim.ScriptGET(dup, TimeoutAfterCreate())
	if r := h.do(t, "GET", "/api/v1/jobs/"+dup, key, ""); r.status != 408 || r.envelope(t).Code != "request_timeout" {
		t.Fatalf("scripted GET: %d %q", r.status, r.body)
	}
	if n := len(h.sim.Jobs()); n != 2 {
		t.Fatalf("%d jobs after a 408 GET", n)
	}
}

// TestStopWaitsForHandlers: stop returns only after every request in
// flight has left the simulator, so nothing it calls (OnChange, the
// logger) runs after the run that started it has ended. Before, stop
// closed the connections and returned at once; the local run's
// OnChange then wrote to its caller's stderr while the caller read it
// (a data race CI caught in TestLocalInterrupted).
func TestStopWaitsForHandlers(t *testing.T) {
	t.Parallel()
	sim := New(Config{APIKey: key, DefaultModel: ModelConfig{Price: 1}}, clock.Real{})
	base, stop, err := sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{})
	var finished atomic.Bool
	var once sync.Once
	sim.OnChange(func() {
		once.Do(func() { close(entered) })
		time.Sleep(300 * time.Millisecond)
		finished.Store(true)
	})
	go func() {
		req, _ := http.NewRequest("POST", base+"/api/v1/jobs", strings.NewReader(`{"model":"m","input":{"p":1},"metadata":{"operation_id":"a"}}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the POST never reached OnChange")
	}
	stop()
	if !finished.Load() {
		t.Fatal("stop returned while a handler was still running")
	}
}
