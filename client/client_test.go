package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/genjobs/genjobs/client"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/intake"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store"
)

const region = "eu-west-1"

var creds = aws.Credentials{AccessKeyID: "AKIDCLIENTTEST", SecretAccessKey: "client-test-secret"}

// verifySigV4 is the function URL's IAM check as far as a test can make
// it: the request is signed for lambda in region with creds, over the
// headers it names and the body it carries (x-amz-content-sha256), within
// five minutes. It re-signs a copy with the same key and compares.
func verifySigV4(c aws.Credentials) intake.Identity {
	return func(r *http.Request) (string, error) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return "", err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sum := sha256.Sum256(body)
		hash := hex.EncodeToString(sum[:])
		auth := r.Header.Get("Authorization")
		at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
		if err != nil || time.Since(at).Abs() > 5*time.Minute {
			return "", errors.New("no fresh X-Amz-Date")
		}
		if r.Header.Get("X-Amz-Content-Sha256") != hash {
			return "", errors.New("x-amz-content-sha256 is not the body's")
		}
		_, signed, _ := strings.Cut(auth, "SignedHeaders=")
		signed, _, _ = strings.Cut(signed, ",")
		if !strings.Contains(";"+signed+";", ";host;") || !strings.Contains(signed, "x-amz-content-sha256") {
			return "", fmt.Errorf("signed headers %q leave out the host or the payload hash", signed)
		}
		cp := r.Clone(context.Background())
		cp.Header = http.Header{}
		for _, h := range strings.Split(signed, ";") {
			if vs := r.Header.Values(h); len(vs) > 0 {
				cp.Header[http.CanonicalHeaderKey(h)] = vs
			}
		}
		cp.URL.Host = r.Host
		if err := v4.NewSigner().SignHTTP(context.Background(), c, cp, hash, "lambda", region, at); err != nil {
			return "", err
		}
		if want := cp.Header.Get("Authorization"); auth == "" || auth != want {
			return "", fmt.Errorf("signature mismatch:\n got %s\nwant %s", auth, want)
		}
		return "arn:aws:iam::123456789012:user/" + c.AccessKeyID, nil
	}
}

type env struct {
	st  store.Store
	out *handlertest.Outbox
	srv *httptest.Server
}

// newEnv serves the real intake handler on the real embedded store.
func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{st: handlertest.OpenStore(t, "bolt"), out: &handlertest.Outbox{}}
	svc, err := intake.New(intake.Deps{Store: e.st, Sender: e.out, Catalog: intake.Catalog{"flux-pro-2": 12}})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(svc.Handler(verifySigV4(creds)))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *env) client(t *testing.T, opts ...client.Option) *client.Client {
	t.Helper()
	opts = append([]client.Option{client.WithRegion(region), client.WithRetry(5, time.Millisecond, 5*time.Millisecond),
		client.WithCredentials(credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, ""))}, opts...)
	c, err := client.New(e.srv.URL+"/", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func request(id string) client.CreateRequest {
	return client.CreateRequest{OperationID: id, UserID: "user-1", Model: "flux-pro-2", Input: json.RawMessage(`{"prompt":"a lighthouse"}`), BudgetCredits: 50}
}

// loseAnswers lets the server handle the first n creates and then loses
// their answers, as a dropped connection would.
type loseAnswers struct{ n atomic.Int32 }

func (l *loseAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && r.Method == http.MethodPost && r.URL.Path == "/v1/operations" && l.n.Add(-1) >= 0 {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errors.New("connection reset by peer")
	}
	return resp, err
}

func TestCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name        string
		lost        int32
		wantCreated bool
	}{
		{"answered", 0, true},
		{"answer lost once", 1, false},
		{"answer lost three times", 3, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			lose := &loseAnswers{}
			lose.n.Store(c.lost)
			cl := e.client(t, client.WithHTTPClient(&http.Client{Transport: lose}))
			st, created, err := cl.Create(ctx, request("op-1"))
			if err != nil || created != c.wantCreated || st.OperationID != "op-1" || st.Revision != 1 || st.Phase != client.PhasePrepared || st.Terminal {
				t.Fatalf("create: %+v created %t, %v", st, created, err)
			}
			if n := e.out.Len(); n != 1 {
				t.Fatalf("%d dispatches, want 1", n)
			}
			// The same create later is the same operation.
			if again, created, err := cl.Create(ctx, request("op-1")); err != nil || created || again.Revision != 1 || e.out.Len() != 1 {
				t.Fatalf("again: %+v %t %v, %d dispatches", again, created, err, e.out.Len())
			}
		})
	}
}

func TestCreateGivesUpAfterItsAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	lose := &loseAnswers{}
	lose.n.Store(10)
	_, _, err := e.client(t, client.WithHTTPClient(&http.Client{Transport: lose}), client.WithRetry(3, time.Millisecond, time.Millisecond)).Create(context.Background(), request("op-1"))
	if err == nil || !strings.Contains(err.Error(), "connection reset") || lose.n.Load() != 7 {
		t.Fatalf("err %v after %d attempts", err, 10-lose.n.Load())
	}
}

func TestRefusalsAreTyped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	cl := e.client(t)
	if _, _, err := cl.Create(ctx, request("op-1")); err != nil {
		t.Fatal(err)
	}
	other := request("op-1")
	other.BudgetCredits = 60
	noUser := request("op-2")
	noUser.UserID = "a@b.example"
	for _, c := range []struct {
		name     string
		call     func() error
		sentinel error
		status   int
		code     string
		field    string
	}{
		{"conflict", func() error { _, _, err := cl.Create(ctx, other); return err }, client.ErrConflict, 409, client.CodeOperationIDConflict, "operation_id"},
		{"bad field", func() error { _, _, err := cl.Create(ctx, noUser); return err }, client.ErrBadRequest, 400, client.CodeInvalidField, "user_id"},
		{"not found", func() error { _, err := cl.Get(ctx, "op-9"); return err }, client.ErrNotFound, 404, client.CodeNotFound, ""},
		{"bad id", func() error { _, err := cl.Get(ctx, "op 9"); return err }, client.ErrBadRequest, 400, client.CodeInvalidField, "operation_id"},
		{"stale change", func() error { _, err := cl.Change(ctx, "op-1", 7, other); return err }, client.ErrPreconditionFailed, 412, client.CodeRevisionMismatch, "If-Match"},
		{"no If-Match", func() error { _, err := cl.Cancel(ctx, "op-1", 0); return err }, client.ErrPreconditionFailed, 428, client.CodePreconditionRequired, "If-Match"},
	} {
		err := c.call()
		var ae *client.Error
		if !errors.As(err, &ae) || !errors.Is(err, c.sentinel) || ae.Status != c.status || ae.Code != c.code || ae.Field != c.field {
			t.Errorf("%s: %v (%#v), want %d %s %s", c.name, err, ae, c.status, c.code, c.field)
		}
		for _, s := range []error{client.ErrBadRequest, client.ErrNotFound, client.ErrConflict, client.ErrPreconditionFailed} {
			if s != c.sentinel && errors.Is(err, s) {
				t.Errorf("%s: also %v", c.name, s)
			}
		}
		if ae != nil && c.status == 412 && ae.CurrentRevision != 1 {
			t.Errorf("stale change: current revision %d, want 1", ae.CurrentRevision)
		}
		if err != nil && strings.Contains(err.Error(), "lighthouse") {
			t.Errorf("%s: the error quotes the input: %v", c.name, err)
		}
	}
	if e.out.Len() != 1 {
		t.Fatalf("refusals sent %d dispatches", e.out.Len()-1)
	}
}

func TestChangeAndCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	cl := e.client(t)
	st, _, err := cl.Create(ctx, request("op-1"))
	if err != nil {
		t.Fatal(err)
	}
	req := request("op-1")
	req.BudgetCredits = 60
	if st, err = cl.Change(ctx, "op-1", st.Revision, req); err != nil || st.SpecRevision != 2 || st.BudgetCredits != 60 {
		t.Fatalf("change: %+v %v", st, err)
	}
	if st, err = cl.Cancel(ctx, "op-1", st.Revision); err != nil || st.Phase != client.PhaseSuperseded || !st.Terminal {
		t.Fatalf("cancel: %+v %v", st, err)
	}
	// A cancel retried after its answer was lost is answered as done.
	if again, err := cl.Cancel(ctx, "op-1", 2); err != nil || again.Revision != st.Revision {
		t.Fatalf("cancel again: %+v %v", again, err)
	}
	// Past the claim: a conflict that names the phase.
	if _, _, err := cl.Create(ctx, request("op-2")); err != nil {
		t.Fatal(err)
	}
	rec, _ := e.st.Get(ctx, "op-2")
	claimed, err := operation.ClaimSubmission(rec, "submit/w1", "m-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Update(ctx, claimed, rec.Revision); err != nil {
		t.Fatal(err)
	}
	_, err = cl.Cancel(ctx, "op-2", 2)
	var ae *client.Error
	if !errors.Is(err, client.ErrConflict) || !errors.As(err, &ae) || ae.Code != client.CodeNotCancellable || ae.Phase != client.PhaseSubmitting {
		t.Fatalf("cancel after the claim: %v", err)
	}
}

func TestWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	cl := e.client(t)
	for _, id := range []string{"op-ends", "op-parks", "op-waits"} {
		if _, _, err := cl.Create(ctx, request(id)); err != nil {
			t.Fatal(err)
		}
	}
	move := func(id string, f func(*operation.Record)) {
		time.Sleep(30 * time.Millisecond)
		rec, err := e.st.Get(ctx, id)
		if err != nil {
			t.Error(err)
			return
		}
		next := rec.Clone()
		f(&next)
		if _, err := e.st.Update(ctx, next, rec.Revision); err != nil {
			t.Error(err)
		}
	}
	fast := client.WaitOptions{Interval: 5 * time.Millisecond, MaxInterval: 10 * time.Millisecond}
	for _, c := range []struct {
		id    string
		move  func(*operation.Record)
		check func(client.Status) bool
	}{
		{"op-ends", func(r *operation.Record) { r.Phase, r.Schedule = operation.PhaseRejected, nil },
			func(st client.Status) bool { return st.Terminal && st.Phase == client.PhaseRejected }},
		{"op-parks", func(r *operation.Record) {
			r.Phase, r.LastError = operation.PhaseUncertain, "post_outcome_unknown"
			r.Parked = &operation.ParkedState{Reason: "lost answer", At: time.Now()}
		}, func(st client.Status) bool {
			return !st.Terminal && st.OperatorReview != nil && st.OperatorReview.Reason == "post_outcome_unknown"
		}},
	} {
		t.Run(c.id, func(t *testing.T) {
			t.Parallel()
			go move(c.id, c.move)
			if st, err := cl.Wait(ctx, c.id, fast); err != nil || !c.check(st) {
				t.Fatalf("wait: %+v %v", st, err)
			}
		})
	}
	// Cancelled, whether asleep or in the middle of a read, a wait
	// answers the last status it saw with the cancellation.
	for _, during := range []int{0, 3} {
		t.Run(fmt.Sprintf("op-waits cancelled at read %d", during), func(t *testing.T) {
			t.Parallel()
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var reads atomic.Int32
			hc := &http.Client{Transport: cancelAt{RoundTripper: redirect(e.srv.URL), n: &reads, at: int32(during), cancel: cancel}}
			if during == 0 {
				time.AfterFunc(40*time.Millisecond, cancel)
			}
			st, err := e.client(t, client.WithHTTPClient(hc)).Wait(wctx, "op-waits", fast)
			if !errors.Is(err, context.Canceled) || st.OperationID != "op-waits" || st.Phase != client.PhasePrepared {
				t.Fatalf("wait: %+v %v; want the prepared status seen and the cancellation", st, err)
			}
		})
	}
}

// cancelAt cancels the context at the at-th request (counting from 1; 0
// never), before sending it on.
type cancelAt struct {
	http.RoundTripper
	n      *atomic.Int32
	at     int32
	cancel context.CancelFunc
}

func (c cancelAt) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.n.Add(1) == c.at {
		c.cancel()
	}
	return c.RoundTripper.RoundTrip(r)
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "lambda-url.example", "ftp://x.example", "https://", "https://x.example/?a=1", "https://u:p@x.example", "http://[::1"} {
		if _, err := client.New(bad, client.WithRegion(region)); err == nil || !strings.Contains(err.Error(), "endpoint") {
			t.Errorf("New(%q): %v, want the endpoint refused", bad, err)
		}
	}
	// A function URL names its region; a signature for another is refused.
	e := newEnv(t)
	static := client.WithCredentials(credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, ""))
	cl, err := client.New("https://abc.lambda-url.us-east-2.on.aws", static, client.WithHTTPClient(&http.Client{Transport: redirect(e.srv.URL)}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.Get(context.Background(), "op-1")
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != 403 || ae.Code != client.CodeForbidden {
		t.Fatalf("signed for us-east-2: %v", err)
	}
	wrong := e.client(t, client.WithCredentials(credentials.NewStaticCredentialsProvider(creds.AccessKeyID, "another-secret", "")))
	if _, err := wrong.Get(context.Background(), "op-1"); !errors.As(err, &ae) || ae.Status != 403 {
		t.Fatalf("another secret: %v", err)
	}
}

// redirect sends every request to the test server, keeping its Host.
type redirect string

func (r redirect) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host = "http", strings.TrimPrefix(string(r), "http://")
	return http.DefaultTransport.RoundTrip(req)
}

// busy answers the first n requests itself with status, as a throttling
// or failing front would, before any reaches the server.
type busy struct {
	status int
	n      atomic.Int32
}

func (b *busy) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.n.Add(-1) >= 0 {
		body := `{"error":{"code":"internal","message":"busy"}}`
		return &http.Response{StatusCode: b.status, Status: http.StatusText(b.status), Header: http.Header{"Retry-After": {"0"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestBusyAnswersAreRetried(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status   int
		n        int32
		wantCode int // 0: success
	}{
		{http.StatusTooManyRequests, 2, 0},
		{http.StatusServiceUnavailable, 4, 0},
		{http.StatusInternalServerError, 5, 500},
		{http.StatusForbidden, 1, 403}, // not retried
	} {
		t.Run(strconv.Itoa(c.status), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			b := &busy{status: c.status}
			b.n.Store(c.n)
			_, created, err := e.client(t, client.WithHTTPClient(&http.Client{Transport: b})).Create(context.Background(), request("op-1"))
			var ae *client.Error
			switch {
			case c.wantCode == 0 && (err != nil || !created || e.out.Len() != 1):
				t.Fatalf("after %d %d answers: %v, created %t", c.n, c.status, err, created)
			case c.wantCode != 0 && (!errors.As(err, &ae) || ae.Status != c.wantCode || e.out.Len() != 0):
				t.Fatalf("got %v, want %d and nothing sent", err, c.wantCode)
			}
		})
	}
}
