package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/replay"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

type fixture struct {
	Name           string
	ExpectedAction operation.Action `json:"expected_action"`
	Record         operation.Record `json:"record"`
	// Audit is the operator decisions that led to the record, where the
	// plan depends on them.
	Audit []review.AuditEntry `json:"audit"`
}

func fixtures(t *testing.T) []fixture {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "..", "testdata", "recovery", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no recovery fixtures: %v", err)
	}
	var out []fixture
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields() // a fixture that drifts from the record fails loudly
		var f fixture
		if err := dec.Decode(&f); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		f.Name = strings.TrimSuffix(filepath.Base(p), ".json")
		out = append(out, f)
	}
	return out
}

func TestFixturesSelectTheirAction(t *testing.T) {
	t.Parallel()
	phases := map[operation.Phase]bool{}
	for _, f := range fixtures(t) {
		phases[f.Record.Phase] = true
		plan := replay.PlanFor(&f.Record, replay.Evidence{Audit: f.Audit})
		if plan.Recommendation.Action != f.ExpectedAction {
			t.Errorf("%s: plan selects %s, fixture expects %s (%s)", f.Name, plan.Recommendation.Action, f.ExpectedAction, plan.Recommendation.Reason)
		}
		if plan.Phase != f.Record.Phase || (f.Record.Remote != nil && plan.RemoteState != f.Record.Remote.State) {
			t.Errorf("%s: plan mixes phase %s / remote %s", f.Name, plan.Phase, plan.RemoteState)
		}
		if len(plan.Checks) == 0 {
			t.Errorf("%s: plan lists no checks", f.Name)
		}
	}
	for _, p := range operation.Phases {
		if !phases[p] {
			t.Errorf("no fixture in phase %s", p)
		}
	}
}

func TestDispatchPlanShowsEveryAllowanceCheck(t *testing.T) {
	t.Parallel()
	rec := handlertest.Prepared("op-x")
	rec.EstimatedCredits = 99
	rec.Authorized = false
	plan := replay.PlanFor(&rec, replay.Evidence{})
	got := map[string]bool{}
	for _, c := range plan.Checks {
		got[c.Name] = c.OK
	}
	want := map[string]bool{"model": true, "spec_revision": true, "authorization": false, "budget": false, "never_submitted": true}
	for k, v := range want {
		if ok, seen := got[k]; !seen || ok != v {
			t.Errorf("check %s = %v (seen %t), want %v", k, ok, seen, v)
		}
	}
	if plan.Ready || plan.Recommendation.Effect != operation.EffectSubmitNew {
		t.Fatalf("plan %+v", plan)
	}
}

type env struct {
	store  store.Store
	out    *handlertest.Outbox
	clk    *clock.Manual
	sim    *genacesim.Simulator
	genace *genace.Client
	r      *replay.Replayer
}

func newEnv(t *testing.T, kind string) *env {
	st := handlertest.OpenStore(t, kind)
	out := &handlertest.Outbox{}
	clk := clock.NewManual(handlertest.Start)
	sim, c := handlertest.Sim(t, clk, genacesim.Config{})
	return &env{store: st, out: out, clk: clk, sim: sim, genace: c, r: &replay.Replayer{Store: st, Sender: out, Genace: c, Clock: clk}}
}

// load writes a fixture's record, and its audit entries through as many
// audited writes.
func (e *env) load(t *testing.T, f fixture) operation.Record {
	rec := f.Record
	rec.Revision = 0
	rec = handlertest.Create(t, e.store, rec)
	for _, entry := range f.Audit {
		entry.OperationID, entry.FromRevision, entry.Revision = rec.OperationID, rec.Revision, 0
		var err error
		if rec, err = e.store.UpdateWithAudit(context.Background(), rec, rec.Revision, entry); err != nil {
			t.Fatal(err)
		}
	}
	return rec
}

// jobOnGenace creates the job a POST for operationID creates, as the one
// whose answer was lost would have.
func (e *env) jobOnGenace(t *testing.T, operationID string) string {
	t.Helper()
	res := e.genace.Submit(context.Background(), genace.SubmitRequest{OperationID: operationID, Model: "flux-pro-2", Input: json.RawMessage(`{"prompt":"x"}`)}, 10*time.Second)
	if res.Outcome != genace.OutcomeAccepted {
		t.Fatalf("create a job for %s: %+v", operationID, res)
	}
	return res.JobID
}

func (e *env) audit(t *testing.T, id string) []review.AuditEntry {
	a, err := e.store.Audit(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestReplayEachFixture(t *testing.T) {
	t.Parallel()
	for _, kind := range handlertest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, kind)
			for _, f := range fixtures(t) {
				before := e.load(t, f)
				req := replay.Request{OperationID: before.OperationID, Action: f.ExpectedAction, Operator: "alice"}
				switch f.ExpectedAction {
				case operation.ActionReconcile:
					req.JobID = e.jobOnGenace(t, before.OperationID)
				case operation.ActionSettleOutside:
					req.Reason = "credit note CN-1 from accounting"
				case operation.ActionDispatch:
					req.Reason = "the confirmation was checked with Genace support"
				}
				res, err := e.r.Replay(context.Background(), req)
				if f.Record.Phase == operation.PhaseSubmitting {
					// A claim may be mid-POST: replay waits for it to become uncertain.
					if !errors.Is(err, replay.ErrNotReady) {
						t.Fatalf("%s: err %v, want ErrNotReady", f.Name, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", f.Name, err)
				}
				after := handlertest.Get(t, e.store, before.OperationID)
				entries := e.audit(t, before.OperationID)[len(f.Audit):]
				sent := e.out.Take()
				if f.ExpectedAction == operation.ActionAcknowledge {
					// Audited, the record untouched: the entry sits at
					// the revision it acknowledged.
					if after.Revision != before.Revision || len(entries) != 1 || len(sent) != 0 || res.Changed ||
						entries[0].Operator != "alice" || entries[0].Revision != before.Revision || res.Entry.Operator != "alice" {
						t.Fatalf("%s: acknowledging changed r%d→r%d, audit entries %+v, %d sent", f.Name, before.Revision, after.Revision, entries, len(sent))
					}
					continue
				}
				if after.Revision != before.Revision+1 || len(entries) != 1 {
					t.Fatalf("%s: r%d→r%d with %d audit entries; want one write and one entry", f.Name, before.Revision, after.Revision, len(entries))
				}
				a := entries[0]
				if a.Operator != "alice" || a.Action != f.ExpectedAction || a.Revision != after.Revision || a.FromRevision != before.Revision || a.ToPhase != after.Phase {
					t.Fatalf("%s: audit entry %+v", f.Name, a)
				}
				// Every action that writes says what follows it: an action
				// added without a row here fails.
				wantMsg, ok := map[operation.Action]message.Action{
					operation.ActionDispatch: message.ActionSubmitGeneration, operation.ActionObserve: message.ActionObserveGeneration,
					operation.ActionInspectAccounting: message.ActionObserveGeneration, operation.ActionDeliver: message.ActionDeliverArtifacts,
					operation.ActionReconcile: message.ActionObserveGeneration, operation.ActionSettleOutside: "",
				}[f.ExpectedAction]
				if !ok {
					t.Fatalf("%s: action %s has no follow-up row in this test", f.Name, f.ExpectedAction)
				}
				if wantMsg == "" {
					if len(sent) != 0 || !after.Terminal() || a.Reason != req.Reason || a.Credits != before.Outstanding() {
						t.Fatalf("%s: %s left %s/%s, sent %+v, audit %+v; want it terminal, nothing sent, reason and credits audited",
							f.Name, f.ExpectedAction, after.Phase, after.Settlement, sent, a)
					}
					continue
				}
				if len(sent) != 1 || sent[0].Env.Action != wantMsg || sent[0].Env.ExpectedRevision != after.Revision {
					t.Fatalf("%s: sent %+v, want one %s at r%d", f.Name, sent, wantMsg, after.Revision)
				}
			}
		})
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt")
	var accepted, uncertain fixture
	for _, f := range fixtures(t) {
		switch f.Name {
		case "accepted-job-known":
			accepted = f
		case "uncertain-lost-response":
			uncertain = f
		}
	}
	acc := e.load(t, accepted)
	unc := e.load(t, uncertain)
	tests := []struct {
		name string
		req  replay.Request
		want error
	}{
		{"wrong action (would POST)", replay.Request{OperationID: acc.OperationID, Action: operation.ActionDispatch, Operator: "bob"}, replay.ErrActionMismatch},
		{"missing operator", replay.Request{OperationID: acc.OperationID, Action: operation.ActionObserve}, replay.ErrBadRequest},
		{"unknown operation", replay.Request{OperationID: "op-nobody", Action: operation.ActionObserve, Operator: "bob"}, store.ErrNotFound},
		{"bad operation id", replay.Request{OperationID: "../etc", Action: operation.ActionObserve, Operator: "bob"}, replay.ErrBadRequest},
		{"reconcile without evidence", replay.Request{OperationID: unc.OperationID, Action: operation.ActionReconcile, Operator: "bob"}, replay.ErrBadRequest},
		{"reconcile with both", replay.Request{OperationID: unc.OperationID, Action: operation.ActionReconcile, Operator: "bob", JobID: "job_1", ConfirmedNotSubmitted: true}, replay.ErrBadRequest},
		{"job id on observe", replay.Request{OperationID: acc.OperationID, Action: operation.ActionObserve, Operator: "bob", JobID: "job_1"}, replay.ErrBadRequest},
		{"bad job id", replay.Request{OperationID: unc.OperationID, Action: operation.ActionReconcile, Operator: "bob", JobID: "https://x/y"}, replay.ErrBadRequest},
	}
	for _, tt := range tests {
		if _, err := e.r.Replay(context.Background(), tt.req); !errors.Is(err, tt.want) {
			t.Errorf("%s: err %v, want %v", tt.name, err, tt.want)
		}
	}
	for _, rec := range []operation.Record{acc, unc} {
		if got := handlertest.Get(t, e.store, rec.OperationID); got.Revision != rec.Revision || len(e.audit(t, rec.OperationID)) != 0 {
			t.Fatalf("%s changed: r%d, %d audit entries", rec.OperationID, got.Revision, len(e.audit(t, rec.OperationID)))
		}
	}
	if e.out.Len() != 0 {
		t.Fatal("bad input sent a message")
	}
}

func TestConfirmedNotSubmittedDoesNotDispatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt")
	for _, f := range fixtures(t) {
		if f.Name != "uncertain-lost-response" {
			continue
		}
		rec := e.load(t, f)
		res, err := e.r.Replay(context.Background(), replay.Request{OperationID: rec.OperationID, Action: operation.ActionReconcile, Operator: "carol", ConfirmedNotSubmitted: true, Reason: "support ticket: Genace has no job"})
		if err != nil {
			t.Fatal(err)
		}
		if res.After.Phase != operation.PhasePrepared || e.out.Len() != 0 || res.Entry.Decision != "confirmed-not-submitted" {
			t.Fatalf("phase %s, %d sent, decision %q: dispatch must stay a separate decision", res.After.Phase, e.out.Len(), res.Entry.Decision)
		}
		// The separate decision: the plan now says dispatch, with the allowance checks.
		if plan, err := e.r.Plan(context.Background(), rec.OperationID); err != nil || plan.Recommendation.Action != operation.ActionDispatch || !plan.Ready {
			t.Fatalf("plan after confirmation: %+v, %v", plan, err)
		}
		return
	}
	t.Fatal("fixture missing")
}

// moving wraps a store so the record changes right after replay reads
// it, as when an observer lands between plan and write.
type moving struct {
	store.Store
	once bool
}

func (m *moving) Get(ctx context.Context, id string) (operation.Record, error) {
	rec, err := m.Store.Get(ctx, id)
	if err != nil || m.once {
		return rec, err
	}
	m.once = true
	moved := rec
	moved.Counters.Observations++
	if _, err := m.Store.Update(ctx, moved, rec.Revision); err != nil {
		return operation.Record{}, err
	}
	return rec, nil
}

func TestReplayRefusesWhenTheRecordMoved(t *testing.T) {
	t.Parallel()
	for _, kind := range handlertest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, kind)
			e.r.Store = &moving{Store: e.store}
			for _, f := range fixtures(t) {
				if f.Name != "accepted-job-known" {
					continue
				}
				rec := e.load(t, f)
				_, err := e.r.Replay(context.Background(), replay.Request{OperationID: rec.OperationID, Action: operation.ActionObserve, Operator: "dave"})
				if !errors.Is(err, store.ErrConflict) {
					t.Fatalf("err %v, want a conflict", err)
				}
				if n := len(e.audit(t, rec.OperationID)); n != 0 || e.out.Len() != 0 {
					t.Fatalf("%d audit entries, %d sent after a refused replay", n, e.out.Len())
				}
			}
		})
	}
}

func TestCheckOperator(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"alice", true}, {"ops.eve-2@example.com", true}, {"alice+ops@example.com", true}, {"jörg_k", true}, {strings.Repeat("a", 64), true},
		{"", false}, {strings.Repeat("a", 65), false}, {"https://x.example/?X-Amz-Signature=abc", false}, {"eve smith", false},
		{"eve\nroot", false}, {"eve\t", false}, {"a/b", false}, {"sk_live:abc", false}, {"eve;rm", false},
	} {
		err := replay.CheckOperator(tc.name)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, replay.ErrBadRequest)) {
			t.Errorf("CheckOperator(%q) = %v, want ok=%t", tc.name, err, tc.ok)
		}
		if err != nil && strings.Contains(err.Error(), "Signature") {
			t.Errorf("CheckOperator echoes a URL: %v", err)
		}
	}
}
