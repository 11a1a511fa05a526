package genace_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/genace"
)

var models = map[string]genacesim.ModelConfig{
	"flux-pro-2":   {Price: 12, QueueFor: 5 * time.Second, RunFor: 60 * time.Second, OutputCount: 2},
	"always-fails": {Price: 7, QueueFor: time.Second, RunFor: 4 * time.Second, Outcome: genacesim.OutcomeFail},
}

func TestSubmitOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		fault       *genacesim.Fault
		key         string // "" = the right key
		timeout     time.Duration
		want        genace.Outcome
		wantStatus  int
		wantCode    string
		wantJobs    int // jobs the simulator really created
		wantRetry   time.Duration
		wantTimeout bool
	}{
		{name: "202 accepted", want: genace.OutcomeAccepted, wantStatus: 202, wantJobs: 1},
		{name: "502 with job id", fault: ptr(genacesim.SubmissionFailed(502)), want: genace.OutcomeSubmissionFailed, wantStatus: 502, wantCode: "submission_failed", wantJobs: 1},
		{name: "504 with job id", fault: ptr(genacesim.Status5xx(504, true)), want: genace.OutcomeSubmissionFailed, wantStatus: 504, wantCode: "submission_failed", wantJobs: 1},
		{name: "400 rejected", fault: ptr(genacesim.Reject(400, "")), want: genace.OutcomeRejected, wantStatus: 400, wantCode: "invalid_request"},
		{name: "422 rejected", fault: ptr(genacesim.Reject(422, "")), want: genace.OutcomeRejected, wantStatus: 422, wantCode: "invalid_request"},
		{name: "402 rejected", fault: ptr(genacesim.Reject(402, "")), want: genace.OutcomeRejected, wantStatus: 402, wantCode: "insufficient_credits"},
		// 401 and 403 refuse our key, not the request: a configuration
		// error that the same request may pass once the key is fixed.
		{name: "403 forbidden", fault: ptr(genacesim.Reject(403, "")), want: genace.OutcomeUnauthorized, wantStatus: 403, wantCode: "forbidden"},
		{name: "409 rejected", fault: ptr(genacesim.Reject(409, "conflict")), want: genace.OutcomeRejected, wantStatus: 409, wantCode: "conflict"},
		{name: "401 wrong key", key: "sk-wrong", want: genace.OutcomeUnauthorized, wantStatus: 401, wantCode: "unauthorized"},
		// 408 is not among the contract's "nothing created" answers.
		{name: "408 unknown", fault: ptr(genacesim.Reject(408, "request_timeout")), want: genace.OutcomeUnknown, wantStatus: 408, wantCode: "request_timeout"},
		{name: "429 retry-after", fault: ptr(genacesim.RateLimited(3 * time.Second)), want: genace.OutcomeRateLimited, wantStatus: 429, wantCode: "rate_limited", wantRetry: 3 * time.Second},
		{name: "503 without job id", fault: ptr(genacesim.ServerErrorNoJob(503)), want: genace.OutcomeUnknown, wantStatus: 503, wantCode: "upstream_unavailable"},
		{name: "500 job created, no id", fault: ptr(genacesim.ServerErrorJobCreated(500)), want: genace.OutcomeUnknown, wantStatus: 500, wantCode: "internal", wantJobs: 1},
		{name: "accept then drop", fault: ptr(genacesim.AcceptThenDrop()), want: genace.OutcomeUnknown, wantJobs: 1},
		{name: "delay past timeout", fault: ptr(genacesim.DelayResponse(time.Hour)), timeout: 200 * time.Millisecond, want: genace.OutcomeUnknown, wantJobs: 1, wantTimeout: true},
		{name: "garbage 202 body", fault: ptr(genacesim.GarbageBody()), want: genace.OutcomeUnknown, wantStatus: 202, wantJobs: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, genacesim.Config{Models: models})
			c := e.client
			if tc.key != "" {
				var err error
				if c, err = genace.New(e.srv.URL, tc.key, e.hc); err != nil {
					t.Fatal(err)
				}
			}
			if tc.fault != nil {
				e.sim.ScriptPOST("op-1", *tc.fault)
			}
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 5 * time.Second
			}
			res := c.Submit(context.Background(), req("op-1"), timeout)

			if res.Outcome != tc.want {
				t.Fatalf("outcome = %s, want %s (err %v)", res.Outcome, tc.want, res.Err)
			}
			if res.StatusCode != tc.wantStatus {
				t.Errorf("status = %d, want %d", res.StatusCode, tc.wantStatus)
			}
			if res.ErrorCode != tc.wantCode {
				t.Errorf("error code = %q, want %q", res.ErrorCode, tc.wantCode)
			}
			if res.RetryAfter != tc.wantRetry {
				t.Errorf("retry after = %s, want %s", res.RetryAfter, tc.wantRetry)
			}
			if (res.Err == nil) != (tc.want == genace.OutcomeAccepted) {
				t.Errorf("err = %v for outcome %s", res.Err, res.Outcome)
			}
			if !res.RequestSent {
				t.Error("RequestSent = false after reaching the server")
			}
			var te *genace.TransportError
			if got := errors.As(res.Err, &te) && te.Timeout; got != tc.wantTimeout {
				t.Errorf("timeout transport error = %v, want %v (err %v)", got, tc.wantTimeout, res.Err)
			}
			// Exactly one POST reached Genace: the client never retries.
			if n := e.sim.PostCount("op-1"); n != 1 {
				t.Errorf("simulator saw %d POSTs for op-1, want 1", n)
			}
			if n := e.sim.TotalPosts(); n != 1 {
				t.Errorf("simulator saw %d POSTs in total, want 1", n)
			}
			ids := e.sim.JobsForOperation("op-1")
			if len(ids) != tc.wantJobs {
				t.Fatalf("simulator created %d jobs, want %d", len(ids), tc.wantJobs)
			}
			switch tc.want {
			case genace.OutcomeAccepted:
				if res.Job == nil || res.JobID != ids[0] || res.Job.ID != ids[0] {
					t.Fatalf("job %+v id %q, want %q", res.Job, res.JobID, ids[0])
				}
				if res.Job.State != genace.RemoteQueued || res.Job.Credits.Reserved != 12 || res.Job.Metadata["operation_id"] != "op-1" {
					t.Errorf("accepted job = %+v", res.Job)
				}
			case genace.OutcomeSubmissionFailed:
				if res.JobID != ids[0] {
					t.Fatalf("job id %q, want %q", res.JobID, ids[0])
				}
				truth, _ := e.sim.Job(ids[0])
				if !truth.SubmissionFailure || truth.State != genacesim.StateFailed || truth.Credits.RefundState != genacesim.RefundPending {
					t.Errorf("truth = %+v", truth)
				}
			case genace.OutcomeRateLimited:
				if !errors.Is(res.Err, genace.ErrRateLimited) {
					t.Errorf("err %v is not ErrRateLimited", res.Err)
				}
			}
			if got := errors.Is(res.Err, genace.ErrUnauthorized); got != (tc.want == genace.OutcomeUnauthorized) {
				t.Errorf("errors.Is(%v, ErrUnauthorized) = %v for outcome %s", res.Err, got, res.Outcome)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestSubmitRejectedLocally(t *testing.T) {
	t.Parallel()
	e := newEnv(t, genacesim.Config{})
	bad := []genace.SubmitRequest{
		{OperationID: "", Model: "m", Input: []byte(`{}`)},
		{OperationID: "op", Model: "", Input: []byte(`{}`)},
		{OperationID: "op", Model: "m", Input: []byte(`[1]`)},
		{OperationID: "op", Model: "m", Input: []byte(`{"a":`)},
		{OperationID: "op", Model: "m"},
	}
	for i, r := range bad {
		res := e.client.Submit(context.Background(), r, time.Second)
		if res.Outcome != genace.OutcomeRejected || res.StatusCode != 0 || res.RequestSent || !errors.Is(res.Err, genace.ErrInvalidArgument) {
			t.Errorf("case %d: %+v", i, res)
		}
	}
	if res := e.client.Submit(context.Background(), req("op"), 0); res.Outcome != genace.OutcomeRejected {
		t.Errorf("zero timeout: %+v", res)
	}
	if n := e.sim.TotalPosts(); n != 0 {
		t.Errorf("%d POSTs reached the simulator", n)
	}
}

func TestSubmitConnectionRefusedIsUnknownButNotSent(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err := genace.New("http://"+addr, testKey, &http.Client{Transport: &http.Transport{}})
	if err != nil {
		t.Fatal(err)
	}
	res := c.Submit(context.Background(), req("op"), 2*time.Second)
	if res.Outcome != genace.OutcomeUnknown || res.RequestSent {
		t.Fatalf("got %+v", res)
	}
	if !genace.Retryable(res.Err) {
		t.Errorf("connection refused should be transient: %v", res.Err)
	}
}

func TestSubmitConfiguredRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, genacesim.Config{RateLimitPerSecond: 1})
	if res := e.client.Submit(context.Background(), req("a"), time.Second); res.Outcome != genace.OutcomeAccepted {
		t.Fatalf("first: %+v", res)
	}
	res := e.client.Submit(context.Background(), req("b"), time.Second)
	if res.Outcome != genace.OutcomeRateLimited || res.RetryAfter != time.Second {
		t.Fatalf("second: %+v", res)
	}
	if n := len(e.sim.JobsForOperation("b")); n != 0 {
		t.Fatalf("rate-limited POST created %d jobs", n)
	}
	e.clk.Advance(time.Second)
	if res := e.client.Submit(context.Background(), req("c"), time.Second); res.Outcome != genace.OutcomeAccepted {
		t.Fatalf("next second: %+v", res)
	}
}

func TestRetryAfterParsing(t *testing.T) {
	t.Parallel()
	// A 429 from a server whose Retry-After is missing or malformed falls
	// back to 1s.
	for _, h := range []string{"", "soon", "-3", "Wed, 21 Oct 2015 07:28:00 GMT"} {
		srv := newRawServer(t, func(w http.ResponseWriter, r *http.Request) {
			if h != "" {
				w.Header().Set("Retry-After", h)
			}
			w.WriteHeader(http.StatusTooManyRequests)
		})
		c, _ := genace.New(srv, testKey, nil)
		res := c.Submit(context.Background(), req("op"), time.Second)
		if res.Outcome != genace.OutcomeRateLimited || res.RetryAfter != time.Second {
			t.Errorf("Retry-After %q: %+v", h, res)
		}
	}
}

func TestLongPollReturnsEarlyOnStateChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, genacesim.Config{Models: models})
	res := e.client.Submit(context.Background(), req("op"), time.Second)
	if res.Outcome != genace.OutcomeAccepted {
		t.Fatal(res.Err)
	}
	type got struct {
		j   *genace.Job
		err error
	}
	ch := make(chan got, 1)
	go func() {
		j, err := e.client.Get(context.Background(), res.JobID, 30*time.Second, 35*time.Second)
		ch <- got{j, err}
	}()
	waitForWaiter(t, e.clk)
	e.clk.Advance(6 * time.Second) // queued -> running at +5s, well before the 30s wait
	select {
	case g := <-ch:
		if g.err != nil {
			t.Fatal(g.err)
		}
		if g.j.State != genace.RemoteRunning || g.j.StartedAt == nil || !g.j.StartedAt.Equal(t0.Add(5*time.Second)) {
			t.Fatalf("job = %+v", g.j)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long poll did not return after the state change")
	}
}

func TestLongPollReturnsAtWaitLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, genacesim.Config{DefaultModel: genacesim.ModelConfig{Price: 1, QueueFor: time.Hour, RunFor: time.Hour}})
	res := e.client.Submit(context.Background(), req("op"), time.Second)
	if res.Outcome != genace.OutcomeAccepted {
		t.Fatal(res.Err)
	}
	ch := make(chan *genace.Job, 1)
	go func() {
		j, err := e.client.Get(context.Background(), res.JobID, 30*time.Second, 35*time.Second)
		if err != nil {
			t.Error(err)
		}
		ch <- j
	}()
	waitForWaiter(t, e.clk)
	e.clk.Advance(29 * time.Second)
	select {
	case <-ch:
		t.Fatal("long poll returned before its wait elapsed")
	case <-time.After(50 * time.Millisecond):
	}
	e.clk.Advance(time.Second)
	select {
	case j := <-ch:
		if j == nil || j.State != genace.RemoteQueued {
			t.Fatalf("job = %+v", j)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long poll did not return at the wait limit")
	}
}

func TestLongPollRealClock(t *testing.T) {
	t.Parallel()
	e := newEnvClock(t, genacesim.Config{DefaultModel: genacesim.ModelConfig{Price: 1, QueueFor: time.Hour}}, clock.Real{}, nil)
	res := e.client.Submit(context.Background(), req("op"), time.Second)
	if res.Outcome != genace.OutcomeAccepted {
		t.Fatal(res.Err)
	}
	start := time.Now()
	j, err := e.client.Get(context.Background(), res.JobID, time.Second, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 900*time.Millisecond || j.State != genace.RemoteQueued {
		t.Fatalf("returned after %s with %s", el, j.State)
	}
	// wait=0 answers at once.
	start = time.Now()
	if _, err := e.client.Get(context.Background(), res.JobID, 0, time.Second); err != nil || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("immediate get: %v after %s", err, time.Since(start))
	}
}

func TestLongPollWokenByReconcile(t *testing.T) {
	t.Parallel()
	e := newEnv(t, genacesim.Config{Models: models})
	res := e.client.Submit(context.Background(), req("op"), time.Second)
	ch := make(chan *genace.Job, 1)
	go func() {
		j, err := e.client.Get(context.Background(), res.JobID, 30*time.Second, 35*time.Second)
		if err != nil {
			t.Error(err)
		}
		ch <- j
	}()
	waitForWaiter(t, e.clk)
	if got := e.sim.Reconcile(res.JobID); len(got) != 1 {
		t.Fatalf("reconciled %v", got)
	}
	select {
	case j := <-ch:
		if j == nil || j.State != genace.RemoteFailed || j.Error == nil || j.Error.Code != "reconciled" {
			t.Fatalf("job = %+v", j)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reconcile did not wake the long poll")
	}
}

func TestSubmissionFailureRefundAdvancesOnlyOnGet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, genacesim.Config{Models: models, RefundSettleAfter: 2 * time.Second})
	e.sim.ScriptPOST("op", genacesim.SubmissionFailed(502))
	res := e.client.Submit(context.Background(), req("op"), time.Second)
	if res.Outcome != genace.OutcomeSubmissionFailed {
		t.Fatalf("%+v", res)
	}
	ctx := context.Background()
	j, err := e.client.Get(ctx, res.JobID, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != genace.RemoteFailed || !j.SubmissionFailure || j.Credits.RefundState != genace.RefundPending ||
		j.Credits.Reserved != 12 || j.Credits.Charged != 12 || j.Credits.Refunded != 0 {
		t.Fatalf("before settle: %+v", j)
	}
	e.clk.Advance(3 * time.Second)
	// Time alone does not settle it: ground truth still pending.
	if truth, _ := e.sim.Job(res.JobID); truth.Credits.RefundState != genacesim.RefundPending {
		t.Fatalf("refund advanced without a GET: %+v", truth)
	}
	j, err = e.client.Get(ctx, res.JobID, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if j.Credits.RefundState != genace.RefundSettled || j.Credits.Refunded != j.Credits.Charged {
		t.Fatalf("after GET: %+v", j.Credits)
	}
	if truth, _ := e.sim.Job(res.JobID); truth.Credits.RefundState != genacesim.RefundSettled {
		t.Fatalf("truth after GET: %+v", truth)
	}
}

func TestSubmissionFailureLongPollSettles(t *testing.T) {
	t.Parallel()
	e := newEnv(t, genacesim.Config{RefundSettleAfter: 2 * time.Second})
	e.sim.ScriptPOST("op", genacesim.SubmissionFailed(503))
	res := e.client.Submit(context.Background(), req("op"), time.Second)
	ch := make(chan *genace.Job, 1)
	go func() {
		j, _ := e.client.Get(context.Background(), res.JobID, 30*time.Second, 35*time.Second)
		ch <- j
	}()
	waitForWaiter(t, e.clk)
	e.clk.Advance(2 * time.Second)
	select {
	case j := <-ch:
		if j == nil || j.Credits.RefundState != genace.RefundSettled {
			t.Fatalf("job = %+v", j)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long poll did not observe the refund")
	}
}

func TestRenderFailureRefundsAutomatically(t *testing.T) {
	t.Parallel()
	e := newEnv(t, genacesim.Config{Models: models, RefundSettleAfter: 2 * time.Second})
	r := req("op")
	r.Model = "always-fails"
	res := e.client.Submit(context.Background(), r, time.Second)
	ctx := context.Background()
	e.clk.Advance(5 * time.Second) // queue 1s + run 4s
	j, err := e.client.Get(ctx, res.JobID, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != genace.RemoteFailed || j.SubmissionFailure || j.Credits.Charged != 7 || j.Credits.RefundState != genace.RefundPending {
		t.Fatalf("at failure: %+v", j)
	}
	e.clk.Advance(2 * time.Second)
	j, _ = e.client.Get(ctx, res.JobID, 0, time.Second)
	if j.Credits.RefundState != genace.RefundSettled || j.Credits.Refunded != 7 {
		t.Fatalf("after settle: %+v", j.Credits)
	}
}

func TestReconcileJobsAdminEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, genacesim.Config{Models: models})
	ctx := context.Background()
	stuck := e.client.Submit(ctx, req("stuck"), time.Second)
	done := e.client.Submit(ctx, req("done"), time.Second)
	e.clk.Advance(10 * time.Second) // both running
	body := `{"job_ids":["` + stuck.JobID + `","job_unknown"],"fail":true}`
	hreq, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/admin/reconcile-jobs", strings.NewReader(body))
	hreq.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := e.hc.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Reconciled []string }
	if err := jsonDecode(resp, &out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d err %v", resp.StatusCode, err)
	}
	if len(out.Reconciled) != 1 || out.Reconciled[0] != stuck.JobID {
		t.Fatalf("reconciled %v", out.Reconciled)
	}
	j, err := e.client.Get(ctx, stuck.JobID, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != genace.RemoteFailed || j.Error == nil || j.Error.Code != "reconciled" ||
		j.Credits.Charged != 12 || j.Credits.RefundState != genace.RefundNone || j.Credits.Refunded != 0 {
		t.Fatalf("reconciled job: %+v %+v", j, j.Credits)
	}
	e.clk.Advance(24 * time.Hour) // no refund, ever
	j, _ = e.client.Get(ctx, stuck.JobID, 0, time.Second)
	if j.State != genace.RemoteFailed || j.Credits.RefundState != genace.RefundNone {
		t.Fatalf("a day later: %+v", j.Credits)
	}
	if truth, _ := e.sim.Job(stuck.JobID); !truth.Reconciled {
		t.Error("truth not marked reconciled")
	}
	// The untouched job went on to succeed.
	if j, _ := e.client.Get(ctx, done.JobID, 0, time.Second); j.State != genace.RemoteSucceeded {
		t.Errorf("other job: %s", j.State)
	}
}

func TestGetErrorsAndRetryable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		faults    []genacesim.Fault
		id        string // "" = the submitted job
		key       string
		timeout   time.Duration
		is        error
		retryable bool
		status    int
		// noKeepAlive stops net/http from replaying an idempotent GET on
		// a fresh connection after a drop, so one fault is one request.
		noKeepAlive bool
	}{
		{name: "404", id: "job_nope", is: genace.ErrNotFound, status: 404},
		// Our key refused: retryable once the configuration is fixed.
		{name: "401", key: "sk-wrong", is: genace.ErrUnauthorized, retryable: true, status: 401},
		{name: "403", faults: []genacesim.Fault{genacesim.Reject(403, "")}, is: genace.ErrUnauthorized, retryable: true, status: 403},
		{name: "400", faults: []genacesim.Fault{genacesim.Reject(400, "")}, status: 400},
		{name: "429", faults: []genacesim.Fault{genacesim.RateLimited(2 * time.Second)}, is: genace.ErrRateLimited, retryable: true, status: 429},
		{name: "500", faults: []genacesim.Fault{genacesim.ServerErrorNoJob(500)}, retryable: true, status: 500},
		{name: "503", faults: []genacesim.Fault{genacesim.ServerErrorNoJob(503)}, retryable: true, status: 503},
		{name: "garbage 200", faults: []genacesim.Fault{genacesim.GarbageBody()}, retryable: true},
		{name: "reset", faults: []genacesim.Fault{genacesim.AcceptThenDrop()}, noKeepAlive: true, retryable: true},
		{name: "timeout", faults: []genacesim.Fault{genacesim.DelayResponse(time.Hour)}, timeout: 200 * time.Millisecond, is: context.DeadlineExceeded, retryable: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, genacesim.Config{})
			res := e.client.Submit(context.Background(), req("op"), time.Second)
			id := tc.id
			if id == "" {
				id = res.JobID
			}
			e.sim.ScriptGET(id, tc.faults...)
			c := e.client
			if tc.key != "" {
				c, _ = genace.New(e.srv.URL, tc.key, e.hc)
			}
			if tc.noKeepAlive {
				c, _ = genace.New(e.srv.URL, testKey, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}})
			}
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 5 * time.Second
			}
			j, err := c.Get(context.Background(), id, 0, timeout)
			if err == nil {
				t.Fatalf("no error, job %+v", j)
			}
			if !strings.HasPrefix(err.Error(), "genace get "+id+": ") {
				t.Errorf("error lacks context: %v", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%v is not %v", err, tc.is)
			}
			if got := genace.Retryable(err); got != tc.retryable {
				t.Errorf("Retryable(%v) = %v, want %v", err, got, tc.retryable)
			}
			var ae *genace.APIError
			if tc.status != 0 && (!errors.As(err, &ae) || ae.StatusCode != tc.status) {
				t.Errorf("err %v: want APIError status %d", err, tc.status)
			}
			if tc.status == 429 && ae.RetryAfter != 2*time.Second {
				t.Errorf("retry after %s", ae.RetryAfter)
			}
			if n := e.sim.GetCount(id); n != 1 {
				t.Errorf("simulator saw %d GETs, want 1", n)
			}
		})
	}
}

func TestGetArgumentChecks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, genacesim.Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		id            string
		wait, timeout time.Duration
	}{
		{"job_1", 10 * time.Second, 10 * time.Second}, // timeout must exceed wait
		{"job_1", 31 * time.Second, time.Minute},
		{"job_1", -time.Second, time.Minute},
		{"", 0, time.Second},
		{"job 1", 0, time.Second},
	} {
		_, err := e.client.Get(ctx, tc.id, tc.wait, tc.timeout)
		if !errors.Is(err, genace.ErrInvalidArgument) || genace.Retryable(err) {
			t.Errorf("%+v: err %v", tc, err)
		}
	}
	if n := e.sim.TotalGets(); n != 0 {
		t.Errorf("%d GETs sent", n)
	}
}

func TestGetWaitRoundsDownToSeconds(t *testing.T) {
	t.Parallel()
	var gotQuery string
	srv := newRawServer(t, func(w http.ResponseWriter, r *http.Request) {
		gotQuery = r.URL.RawQuery
		if r.Header.Get("Authorization") != "Bearer "+testKey || r.Header.Get("Accept") != "application/json" {
			w.WriteHeader(401)
			return
		}
		w.Write([]byte(`{"id":"job_1","state":"queued","credits":{"refund_state":"none"}}`))
	})
	c, _ := genace.New(srv, testKey, nil)
	if _, err := c.Get(context.Background(), "job_1", 2900*time.Millisecond, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if gotQuery != "wait=2" {
		t.Errorf("query %q", gotQuery)
	}
	if _, err := c.Get(context.Background(), "job_1", 0, 5*time.Second); err != nil || gotQuery != "" {
		t.Errorf("wait 0: query %q err %v", gotQuery, err)
	}
}

func TestGetRejectsMismatchedOrOversizedBodies(t *testing.T) {
	t.Parallel()
	big := strings.Repeat(" ", genace.MaxBodyBytes)
	for name, body := range map[string]string{
		"other id":      `{"id":"job_2","state":"queued","credits":{"refund_state":"none"}}`,
		"unknown state": `{"id":"job_1","state":"paused","credits":{"refund_state":"none"}}`,
		"oversized":     `{"id":"job_1","state":"queued","credits":{"refund_state":"none"}}` + big,
	} {
		srv := newRawServer(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(body)) })
		c, _ := genace.New(srv, testKey, nil)
		_, err := c.Get(context.Background(), "job_1", 0, 5*time.Second)
		if err == nil || !genace.Retryable(err) {
			t.Errorf("%s: err %v", name, err)
		}
		// Each repeats on every read: contract drift, which worker.Judge
		// parks after a few tries rather than retrying for hours.
		var de *genace.DecodeError
		if !errors.As(err, &de) && !errors.Is(err, genace.ErrBodyTooLarge) {
			t.Errorf("%s: err %v is neither a DecodeError nor ErrBodyTooLarge", name, err)
		}
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, key string }{
		{"", testKey},
		{"::nope", testKey},
		{"ftp://host", testKey},
		{"http://user:" + testKey + "@host", testKey},
		{"http://host?x=1", testKey},
		{"http://host", ""},
		{"http://host", "a b"},
	} {
		c, err := genace.New(tc.url, tc.key, nil)
		if err == nil || c != nil {
			t.Errorf("New(%q) accepted", tc.url)
			continue
		}
		if strings.Contains(err.Error(), testKey) {
			t.Errorf("New error leaks key: %v", err)
		}
	}
	if _, err := genace.New("http://127.0.0.1:1/prefix/", testKey, nil); err != nil {
		t.Error(err)
	}
}

func TestRetryableTable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{&genace.APIError{Op: "get", StatusCode: 502}, true},
		{&genace.APIError{Op: "get", StatusCode: 429}, true},
		{&genace.APIError{Op: "get", StatusCode: 408}, true},
		{&genace.APIError{Op: "get", StatusCode: 404}, false},
		{&genace.APIError{Op: "get", StatusCode: 401}, true},
		{&genace.APIError{Op: "get", StatusCode: 403}, true},
		{&genace.APIError{Op: "submit", StatusCode: 401}, true},
		{&genace.APIError{Op: "download", StatusCode: 403}, false},
		{&genace.APIError{Op: "download", StatusCode: 401}, false},
		{&genace.APIError{Op: "get", StatusCode: 400}, false},
		{&genace.APIError{Op: "download", StatusCode: 410}, false},
		{&genace.TransportError{Op: "get", Timeout: true}, true},
		{&genace.TransportError{Op: "get", Canceled: true}, false},
		{context.DeadlineExceeded, true},
		{context.Canceled, false},
		{errors.New("mystery"), false},
	} {
		if got := genace.Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// A 404 that does not carry Genace's not_found code (a proxy's or load
// balancer's page, a wrong base URL) does not say Genace lacks the job:
// it must not read as ErrNotFound, which parks operations for review one
// by one. It stays a permanent failure of the call.
func TestBare404IsNotAnUnknownJob(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	c, err := genace.New(srv.URL, testKey, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(context.Background(), "job_k1r6d16mvwf7b0knzc68", 0, time.Second)
	var ae *genace.APIError
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound {
		t.Fatalf("err %v, want an APIError 404", err)
	}
	if errors.Is(err, genace.ErrNotFound) {
		t.Errorf("%v reads as ErrNotFound without Genace's not_found code", err)
	}
	if genace.Retryable(err) {
		t.Errorf("Retryable(%v) = true", err)
	}
}
