package sweep_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/pipelinetest"
	"github.com/genjobs/genjobs/internal/sweep"
)

func TestSweep(t *testing.T) {
	t.Parallel()
	for _, kind := range pipelinetest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			st := pipelinetest.OpenStore(t, kind)
			clk := clock.NewManual(pipelinetest.Start.Add(time.Hour))
			out := &pipelinetest.Outbox{}
			s := sweep.New(sweep.Config{}, st, out, clk, slog.New(slog.DiscardHandler), metrics.Discard())
			now := clk.Now()
			mk := func(id string, f func(r *operation.Record)) operation.Record {
				r := pipelinetest.Prepared(id)
				f(&r)
				return pipelinetest.Create(t, st, r)
			}
			lost := mk("op-lost-chain", func(r *operation.Record) {
				r.Phase, r.RemoteJobID = operation.Accepted, "job_lost"
				r.Schedule = &operation.NextAction{Action: string(message.ObserveGeneration), Due: now.Add(-10 * time.Minute)}
			})
			mk("op-pending", func(r *operation.Record) {
				r.Phase, r.RemoteJobID = operation.Accepted, "job_pending"
				r.Schedule = &operation.NextAction{Action: string(message.ObserveGeneration), Due: now.Add(-time.Minute)}
			})
			deliver := mk("op-deliver", func(r *operation.Record) {
				r.Phase, r.RemoteJobID = operation.Succeeded, "job_deliver"
				r.Schedule = &operation.NextAction{Action: string(message.DeliverArtifacts), Due: now.Add(-time.Hour)}
			})
			mk("op-old-claim", func(r *operation.Record) {
				r.Phase, r.Claim = operation.Submitting, &operation.Claim{Owner: "gone", At: now.Add(-3 * time.Minute)}
			})
			mk("op-fresh-claim", func(r *operation.Record) {
				r.Phase, r.Claim = operation.Submitting, &operation.Claim{Owner: "alive", At: now.Add(-30 * time.Second)}
			})
			mk("op-done", func(r *operation.Record) {
				r.Phase, r.RemoteJobID = operation.Delivered, "job_done"
				r.Schedule = &operation.NextAction{Action: string(message.ObserveGeneration), Due: now.Add(-time.Hour)}
			})
			mk("op-never", func(r *operation.Record) {}) // prepared, never dispatched: not the sweep's to dispatch
			// Dispatched (recorded), but the dispatch went stale: re-armed at the current revision.
			stale := mk("op-stale-dispatch", func(r *operation.Record) {
				r.Schedule = &operation.NextAction{Action: string(message.SubmitGeneration), Due: now.Add(-10 * time.Minute)}
			})
			// Dispatched, but the user changed the request since: waits for re-authorization.
			mk("op-unauthorized", func(r *operation.Record) {
				r.SpecRevision = 2
				r.Schedule = &operation.NextAction{Action: string(message.SubmitGeneration), Due: now.Add(-10 * time.Minute)}
			})

			res, err := s.Sweep(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Rearmed != 3 || res.ClaimsExpired != 1 {
				t.Fatalf("result %+v, want 3 re-armed and 1 claim expired", res)
			}
			sent := map[string]message.Envelope{}
			for _, m := range out.Take() {
				sent[m.Env.OperationID] = m.Env
			}
			if got := pipelinetest.Get(t, st, "op-lost-chain"); sent["op-lost-chain"].ExpectedRevision != got.Revision || got.Revision != lost.Revision+1 || sent["op-lost-chain"].Action != message.ObserveGeneration {
				t.Fatalf("lost chain: sent %+v, record r%d", sent["op-lost-chain"], got.Revision)
			}
			if env := sent["op-deliver"]; env.Action != message.DeliverArtifacts || env.ExpectedRevision != deliver.Revision+1 {
				t.Fatalf("delivery: sent %+v", env)
			}
			if env := sent["op-stale-dispatch"]; env.Action != message.SubmitGeneration || env.ExpectedRevision != stale.Revision+1 {
				t.Fatalf("stale dispatch: sent %+v", env)
			}
			if len(sent) != 3 {
				t.Fatalf("sent to %v; want only the three lost chains", sent)
			}
			if got := pipelinetest.Get(t, st, "op-old-claim"); got.Phase != operation.Uncertain {
				t.Fatalf("old claim: %s", got.Phase)
			}
			if got := pipelinetest.Get(t, st, "op-fresh-claim"); got.Phase != operation.Submitting {
				t.Fatalf("fresh claim touched: %s", got.Phase)
			}
			rv, _ := st.OpenReviews(context.Background())
			if len(rv) != 1 || rv[0].OperationID != "op-old-claim" || rv[0].Recommended != operation.ActionReconcile {
				t.Fatalf("reviews %+v", rv)
			}
			// A second run right after does nothing: the re-armed chains are pending again.
			if res, err := s.Sweep(context.Background()); err != nil || res.Rearmed != 0 || res.ClaimsExpired != 0 || out.Len() != 0 {
				t.Fatalf("second run %+v %v, sent %d", res, err, out.Len())
			}
		})
	}
}
