package sweep_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
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

// failingReviews fails the store's next PutReview, as a sweep that dies
// (or loses its connection) right there would leave it.
type failingReviews struct {
	store.Store
	fail bool
}

func (f *failingReviews) PutReview(ctx context.Context, r review.Record) (bool, error) {
	if f.fail {
		f.fail = false
		return false, errors.New("connection reset")
	}
	return f.Store.PutReview(ctx, r)
}

// TestExpiredClaimIsNeverUncertainWithoutReview: the sweep's review of an
// expired claim fails. The record must not be left uncertain (out of the
// sweep's index) with no review: the next run must still tell an
// operator. Before, the sweep wrote uncertain first and the review after,
// so the failed review was never written again.
func TestExpiredClaimIsNeverUncertainWithoutReview(t *testing.T) {
	t.Parallel()
	for _, kind := range handlertest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			st := &failingReviews{Store: handlertest.OpenStore(t, kind)}
			clk := clock.NewManual(handlertest.Start.Add(time.Hour))
			s := sweep.New(sweep.Deps{Store: st, Sender: &handlertest.Outbox{}, Clock: clk, Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()}, sweep.Config{})
			r := handlertest.Prepared("op-old-claim")
			r.Phase, r.Claim = operation.PhaseSubmitting, &operation.Claim{Owner: "gone", At: clk.Now().Add(-3 * time.Minute)}
			handlertest.Create(t, st, r)

			st.fail = true
			if _, err := s.Sweep(context.Background()); err == nil {
				t.Fatal("the sweep whose review failed reported no error")
			}
			clk.Advance(5 * time.Minute)
			if _, err := s.Sweep(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := handlertest.Get(t, st, "op-old-claim")
			open, err := st.OpenReviewsOf(context.Background(), "op-old-claim")
			if err != nil {
				t.Fatal(err)
			}
			if got.Phase != operation.PhaseUncertain || len(open) != 1 || open[0].ID != review.ParkedID("op-old-claim", got.Revision) {
				t.Fatalf("record %s r%d with open reviews %+v; want uncertain with its one review", got.Phase, got.Revision, open)
			}
		})
	}
}
