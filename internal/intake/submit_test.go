package intake_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/genjobs/genjobs/client"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/submit"
)

// submitter is the real submit handler on env's store and clock, against
// the Genace simulator.
type submitter struct {
	sim    *genacesim.Simulator
	h      *submit.Handler
	out    *handlertest.Outbox
	mlines *handlertest.Buffer
}

func (e *env) submitter(t *testing.T) *submitter {
	t.Helper()
	s := &submitter{out: &handlertest.Outbox{}, mlines: &handlertest.Buffer{}}
	sim, client := handlertest.Sim(t, e.clk, genacesim.Config{})
	s.sim = sim
	s.h = submit.New(submit.Deps{Store: e.st, Genace: client, Extender: &handlertest.Extender{}, Sender: s.out, Clock: e.clk,
		Log: slog.New(slog.DiscardHandler), Metrics: metrics.New(s.mlines, "submit", e.clk)}, submit.Config{})
	return s
}

func (s *submitter) handle(t *testing.T, e *env, m handlertest.Sent) {
	t.Helper()
	resp, err := s.h.Handle(context.Background(), handlertest.Event(t, e.clk.Now(), m))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("submit: %v, failures %v", err, resp.BatchItemFailures)
	}
}

// TestChangeBeforeTheClaimIsNeverPostedUnderTheOldSpec drives the real
// submit handler: the dispatch sent at create goes stale with the change
// and is acknowledged without a POST; the change's dispatch POSTs once,
// the new spec.
func TestChangeBeforeTheClaimIsNeverPostedUnderTheOldSpec(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	sub := e.submitter(t)
	old := e.created(t, "op-1")
	original, _ := get(t, e.st, "op-1")

	changed := body("op-1", func(m map[string]any) {
		m["model"], m["budget_credits"] = "genace-video-2", 45
		m["input"] = map[string]any{"prompt": prompt + ", in the rain"}
	})
	a := e.do(t, "PUT", "/v1/operations/op-1", changed, "If-Match", `"1"`)
	st := a.status(t)
	if a.Code != 200 || st.Revision != 2 || st.SpecRevision != 2 || st.Model != "genace-video-2" || st.EstimatedCredits != 40 || st.Phase != client.PhasePrepared {
		t.Fatalf("change: %d %+v", a.Code, st)
	}
	rec, _ := get(t, e.st, "op-1")
	if rec.SpecRevision != 2 || !rec.Authorized || rec.AuthorizedSpecRevision != 2 || rec.BudgetCredits != 45 || rec.EstimatedCredits != 40 ||
		!strings.Contains(string(rec.Input), "in the rain") || rec.Schedule == nil || !rec.Schedule.Due.Equal(e.clk.Now()) ||
		rec.RequestSHA256 != original.RequestSHA256 {
		t.Fatalf("changed record %+v", rec)
	}
	sent := e.out.Take()
	want := message.Envelope{Action: message.ActionSubmitGeneration, OperationID: "op-1", ExpectedRevision: 2}
	if len(sent) != 1 || sent[0].Env != want {
		t.Fatalf("the change sent %+v, want one %+v", sent, want)
	}
	entries := audit(t, e.st, "op-1")
	if len(entries) != 1 || entries[0].Operator != caller || entries[0].Action != operation.ActionChange || entries[0].Decision != "change-spec" ||
		entries[0].FromRevision != 1 || entries[0].Revision != 2 || entries[0].Credits != 40 || entries[0].FromPhase != operation.PhasePrepared {
		t.Fatalf("audit %+v", entries)
	}

	// The old dispatch arrives first: acknowledged, no POST, nothing written.
	sub.handle(t, e, old)
	if n := sub.sim.TotalPosts(); n != 0 {
		t.Fatalf("the stale dispatch POSTed %d times", n)
	}
	if got, _ := get(t, e.st, "op-1"); got.Revision != 2 || !strings.Contains(sub.mlines.String(), `"Reason":"stale_revision"`) {
		t.Fatalf("the stale dispatch wrote r%d; metrics %s", got.Revision, sub.mlines.String())
	}
	// A PUT retried after its answer was lost: in effect, nothing more.
	if a := e.do(t, "PUT", "/v1/operations/op-1", changed, "If-Match", `"1"`); a.Code != 200 || a.status(t).Revision != 2 || e.out.Len() != 0 {
		t.Fatalf("retried change: %d %s, %d sent", a.Code, a.body, e.out.Len())
	}
	// The change's dispatch POSTs once, the new spec.
	sub.handle(t, e, handlertest.Sent{ID: "dispatch-2", Env: sent[0].Env})
	jobs := sub.sim.JobsForOperation("op-1")
	if len(jobs) != 1 || sub.sim.PostCount("op-1") != 1 {
		t.Fatalf("jobs %v, %d POSTs", jobs, sub.sim.PostCount("op-1"))
	}
	if job, _ := sub.sim.Job(jobs[0]); job.Model != "genace-video-2" {
		t.Fatalf("POSTed %s, want the changed model", job.Model)
	}
	// The original create, retried: the same operation, as it stands.
	a = e.do(t, "POST", "/v1/operations", body("op-1"))
	if st := a.status(t); a.Code != 200 || st.SpecRevision != 2 || st.Phase != client.PhaseAccepted {
		t.Fatalf("retried create after the change: %d %s", a.Code, a.body)
	}
	if audit(t, e.st, "op-1")[0].Operator != caller || len(audit(t, e.st, "op-1")) != 1 {
		t.Fatal("the audit trail changed")
	}
}

// TestCancelBeforeTheClaimChargesNothing: superseded, audited, nothing
// dispatched, and the dispatch sent at create finds it terminal.
func TestCancelBeforeTheClaimChargesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	sub := e.submitter(t)
	old := e.created(t, "op-1")
	a := e.do(t, "POST", "/v1/operations/op-1/cancel", "", "If-Match", `"1"`)
	st := a.status(t)
	if a.Code != 200 || st.Phase != client.PhaseSuperseded || !st.Terminal || st.Revision != 2 {
		t.Fatalf("cancel: %d %s", a.Code, a.body)
	}
	if n := e.out.Len(); n != 0 {
		t.Fatalf("a cancel sent %d", n)
	}
	entries := audit(t, e.st, "op-1")
	if len(entries) != 1 || entries[0].Operator != caller || entries[0].Action != operation.ActionCancel ||
		entries[0].ToPhase != operation.PhaseSuperseded || entries[0].Revision != 2 {
		t.Fatalf("audit %+v", entries)
	}
	// Retried after a lost answer: the same status, nothing more written.
	if again := e.do(t, "POST", "/v1/operations/op-1/cancel", "", "If-Match", `"1"`); again.Code != 200 || again.body != a.body || len(audit(t, e.st, "op-1")) != 1 {
		t.Fatalf("retried cancel: %d %s", again.Code, again.body)
	}
	sub.handle(t, e, old)
	if n := sub.sim.TotalPosts(); n != 0 {
		t.Fatalf("the cancelled operation was POSTed %d times", n)
	}
	if rec, _ := get(t, e.st, "op-1"); rec.Schedule != nil || rec.Revision != 2 {
		t.Fatalf("cancelled record r%d schedule %+v", rec.Revision, rec.Schedule)
	}
	e.do(t, "PUT", "/v1/operations/op-1", body("op-1", func(m map[string]any) { m["budget_credits"] = 60 }), "If-Match", `"2"`).
		want(t, 409, "not_changeable", "")
}

// TestChangeKeepsARateLimitWait: a dispatch waiting out Genace's
// Retry-After keeps its due time through a change.
func TestChangeKeepsARateLimitWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.created(t, "op-1")
	rec, _ := get(t, e.st, "op-1")
	due := e.clk.Now().Add(90 * 1e9)
	rec.Schedule.Due = due
	if _, err := e.st.Update(context.Background(), rec, 1); err != nil {
		t.Fatal(err)
	}
	a := e.do(t, "PUT", "/v1/operations/op-1", body("op-1", func(m map[string]any) { m["budget_credits"] = 60 }), "If-Match", `"2"`)
	if a.Code != 200 {
		t.Fatalf("%d %s", a.Code, a.body)
	}
	sent := e.out.Take()
	if got, _ := get(t, e.st, "op-1"); len(sent) != 1 || sent[0].Delay != 90*1e9 || !got.Schedule.Due.Equal(due) {
		t.Fatalf("sent %+v; due %v, want %v", sent, got.Schedule.Due, due)
	}
}
