package sweep_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store/storetest"
	"github.com/genjobs/genjobs/internal/sweep"
)

// TestLostAckOfExpiredClaimStillOpensAReview: the sweep marks a stale
// claim uncertain, the write is applied and its answer lost. An uncertain
// record leaves the sweep's index, so this sweep is the only one that
// will ever tell an operator: it must know the write as its own and open
// the review, not skip it as a lost race (or give up on a timeout).
func TestLostAckOfExpiredClaimStillOpensAReview(t *testing.T) {
	t.Parallel()
	for _, loss := range []storetest.AckLoss{storetest.AckRetried, storetest.AckErrored} {
		for _, kind := range handlertest.StoreKinds() {
			t.Run(loss.String()+"/"+kind, func(t *testing.T) {
				t.Parallel()
				la := storetest.LoseAcks(handlertest.OpenStore(t, kind))
				clk := clock.NewManual(handlertest.Start.Add(time.Hour))
				s := sweep.New(sweep.Deps{Store: la.Store, Sender: &handlertest.Outbox{}, Clock: clk, Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()}, sweep.Config{})
				r := handlertest.Prepared("op-old-claim")
				r.Phase, r.Claim = operation.PhaseSubmitting, &operation.Claim{Owner: "gone", At: clk.Now().Add(-3 * time.Minute)}
				handlertest.Create(t, la.Store, r)

				disarm := la.Lose(loss)
				res, err := s.Sweep(context.Background())
				if lost := disarm(); lost != 1 {
					t.Fatalf("%d answers lost, want the expiry's", lost)
				}
				if err != nil || res.ClaimsExpired != 1 {
					t.Fatalf("sweep %+v, %v: want the claim expired", res, err)
				}
				got := handlertest.Get(t, la.Store, "op-old-claim")
				if got.Phase != operation.PhaseUncertain || got.Revision != 2 {
					t.Fatalf("record %s r%d, want uncertain at r2", got.Phase, got.Revision)
				}
				rv, err := la.Store.GetReview(context.Background(), review.ParkedID("op-old-claim", got.Revision))
				if err != nil || !rv.Open || rv.Recommended != operation.ActionReconcile {
					t.Fatalf("review %+v, %v: want an open one asking to reconcile", rv, err)
				}
			})
		}
	}
}
