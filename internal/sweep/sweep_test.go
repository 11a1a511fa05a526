package sweep_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/sweep"
)

func TestSweep(t *testing.T) {
	t.Parallel()
	for _, kind := range handlertest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			st := handlertest.OpenStore(t, kind)
			clk := clock.NewManual(handlertest.Start.Add(time.Hour))
			out := &handlertest.Outbox{}
			s := sweep.New(sweep.Deps{Store: st, Sender: out, Clock: clk, Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()}, sweep.Config{})
			now := clk.Now()
			mk := func(id string, f func(r *operation.Record)) operation.Record {
				r := handlertest.Prepared(id)
				f(&r)
				return handlertest.Create(t, st, r)
			}
			lost := mk("op-lost-chain", func(r *operation.Record) {
				r.Phase, r.RemoteJobID = operation.PhaseAccepted, "job_lost"
				r.Schedule = &operation.NextAction{Action: string(message.ActionObserveGeneration), Due: now.Add(-10 * time.Minute)}
			})
			mk("op-pending", func(r *operation.Record) {
				r.Phase, r.RemoteJobID = operation.PhaseAccepted, "job_pending"
				r.Schedule = &operation.NextAction{Action: string(message.ActionObserveGeneration), Due: now.Add(-time.Minute)}
			})
			deliver := mk("op-deliver", func(r *operation.Record) {
				r.Phase, r.RemoteJobID = operation.PhaseSucceeded, "job_deliver"
				r.Schedule = &operation.NextAction{Action: string(message.ActionDeliverArtifacts), Due: now.Add(-time.Hour)}
			})
			mk("op-old-claim", func(r *operation.Record) {
				r.Phase, r.Claim = operation.PhaseSubmitting, &operation.Claim{Owner: "gone", At: now.Add(-3 * time.Minute)}
			})
			mk("op-fresh-claim", func(r *operation.Record) {
				r.Phase, r.Claim = operation.PhaseSubmitting, &operation.Claim{Owner: "alive", At: now.Add(-30 * time.Second)}
			})
			mk("op-done", func(r *operation.Record) {
				r.Phase, r.RemoteJobID = operation.PhaseDelivered, "job_done"
				r.Schedule = &operation.NextAction{Action: string(message.ActionObserveGeneration), Due: now.Add(-time.Hour)}
			})
			mk("op-never", func(r *operation.Record) {}) // prepared, never dispatched: not the sweep's to dispatch
			// Dispatched (recorded), but the dispatch went stale: re-armed at the current revision.
			stale := mk("op-stale-dispatch", func(r *operation.Record) {
				r.Schedule = &operation.NextAction{Action: string(message.ActionSubmitGeneration), Due: now.Add(-10 * time.Minute)}
			})
			// Dispatched, but the user changed the request since: the dispatch is
			// dropped, and an operator told, until the request is re-authorized.
			unauthorized := mk("op-unauthorized", func(r *operation.Record) {
				r.SpecRevision = 2
				r.Schedule = &operation.NextAction{Action: string(message.ActionSubmitGeneration), Due: now.Add(-10 * time.Minute)}
			})

			res, err := s.Sweep(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Rearmed != 3 || res.ClaimsExpired != 1 || res.DispatchesDropped != 1 {
				t.Fatalf("result %+v, want 3 re-armed, 1 claim expired, 1 dispatch dropped", res)
			}
			sent := map[string]message.Envelope{}
			for _, m := range out.Take() {
				sent[m.Env.OperationID] = m.Env
			}
			if got := handlertest.Get(t, st, "op-lost-chain"); sent["op-lost-chain"].ExpectedRevision != got.Revision || got.Revision != lost.Revision+1 || sent["op-lost-chain"].Action != message.ActionObserveGeneration {
				t.Fatalf("lost chain: sent %+v, record r%d", sent["op-lost-chain"], got.Revision)
			}
			if env := sent["op-deliver"]; env.Action != message.ActionDeliverArtifacts || env.ExpectedRevision != deliver.Revision+1 {
				t.Fatalf("delivery: sent %+v", env)
			}
			if env := sent["op-stale-dispatch"]; env.Action != message.ActionSubmitGeneration || env.ExpectedRevision != stale.Revision+1 {
				t.Fatalf("stale dispatch: sent %+v", env)
			}
			if len(sent) != 3 {
				t.Fatalf("sent to %v; want only the three lost chains", sent)
			}
			if got := handlertest.Get(t, st, "op-old-claim"); got.Phase != operation.PhaseUncertain {
				t.Fatalf("old claim: %s", got.Phase)
			}
			if got := handlertest.Get(t, st, "op-fresh-claim"); got.Phase != operation.PhaseSubmitting {
				t.Fatalf("fresh claim touched: %s", got.Phase)
			}
			if got := handlertest.Get(t, st, "op-unauthorized"); got.Schedule != nil || got.Revision != unauthorized.Revision+1 {
				t.Fatalf("unauthorized dispatch kept: r%d schedule %+v", got.Revision, got.Schedule)
			}
			rv, _ := st.OpenReviews(context.Background())
			recommended := map[string]operation.Action{}
			for _, r := range rv {
				recommended[r.OperationID] = r.Recommended
			}
			if len(rv) != 2 || recommended["op-old-claim"] != operation.ActionReconcile || recommended["op-unauthorized"] != operation.ActionDispatch {
				t.Fatalf("reviews %+v", rv)
			}
			// A second run right after does nothing: the re-armed chains are pending again.
			if res, err := s.Sweep(context.Background()); err != nil || res.Rearmed != 0 || res.ClaimsExpired != 0 || res.DispatchesDropped != 0 || out.Len() != 0 {
				t.Fatalf("second run %+v %v, sent %d", res, err, out.Len())
			}
		})
	}
}

// Dispatches the allowance no longer covers sort first in the due index
// (their due times are the oldest). The sweep must move them out of the
// way, with a review each, so an overdue chain behind more of them than
// Limit is still re-armed, and must not read them again.
func TestSweepSkippedDispatchesDoNotStarveOverdueChains(t *testing.T) {
	t.Parallel()
	const limit = 3
	for _, kind := range handlertest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := handlertest.OpenStore(t, kind)
			clk := clock.NewManual(handlertest.Start.Add(time.Hour))
			out := &handlertest.Outbox{}
			s := sweep.New(sweep.Deps{Store: st, Sender: out, Clock: clk, Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()}, sweep.Config{Limit: limit})
			now := clk.Now()
			// More unauthorized dispatches than Limit, each older than the chain.
			unauthorized := []struct {
				id, check string
				edit      func(r *operation.Record)
			}{
				{"op-edited-after-429", "spec_revision", func(r *operation.Record) { r.SpecRevision, r.LastError = 2, "rate_limited" }},
				{"op-edited", "spec_revision", func(r *operation.Record) { r.SpecRevision = 3 }},
				{"op-revoked", "authorization", func(r *operation.Record) { r.Authorized = false }},
				{"op-over-budget", "budget", func(r *operation.Record) { r.EstimatedCredits = r.BudgetCredits + 1 }},
				{"op-no-model", "model", func(r *operation.Record) { r.Model = "" }},
			}
			created := map[string]operation.Record{}
			for i, u := range unauthorized {
				r := handlertest.Prepared(u.id)
				u.edit(&r)
				r.Schedule = &operation.NextAction{Action: string(message.ActionSubmitGeneration), Due: now.Add(-time.Hour + time.Duration(i)*time.Minute)}
				created[u.id] = handlertest.Create(t, st, r)
			}
			chain := handlertest.Prepared("op-lost-chain")
			chain.Phase, chain.RemoteJobID = operation.PhaseAccepted, "job_lost"
			chain.Schedule = &operation.NextAction{Action: string(message.ActionObserveGeneration), Due: now.Add(-10 * time.Minute)}
			chain = handlertest.Create(t, st, chain)

			var results []sweep.Result
			rearmed := false
			for run := 0; run < 4 && !rearmed; run++ {
				res, err := s.Sweep(ctx)
				if err != nil {
					t.Fatal(err)
				}
				results = append(results, res)
				for _, m := range out.Take() {
					if m.Env.OperationID != chain.OperationID {
						t.Fatalf("run %d sent %+v; only the lost chain may be re-armed", run, m.Env)
					}
					rearmed = m.Env.Action == message.ActionObserveGeneration && m.Env.ExpectedRevision == chain.Revision+1
				}
				clk.Advance(time.Minute)
			}
			if !rearmed {
				t.Fatalf("the overdue chain behind %d skipped dispatches (limit %d) was never re-armed; runs: %+v", len(unauthorized), limit, results)
			}

			open, err := st.OpenReviews(ctx)
			if err != nil {
				t.Fatal(err)
			}
			reviews := map[string][]string{}
			for _, rv := range open {
				reviews[rv.OperationID] = append(reviews[rv.OperationID], rv.ID)
				if rv.Recommended != operation.ActionDispatch || rv.Phase != operation.PhasePrepared || rv.Source != review.SourceSweep {
					t.Errorf("review %s: %s/%s/%s, want a sweep review recommending dispatch of a prepared operation", rv.ID, rv.Source, rv.Phase, rv.Recommended)
				}
				if !strings.Contains(rv.Reason, "re-authorize") {
					t.Errorf("review %s reason %q does not tell the operator what to do", rv.ID, rv.Reason)
				}
			}
			for _, u := range unauthorized {
				got := handlertest.Get(t, st, u.id)
				if got.Phase != operation.PhasePrepared || got.Schedule != nil || got.Revision != created[u.id].Revision+1 {
					t.Errorf("%s: %s r%d schedule %+v; want prepared, its stale dispatch dropped in one write", u.id, got.Phase, got.Revision, got.Schedule)
				}
				if len(reviews[u.id]) != 1 {
					t.Errorf("%s: reviews %v, want exactly one", u.id, reviews[u.id])
					continue
				}
				rv, err := st.GetReview(ctx, reviews[u.id][0])
				if err != nil {
					t.Fatal(err)
				}
				if rv.ErrorCategory != "precondition_"+u.check {
					t.Errorf("%s: review category %q, want precondition_%s", u.id, rv.ErrorCategory, u.check)
				}
			}
			if len(reviews) != len(unauthorized) {
				t.Errorf("reviews for %v; want one per dropped dispatch only", reviews)
			}
			// Out of the way for good: later runs do not read them again.
			clk.Advance(time.Hour)
			res, err := s.Sweep(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if res.Read != 1 || res.Rearmed != 1 {
				t.Fatalf("later run %+v: want only the (again overdue) chain read and re-armed", res)
			}
		})
	}
}
