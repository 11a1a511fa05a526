package intake_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genjobs/genjobs/client"
	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/intake"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

// prompt marks the input's text: no answer, log line, audit entry or
// message may hold it.
const prompt = "PROMPT-MARKER a lighthouse at dusk"

const caller = "arn:aws:sts::123456789012:assumed-role/app/render-service"

var catalog = intake.Catalog{"flux-pro-2": 12, "genace-video-2": 40}

// env is one service on the real embedded store, with a recording sender.
type env struct {
	clk  *clock.Manual
	st   store.Store
	out  *handlertest.Outbox
	logs *handlertest.Buffer
	h    http.Handler
}

func newEnv(t *testing.T, wrap func(store.Store) intake.Store) *env {
	t.Helper()
	e := &env{clk: clock.NewManual(handlertest.Start), out: &handlertest.Outbox{}, logs: &handlertest.Buffer{}}
	e.st = handlertest.OpenStore(t, "bolt")
	var st intake.Store = e.st
	if wrap != nil {
		st = wrap(e.st)
	}
	svc, err := intake.New(intake.Deps{Store: st, Sender: e.out, Clock: e.clk, Catalog: catalog,
		Log: slog.New(slog.NewJSONHandler(e.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e.h = svc.Handler(func(r *http.Request) (string, error) {
		if c := r.Header.Get("X-Test-Caller"); c != "" {
			return c, nil
		}
		return "", errors.New("no principal")
	})
	t.Cleanup(func() {
		if strings.Contains(e.logs.String(), "PROMPT-MARKER") {
			t.Errorf("the logs hold the prompt:\n%s", e.logs.String())
		}
	})
	return e
}

// observed collects, across the tests, the status each route answered
// and the error codes seen: TestMain holds them to openapi.yaml.
var observed = struct {
	sync.Mutex
	statuses map[string]map[int]bool // route pattern → status
	codes    map[string]bool
}{statuses: map[string]map[int]bool{}, codes: map[string]bool{}}

type answer struct {
	*httptest.ResponseRecorder
	body  string
	error struct {
		Code            string          `json:"code"`
		Field           string          `json:"field"`
		Message         string          `json:"message"`
		CurrentRevision int64           `json:"current_revision"`
		Phase           operation.Phase `json:"phase"`
	}
}

// do sends one request as caller (unless a header list sets
// X-Test-Caller to "" to send none) and records what the route answered.
func (e *env) do(t *testing.T, method, path, body string, headers ...string) *answer {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	r.Header.Set("X-Test-Caller", caller)
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			r.Header.Del(headers[i])
		} else {
			r.Header.Add(headers[i], headers[i+1])
		}
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	a := &answer{ResponseRecorder: w, body: w.Body.String()}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" && r.Pattern != "GET /v1/openapi.yaml" {
		t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	if w.Code >= 400 {
		var b struct {
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil || json.Unmarshal(b.Error, &a.error) != nil || a.error.Code == "" {
			t.Errorf("%s %s: %d with body %q, want an error object", method, path, w.Code, a.body)
		}
	}
	if strings.Contains(a.body, "PROMPT-MARKER") || strings.Contains(a.body, "lighthouse") {
		t.Errorf("%s %s: the answer holds the prompt: %s", method, path, a.body)
	}
	observed.Lock()
	if observed.statuses[r.Pattern] == nil {
		observed.statuses[r.Pattern] = map[int]bool{}
	}
	observed.statuses[r.Pattern][w.Code] = true
	if a.error.Code != "" {
		observed.codes[a.error.Code] = true
	}
	observed.Unlock()
	return a
}

func (a *answer) status(t *testing.T) intake.Status {
	t.Helper()
	var st intake.Status
	if err := json.Unmarshal([]byte(a.body), &st); err != nil {
		t.Fatalf("status %q: %v", a.body, err)
	}
	if want := fmt.Sprintf(`"%d"`, st.Revision); a.Header().Get("ETag") != want {
		t.Errorf("ETag %q, want %s", a.Header().Get("ETag"), want)
	}
	return st
}

func (a *answer) want(t *testing.T, status int, code, field string) {
	t.Helper()
	if a.Code != status || a.error.Code != code || a.error.Field != field {
		t.Fatalf("got %d %s (field %q), want %d %s (field %q): %s", a.Code, a.error.Code, a.error.Field, status, code, field, a.body)
	}
}

// body is a create request; change edits its fields.
func body(id string, change ...func(map[string]any)) string {
	m := map[string]any{"operation_id": id, "user_id": "user-1", "model": "flux-pro-2",
		"input": map[string]any{"prompt": prompt, "size": "1024x1024", "style": "<noir> & grain"}, "budget_credits": 50}
	for _, f := range change {
		f(m)
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func get(t *testing.T, st store.Store, id string) (operation.Record, bool) {
	t.Helper()
	rec, err := st.Get(context.Background(), id)
	if errors.Is(err, store.ErrNotFound) {
		return rec, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return rec, true
}

func audit(t *testing.T, st store.Store, id string) []review.AuditEntry {
	t.Helper()
	es, err := st.Audit(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func TestCreateRetriedTenTimesIsOneOperation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var first string
	for i := range 10 {
		a := e.do(t, "POST", "/v1/operations", body("op-1"))
		if want := map[bool]int{true: 201, false: 200}[i == 0]; a.Code != want {
			t.Fatalf("attempt %d: %d, want %d: %s", i, a.Code, want, a.body)
		}
		a.status(t)
		if i == 0 {
			first = a.body
		} else if a.body != first {
			t.Fatalf("attempt %d answered\n%s\nthe first\n%s", i, a.body, first)
		}
		e.clk.Advance(time.Second) // answers lost, retried later
	}
	// A client that re-encodes its retry (key order, spacing) is retrying too.
	reordered := `{"budget_credits":50, "input":{"style":"\u003cnoir> & grain", "size":"1024x1024","prompt":"` + prompt + `"},"model":"flux-pro-2","user_id":"user-1","operation_id":"op-1"}`
	if a := e.do(t, "POST", "/v1/operations", reordered); a.Code != 200 || a.body != first {
		t.Fatalf("re-encoded retry: %d %s", a.Code, a.body)
	}
	sent := e.out.Take()
	want := message.Envelope{Action: message.ActionSubmitGeneration, OperationID: "op-1", ExpectedRevision: 1}
	if len(sent) != 1 || sent[0].Env != want || sent[0].Delay != 0 {
		t.Fatalf("sent %+v, want one %+v", sent, want)
	}
	rec, _ := get(t, e.st, "op-1")
	wantRec := operation.Record{
		OperationID: "op-1", Revision: 1, SpecRevision: 1, Phase: operation.PhasePrepared, UserID: "user-1", Model: "flux-pro-2",
		Input: rec.Input, RequestSHA256: rec.RequestSHA256,
		Authorized: true, AuthorizedSpecRevision: 1, BudgetCredits: 50, EstimatedCredits: 12,
		Schedule:   &operation.NextAction{Action: "submit_generation", Due: handlertest.Start},
		Timestamps: operation.Timestamps{Created: handlertest.Start, Updated: handlertest.Start}, Writer: rec.Writer,
	}
	// Stored as one JSON object with the same content (the embedded store
	// re-escapes < > & as JSON allows).
	var in, wantIn any
	_ = json.Unmarshal(rec.Input, &in)
	_ = json.Unmarshal([]byte(`{"prompt":"`+prompt+`","size":"1024x1024","style":"<noir> & grain"}`), &wantIn)
	if !reflect.DeepEqual(in, wantIn) || len(rec.Input) > len(first)+200 {
		t.Fatalf("stored input %s", rec.Input)
	}
	if len(rec.RequestSHA256) != 64 || !strings.HasPrefix(rec.Writer, "intake/") || !reflect.DeepEqual(rec, wantRec) {
		t.Fatalf("record\n%+v\nwant\n%+v", rec, wantRec)
	}
	if st := intake.View(rec); !strings.Contains(first, `"phase":"prepared"`) || st.Revision != 1 || st.SpecRevision != 1 {
		t.Fatalf("status %s", first)
	}
	// The real submit handler on that one dispatch: one POST, and a
	// create retried after it changes nothing.
	sub := e.submitter(t)
	sub.handle(t, e, sent[0])
	if a := e.do(t, "POST", "/v1/operations", body("op-1")); a.Code != 200 || e.out.Len() != 0 {
		t.Fatalf("create retried after the submission: %d %s, %d sent", a.Code, a.body, e.out.Len())
	}
	if n := sub.sim.PostCount("op-1"); n != 1 || sub.sim.TotalPosts() != 1 {
		t.Fatalf("%d POSTs for op-1 (%d in all), want exactly 1", n, sub.sim.TotalPosts())
	}
}

func TestConcurrentCreatesMakeOneOperation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	codes := make(chan int, 10)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { codes <- e.do(t, "POST", "/v1/operations", body("op-race")).Code })
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[201] != 1 || count[200] != 9 {
		t.Fatalf("answers %v, want one 201 and nine 200", count)
	}
	if sent := e.out.Take(); len(sent) != 1 {
		t.Fatalf("%d dispatches, want 1", len(sent))
	}
	if rec, _ := get(t, e.st, "op-race"); rec.Revision != 1 {
		t.Fatalf("record at revision %d", rec.Revision)
	}
}

func TestSameIDAnotherRequestIsAConflict(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.do(t, "POST", "/v1/operations", body("op-1"))
	e.out.Take()
	for name, change := range map[string]func(map[string]any){
		"input":  func(m map[string]any) { m["input"] = map[string]any{"prompt": "another"} },
		"model":  func(m map[string]any) { m["model"] = "genace-video-2" },
		"budget": func(m map[string]any) { m["budget_credits"] = 51 },
		"user":   func(m map[string]any) { m["user_id"] = "user-2" },
	} {
		a := e.do(t, "POST", "/v1/operations", body("op-1", change))
		a.want(t, 409, "operation_id_conflict", "operation_id")
		if !strings.Contains(a.error.Message, "different request") {
			t.Errorf("%s: message %q does not say why", name, a.error.Message)
		}
	}
	if rec, _ := get(t, e.st, "op-1"); rec.Revision != 1 || rec.Model != "flux-pro-2" || e.out.Len() != 0 {
		t.Fatalf("a conflict wrote or sent: r%d %s, %d sent", rec.Revision, rec.Model, e.out.Len())
	}
	// An operation this API did not create (no digest) is not one it can
	// answer for.
	if _, err := e.st.Create(context.Background(), handlertest.Prepared("op-local")); err != nil {
		t.Fatal(err)
	}
	e.do(t, "POST", "/v1/operations", body("op-local")).want(t, 409, "operation_id_conflict", "operation_id")
}

func TestBadInputNamesTheFieldAndWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	del := func(k string) func(map[string]any) { return func(m map[string]any) { delete(m, k) } }
	big := strings.Repeat("x", intake.DefaultMaxInputBytes)
	for _, c := range []struct {
		name, body, contentType string
		status                  int
		code, field             string
	}{
		{"truncated", `{"operation_id":"op-bad"`, "", 400, "malformed_json", ""},
		{"empty", ``, "application/json", 400, "malformed_json", ""},
		{"trailing data", body("op-bad") + `{}`, "", 400, "malformed_json", ""},
		{"array", `[]`, "", 400, "malformed_json", ""},
		{"not UTF-8", strings.Replace(body("op-bad"), "dusk", "d\xffsk", 1), "", 400, "malformed_json", ""},
		{"unknown field", body("op-bad", set("priority", 1)), "", 400, "unknown_field", "priority"},
		{"missing operation_id", body("op-bad", del("operation_id")), "", 400, "missing_field", "operation_id"},
		{"missing user_id", body("op-bad", del("user_id")), "", 400, "missing_field", "user_id"},
		{"missing model", body("op-bad", del("model")), "", 400, "missing_field", "model"},
		{"missing input", body("op-bad", del("input")), "", 400, "missing_field", "input"},
		{"null budget", body("op-bad", set("budget_credits", nil)), "", 400, "missing_field", "budget_credits"},
		{"budget a string", body("op-bad", set("budget_credits", "50")), "", 400, "invalid_field", "budget_credits"},
		{"budget a fraction", body("op-bad", set("budget_credits", 2.5)), "", 400, "invalid_field", "budget_credits"},
		{"id with a space", body("op bad"), "", 400, "invalid_field", "operation_id"},
		{"id a URL", body("https://x.example/op"), "", 400, "invalid_field", "operation_id"},
		{"id too long", body(strings.Repeat("o", 129)), "", 400, "invalid_field", "operation_id"},
		{"empty id", body(""), "", 400, "invalid_field", "operation_id"},
		{"user an email", body("op-bad", set("user_id", "a@b.example")), "", 400, "invalid_field", "user_id"},
		{"unknown model", body("op-bad", set("model", "gpt-image")), "", 400, "unknown_model", "model"},
		{"budget 0", body("op-bad", set("budget_credits", 0)), "", 400, "invalid_field", "budget_credits"},
		{"budget negative", body("op-bad", set("budget_credits", -5)), "", 400, "invalid_field", "budget_credits"},
		{"budget below the estimate", body("op-bad", set("budget_credits", 11)), "", 400, "budget_too_low", "budget_credits"},
		{"input a string", body("op-bad", set("input", prompt)), "", 400, "invalid_field", "input"},
		{"input an array", body("op-bad", set("input", []any{prompt})), "", 400, "invalid_field", "input"},
		{"input over the limit", body("op-bad", set("input", map[string]any{"prompt": big})), "", 413, "input_too_large", "input"},
		{"body over the limit", body("op-bad") + strings.Repeat(" ", intake.DefaultMaxBodyBytes), "", 413, "body_too_large", ""},
		{"not JSON's media type", body("op-bad"), "text/plain", 415, "unsupported_media_type", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			headers := []string{}
			if c.contentType != "" {
				headers = append(headers, "Content-Type", "", "Content-Type", c.contentType)
			}
			a := e.do(t, "POST", "/v1/operations", c.body, headers...)
			a.want(t, c.status, c.code, c.field)
			if strings.Contains(a.body, big[:64]) {
				t.Fatalf("the refusal quotes the input")
			}
		})
	}
	// The limit counts the input as sent, compact: characters JSON lets
	// go unescaped are not counted six times.
	angles := strings.Replace(body("op-angles", set("input", map[string]any{"p": "ANGLES"})), "ANGLES", strings.Repeat("<", intake.DefaultMaxInputBytes-10), 1)
	if a := e.do(t, "POST", "/v1/operations", angles); a.Code != 201 {
		t.Fatalf("an input at the limit: %d %s", a.Code, a.body)
	}
	e.out.Take()
	for _, id := range []string{"op-bad", "op bad", ""} {
		if _, found := get(t, e.st, id); found && id != "" {
			t.Errorf("%q was written", id)
		}
	}
	if n := e.out.Len(); n != 0 {
		t.Fatalf("%d dispatches sent", n)
	}
}

func TestSendFailureAfterCreateIsStillCreated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.out.FailNext(1)
	a := e.do(t, "POST", "/v1/operations", body("op-1"))
	if a.Code != 201 {
		t.Fatalf("%d %s", a.Code, a.body)
	}
	rec, _ := get(t, e.st, "op-1")
	if rec.Schedule == nil || rec.Schedule.Action != "submit_generation" || !rec.Active() {
		t.Fatalf("the owed dispatch is not on the record for the sweep: %+v", rec.Schedule)
	}
	if !strings.Contains(e.logs.String(), "dispatch not sent") {
		t.Fatalf("the failed send is not logged:\n%s", e.logs.String())
	}
}

// lostAnswer applies a Create and then says it was not applied, as
// DynamoDB's lost response and the SDK's retry do.
type lostAnswer struct{ store.Store }

func (l lostAnswer) Create(ctx context.Context, rec operation.Record) (operation.Record, error) {
	if _, err := l.Store.Create(ctx, rec); err != nil {
		return rec, err
	}
	return operation.Record{}, fmt.Errorf("create %s: %w", rec.OperationID, store.ErrExists)
}

func TestOwnCreateWhoseAnswerWasLostStillDispatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(s store.Store) intake.Store { return lostAnswer{s} })
	if a := e.do(t, "POST", "/v1/operations", body("op-1")); a.Code != 201 {
		t.Fatalf("%d %s", a.Code, a.body)
	}
	if n := e.out.Len(); n != 1 {
		t.Fatalf("%d dispatches, want 1", n)
	}
	// Another request's create, refused the same way, is the existing one.
	if a := e.do(t, "POST", "/v1/operations", body("op-1")); a.Code != 200 || e.out.Len() != 1 {
		t.Fatalf("a retry: %d, %d dispatches", a.Code, e.out.Len())
	}
}

// created makes op through the API and returns its first dispatch.
func (e *env) created(t *testing.T, id string) handlertest.Sent {
	t.Helper()
	if a := e.do(t, "POST", "/v1/operations", body(id)); a.Code != 201 {
		t.Fatalf("create: %d %s", a.Code, a.body)
	}
	sent := e.out.Take()
	if len(sent) != 1 {
		t.Fatalf("create sent %d", len(sent))
	}
	return sent[0]
}

func TestPreconditions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.created(t, "op-1")
	changed := body("op-1", func(m map[string]any) { m["budget_credits"] = 60 })
	for _, c := range []struct {
		name, method, path, body string
		ifMatch                  []string
		status                   int
		code                     string
	}{
		{"change without If-Match", "PUT", "/v1/operations/op-1", changed, nil, 428, "precondition_required"},
		{"cancel without If-Match", "POST", "/v1/operations/op-1/cancel", "", nil, 428, "precondition_required"},
		{"change, stale", "PUT", "/v1/operations/op-1", changed, []string{`"7"`}, 412, "revision_mismatch"},
		{"cancel, stale", "POST", "/v1/operations/op-1/cancel", "", []string{`"2"`}, 412, "revision_mismatch"},
		{"star", "PUT", "/v1/operations/op-1", changed, []string{`*`}, 400, "invalid_precondition"},
		{"weak", "PUT", "/v1/operations/op-1", changed, []string{`W/"1"`}, 400, "invalid_precondition"},
		{"unquoted", "POST", "/v1/operations/op-1/cancel", "", []string{`1`}, 400, "invalid_precondition"},
		{"zero", "POST", "/v1/operations/op-1/cancel", "", []string{`"0"`}, 400, "invalid_precondition"},
		{"two", "PUT", "/v1/operations/op-1", changed, []string{`"1"`, `"2"`}, 400, "invalid_precondition"},
		{"a list", "PUT", "/v1/operations/op-1", changed, []string{`"1", "2"`}, 400, "invalid_precondition"},
	} {
		var h []string
		for _, v := range c.ifMatch {
			h = append(h, "If-Match", v)
		}
		a := e.do(t, c.method, c.path, c.body, h...)
		a.want(t, c.status, c.code, "If-Match")
		if c.status == 412 && a.error.CurrentRevision != 1 {
			t.Errorf("%s: current_revision %d, want 1", c.name, a.error.CurrentRevision)
		}
	}
	if rec, _ := get(t, e.st, "op-1"); rec.Revision != 1 || len(audit(t, e.st, "op-1")) != 0 || e.out.Len() != 0 {
		t.Fatalf("a refused precondition wrote r%d or sent %d", rec.Revision, e.out.Len())
	}
}

func TestChangeAndCancelAfterTheClaimAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		phase operation.Phase
		move  func(operation.Record) (operation.Record, error)
	}{
		{operation.PhaseSubmitting, func(r operation.Record) (operation.Record, error) {
			return operation.ClaimSubmission(r, "submit/w1", "dispatch-1", handlertest.Start)
		}},
		{operation.PhaseAccepted, func(r operation.Record) (operation.Record, error) {
			c, err := operation.ClaimSubmission(r, "submit/w1", "dispatch-1", handlertest.Start)
			if err != nil {
				return c, err
			}
			return c.Claim.Accept(c, "job_1", &operation.Snapshot{State: operation.RemoteRunning}, handlertest.Start)
		}},
		{operation.PhaseRejected, func(r operation.Record) (operation.Record, error) {
			c, err := operation.ClaimSubmission(r, "submit/w1", "dispatch-1", handlertest.Start)
			if err != nil {
				return c, err
			}
			return c.Claim.Reject(c, "invalid_request", handlertest.Start)
		}},
	} {
		t.Run(string(c.phase), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			e.created(t, "op-1")
			rec, _ := get(t, e.st, "op-1")
			next, err := c.move(rec)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.st.Update(ctx, next, 1); err != nil {
				t.Fatal(err)
			}
			changed := body("op-1", func(m map[string]any) { m["budget_credits"] = 60 })
			a := e.do(t, "PUT", "/v1/operations/op-1", changed, "If-Match", `"2"`)
			a.want(t, 409, "not_changeable", "")
			if a.error.Phase != c.phase || !strings.Contains(a.error.Message, string(c.phase)) {
				t.Fatalf("the refusal does not name %s: %s", c.phase, a.body)
			}
			a = e.do(t, "POST", "/v1/operations/op-1/cancel", "", "If-Match", `"2"`)
			a.want(t, 409, "not_cancellable", "")
			if a.error.Phase != c.phase || !strings.Contains(a.error.Message, string(c.phase)) {
				t.Fatalf("the refusal does not name %s: %s", c.phase, a.body)
			}
			if has := strings.Contains(a.error.Message, "Genace has no cancel"); has == next.Terminal() {
				t.Fatalf("%s: %q (terminal %t)", c.phase, a.error.Message, next.Terminal())
			}
			if got, _ := get(t, e.st, "op-1"); got.Revision != 2 || len(audit(t, e.st, "op-1")) != 0 || e.out.Len() != 0 {
				t.Fatalf("a refusal wrote r%d or sent %d", got.Revision, e.out.Len())
			}
		})
	}
}

func TestChangeOfAnotherUserOrIDIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.created(t, "op-1")
	e.do(t, "PUT", "/v1/operations/op-1", body("op-1", func(m map[string]any) { m["user_id"] = "user-2" }), "If-Match", `"1"`).
		want(t, 409, "user_id_conflict", "user_id")
	e.do(t, "PUT", "/v1/operations/op-1", body("op-2"), "If-Match", `"1"`).want(t, 400, "operation_id_mismatch", "operation_id")
	e.do(t, "PUT", "/v1/operations/op-9", body("op-9"), "If-Match", `"1"`).want(t, 404, "not_found", "")
	e.do(t, "PUT", "/v1/operations/op-1", body("op-1", func(m map[string]any) { m["extra"] = true }), "If-Match", `"1"`).
		want(t, 400, "unknown_field", "extra")
	e.do(t, "PUT", "/v1/operations/op-1", body("op-1"), "If-Match", `"1"`, "Content-Type", "", "Content-Type", "text/plain").
		want(t, 415, "unsupported_media_type", "")
	e.do(t, "PUT", "/v1/operations/op-1", body("op-1", func(m map[string]any) { m["input"] = map[string]any{"p": strings.Repeat("x", 40<<10)} }), "If-Match", `"1"`).
		want(t, 413, "input_too_large", "input")
	if rec, _ := get(t, e.st, "op-1"); rec.Revision != 1 || e.out.Len() != 0 {
		t.Fatalf("a refused change wrote r%d or sent %d", rec.Revision, e.out.Len())
	}
}

// racing moves the record (as the sweep re-arming it would) right after
// the intake read it, before its write.
type racing struct {
	store.Store
	once sync.Once
}

func (r *racing) Get(ctx context.Context, id string) (operation.Record, error) {
	rec, err := r.Store.Get(ctx, id)
	if err == nil && rec.Phase == operation.PhasePrepared {
		r.once.Do(func() {
			moved := rec.Clone()
			moved.Schedule.Due = moved.Schedule.Due.Add(time.Minute)
			if _, err := r.Store.Update(ctx, moved, rec.Revision); err != nil {
				panic(err)
			}
		})
	}
	return rec, err
}

func TestChangeRacingAHandlerIsAPreconditionFailure(t *testing.T) {
	t.Parallel()
	rs := &racing{}
	e := newEnv(t, func(s store.Store) intake.Store { rs.Store = s; return rs })
	rs.once.Do(func() {}) // not while the test sets up
	e.created(t, "op-1")
	rs.once = sync.Once{}
	a := e.do(t, "PUT", "/v1/operations/op-1", body("op-1", func(m map[string]any) { m["budget_credits"] = 60 }), "If-Match", `"1"`)
	a.want(t, 412, "revision_mismatch", "If-Match")
	if a.error.CurrentRevision != 2 {
		t.Fatalf("current_revision %d, want 2", a.error.CurrentRevision)
	}
	rec, _ := get(t, e.st, "op-1")
	if rec.Revision != 2 || rec.BudgetCredits != 50 || len(audit(t, e.st, "op-1")) != 0 || e.out.Len() != 0 {
		t.Fatalf("the lost race wrote: r%d budget %d, sent %d", rec.Revision, rec.BudgetCredits, e.out.Len())
	}
	rs.once = sync.Once{}
	e.do(t, "POST", "/v1/operations/op-1/cancel", "", "If-Match", `"2"`).want(t, 412, "revision_mismatch", "If-Match")
}

func TestStatusShowsNoInputURLOrWriter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.created(t, "op-1")
	rec, _ := get(t, e.st, "op-1")
	at := handlertest.Start.Add(time.Minute)
	rec.Phase, rec.RemoteJobID, rec.Settlement = operation.PhaseFailed, "job_01", operation.SettlementUnresolved
	rec.Claim = &operation.Claim{Owner: "submit/worker-owner-7", MessageID: "dispatch-1", At: at}
	rec.Remote = &operation.Snapshot{State: operation.RemoteFailed, Progress: 0.5, ErrorCode: "echo of " + prompt,
		Credits:    operation.Credits{Reserved: 12, Charged: 10, RefundState: operation.RefundNone},
		Outputs:    []operation.OutputDescriptor{{ContentType: "image/png", SizeBytes: 3, SHA256: strings.Repeat("a", 64)}, {ContentType: "image/webp", SizeBytes: 4, SHA256: strings.Repeat("b", 64)}},
		ObservedAt: at}
	rec.Deliveries = []operation.Delivery{
		{Index: 1, Key: "ops/op-1/job_01/1.webp", SizeBytes: 4, SHA256: strings.Repeat("b", 64), StoredAt: at},
		{Index: 0, Key: "ops/op-1/job_01/0.png", SizeBytes: 3, SHA256: strings.Repeat("a", 64), StoredAt: at},
	}
	rec.LastError = operation.CategoryRefundUnresolved
	rec.Parked = &operation.ParkedState{Reason: "refund of https://genace.example/o?X-Amz-Signature=abc for " + prompt, At: at}
	if _, err := e.st.Update(store.WithWriter(context.Background(), "observe/writer-secret-9"), rec, 1); err != nil {
		t.Fatal(err)
	}
	a := e.do(t, "GET", "/v1/operations/op-1", "")
	for _, leak := range []string{"PROMPT-MARKER", "lighthouse", "https://", "X-Amz-Signature", "Signature=", "worker-owner-7", "writer-secret-9", "dispatch-1"} {
		if strings.Contains(a.body, leak) {
			t.Errorf("the status holds %q: %s", leak, a.body)
		}
	}
	st := a.status(t)
	want := intake.Status{
		OperationID: "op-1", Revision: 2, SpecRevision: 1, UserID: "user-1", Model: "flux-pro-2", BudgetCredits: 50, EstimatedCredits: 12,
		Phase: client.PhaseFailed, Settlement: client.SettlementUnresolved,
		Remote:         &intake.Remote{JobID: "job_01", State: client.RemoteFailed, Progress: 0.5, Credits: intake.Credits{Reserved: 12, Charged: 10, RefundState: client.RefundNone}},
		OperatorReview: &intake.OperatorReview{Reason: operation.CategoryRefundUnresolved, Since: at},
		Outputs: []intake.Output{
			{Index: 0, Key: "ops/op-1/job_01/0.png", SizeBytes: 3, SHA256: strings.Repeat("a", 64), ContentType: "image/png"},
			{Index: 1, Key: "ops/op-1/job_01/1.webp", SizeBytes: 4, SHA256: strings.Repeat("b", 64), ContentType: "image/webp"},
		},
		CreatedAt: handlertest.Start, UpdatedAt: handlertest.Start,
	}
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("status\n%+v\nwant\n%+v", st, want)
	}
}

func TestRoutesAnswerJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.created(t, "op-1")
	e.do(t, "GET", "/v1/operations/op-9", "").want(t, 404, "not_found", "")
	e.do(t, "GET", "/v1/operations/op%20bad", "").want(t, 400, "invalid_field", "operation_id")
	e.do(t, "POST", "/v1/operations/op%20bad/cancel", "", "If-Match", `"1"`).want(t, 400, "invalid_field", "operation_id")
	e.do(t, "POST", "/v1/operations/op-9/cancel", "", "If-Match", `"1"`).want(t, 404, "not_found", "")
	e.do(t, "POST", "/v1/operations/op-1/cancel", "{}", "If-Match", `"1"`).want(t, 400, "malformed_json", "")
	e.do(t, "GET", "/v1/nothing", "").want(t, 404, "not_found", "")
	e.do(t, "GET", "/v1//operations/op-1", "").want(t, 404, "not_found", "")
	e.do(t, "GET", "/v1/operations/op-1", "", "X-Test-Caller", "").want(t, 403, "forbidden", "")
	e.do(t, "GET", "/v1/operations/op-1", "", "X-Test-Caller", "", "X-Test-Caller", "Robert'); DROP").want(t, 403, "forbidden", "")
	e.do(t, "POST", "/v1/operations", body("op-2"), "X-Test-Caller", "").want(t, 403, "forbidden", "")
	e.do(t, "PUT", "/v1/operations/op-1", body("op-1"), "If-Match", `"1"`, "X-Test-Caller", "").want(t, 403, "forbidden", "")
	e.do(t, "POST", "/v1/operations/op-1/cancel", "", "If-Match", `"1"`, "X-Test-Caller", "").want(t, 403, "forbidden", "")
	a := e.do(t, "DELETE", "/v1/operations/op-1", "")
	a.want(t, 405, "method_not_allowed", "")
	if allow := a.Header().Get("Allow"); allow != "GET, PUT" {
		t.Fatalf("Allow %q", allow)
	}
	a = e.do(t, "GET", "/v1/openapi.yaml", "", "X-Test-Caller", "")
	if a.Code != 200 || a.body != string(intake.OpenAPI) || a.Header().Get("Content-Type") != "application/yaml" {
		t.Fatalf("openapi: %d %q", a.Code, a.Header().Get("Content-Type"))
	}
	if _, found := get(t, e.st, "op-2"); found {
		t.Fatal("an unidentified create wrote")
	}
}

// broken fails every store call, with an error that names a path a
// client must never see.
type broken struct{ store.Store }

var errBroken = errors.New("bolt: /var/task/secret-path/genjobs.db: i/o error")

func (broken) Create(context.Context, operation.Record) (operation.Record, error) {
	return operation.Record{}, errBroken
}
func (broken) Get(context.Context, string) (operation.Record, error) {
	return operation.Record{}, errBroken
}

func TestStoreFailureIsInternalWithoutDetail(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(s store.Store) intake.Store { return broken{s} })
	for _, a := range []*answer{
		e.do(t, "POST", "/v1/operations", body("op-1")),
		e.do(t, "GET", "/v1/operations/op-1", ""),
		e.do(t, "PUT", "/v1/operations/op-1", body("op-1"), "If-Match", `"1"`),
		e.do(t, "POST", "/v1/operations/op-1/cancel", "", "If-Match", `"1"`),
	} {
		a.want(t, 500, "internal", "")
		if strings.Contains(a.body, "secret-path") || strings.Contains(a.body, "bolt") {
			t.Fatalf("500 leaks the error: %s", a.body)
		}
	}
	if !strings.Contains(e.logs.String(), "secret-path") {
		t.Fatalf("the error is not logged:\n%s", e.logs.String())
	}
}

func TestNewRefusesAnUnusableCatalog(t *testing.T) {
	t.Parallel()
	st := handlertest.OpenStore(t, "bolt")
	for name, c := range map[string]intake.Catalog{"empty": {}, "negative": {"m": -1}, "bad name": {"a model": 1}} {
		if _, err := intake.New(intake.Deps{Store: st, Sender: &handlertest.Outbox{}, Catalog: c}); err == nil {
			t.Errorf("%s catalog accepted", name)
		}
	}
	if _, err := intake.New(intake.Deps{Store: st, Catalog: catalog}); err == nil {
		t.Error("no sender accepted")
	}
}
