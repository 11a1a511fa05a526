package replay_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/replay"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/submit"
)

// pipeline is the real submit and observe handlers on the simulator, with
// the recorded follow-ups delivered by the test.
type pipeline struct {
	env
	sub *submit.Handler
	obs *observe.Handler
	del *schedule.Observation
}

func newPipeline(t *testing.T, kind string) *pipeline {
	p := &pipeline{env: *newEnv(t, kind)}
	c := p.genace
	ps := schedule.DefaultPolicies()
	ps.Default = schedule.Policy{LongPoll: 0, Base: 5 * time.Second, Cap: time.Minute, Multiplier: 2}
	p.del = schedule.NewObservation(ps)
	p.del.DefaultBudgets = operation.Budgets{MaxObservations: 50, Polling: time.Hour, Accounting: 10 * time.Minute}
	log := slog.New(slog.DiscardHandler)
	p.sub = submit.New(submit.Deps{Store: p.store, Genace: c, Extender: &handlertest.Extender{}, Sender: p.out, Clock: p.clk, Log: log, Metrics: metrics.Discard()}, submit.Config{})
	p.obs = observe.New(observe.Deps{Store: p.store, Genace: c, Delays: p.del, Extender: &handlertest.Extender{}, Sender: p.out, Clock: p.clk, Log: log, Metrics: metrics.Discard()}, observe.Config{})
	return p
}

// run delivers recorded messages to their handlers until none is left.
func (p *pipeline) run(t *testing.T, max int) {
	t.Helper()
	for i := 0; i < max; i++ {
		sent := p.out.Take()
		if len(sent) == 0 {
			return
		}
		for _, s := range sent {
			p.clk.Advance(s.Delay)
			ev := handlertest.Event(t, p.clk.Now(), s)
			switch s.Env.Action {
			case message.ActionSubmitGeneration:
				_, _ = p.sub.Handle(context.Background(), ev)
			case message.ActionObserveGeneration:
				_, _ = p.obs.Handle(context.Background(), ev)
			}
		}
	}
}

// The seed: replay an accepted operation's message twice and confirm no
// creation request occurs.
func TestReplayingAnAcceptedOperationNeverPosts(t *testing.T) {
	t.Parallel()
	for _, kind := range handlertest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p := newPipeline(t, kind)
			rec := handlertest.Create(t, p.store, handlertest.Prepared("op-acc"))
			dispatch := handlertest.Dispatch(rec)
			_, _ = p.sub.Handle(context.Background(), handlertest.Event(t, p.clk.Now(), dispatch))
			p.out.Take() // the observation chain is "lost"; the operator replays
			// The dead-lettered dispatch, redriven twice by mistake.
			for range 2 {
				_, _ = p.sub.Handle(context.Background(), handlertest.Event(t, p.clk.Now(), dispatch))
			}
			// The operator's replay, twice.
			for range 2 {
				if _, err := p.r.Replay(context.Background(), replay.Request{OperationID: "op-acc", Action: operation.ActionObserve, Operator: "ops"}); err != nil {
					t.Fatal(err)
				}
			}
			p.run(t, 50)
			if n := p.sim.PostCount("op-acc"); n != 1 {
				t.Fatalf("%d creation requests reached Genace, want the original 1", n)
			}
			if got := handlertest.Get(t, p.store, "op-acc"); got.Phase != operation.PhaseSucceeded {
				t.Fatalf("phase %s, want the observation chain to finish", got.Phase)
			}
		})
	}
}

// The seed: a reconcile-jobs --fail job is never settled by reading it
// again (inspect_accounting parks it after the accounting budget); once
// parked, the plan is settle_outside, which needs the operator's reason
// and closes it: failed and settled, with no POST.
func TestReconcileFailIsNeverSettledByReplay(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, "bolt")
	rec := handlertest.Create(t, p.store, handlertest.Prepared("op-rf"))
	_, _ = p.sub.Handle(context.Background(), handlertest.Event(t, p.clk.Now(), handlertest.Dispatch(rec)))
	p.sim.Reconcile(handlertest.Get(t, p.store, "op-rf").RemoteJobID)
	p.run(t, 50)
	got := handlertest.Get(t, p.store, "op-rf")
	if got.Settlement == operation.SettlementSettled || got.Phase != operation.PhaseFailed || got.Parked == nil {
		t.Fatalf("%s/%s parked=%v; a failed state alone must never settle it", got.Phase, got.Settlement, got.Parked)
	}
	if plan, err := p.r.Plan(context.Background(), "op-rf"); err != nil || plan.Recommendation.Action != operation.ActionSettleOutside {
		t.Fatalf("plan %+v, %v", plan.Recommendation, err)
	}
	if _, err := p.r.Replay(context.Background(), replay.Request{OperationID: "op-rf", Action: operation.ActionInspectAccounting, Operator: "acct"}); !errors.Is(err, replay.ErrActionMismatch) {
		t.Fatalf("inspect_accounting on a parked refund: %v, want ErrActionMismatch", err)
	}
	if _, err := p.r.Replay(context.Background(), replay.Request{OperationID: "op-rf", Action: operation.ActionSettleOutside, Operator: "acct"}); !errors.Is(err, replay.ErrBadRequest) {
		t.Fatalf("settle_outside without a reason: %v, want ErrBadRequest", err)
	}
	res, err := p.r.Replay(context.Background(), replay.Request{OperationID: "op-rf", Action: operation.ActionSettleOutside, Operator: "acct", Reason: "credit note CN-7"})
	if err != nil {
		t.Fatal(err)
	}
	p.run(t, 50)
	got = handlertest.Get(t, p.store, "op-rf")
	if got.Settlement != operation.SettlementSettled || !got.Terminal() || res.Entry.Credits != 10 || res.Entry.Reason != "credit note CN-7" || len(res.Closed) != 1 {
		t.Fatalf("after settle_outside: %s/%s, audit %+v, closed %v", got.Phase, got.Settlement, res.Entry, res.Closed)
	}
	if p.sim.PostCount("op-rf") != 1 {
		t.Fatal("settling POSTed")
	}
}
