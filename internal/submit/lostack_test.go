package submit_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/storetest"
	"github.com/genjobs/genjobs/internal/submit"
)

// afterPost arms a fault once the POST has returned, so it hits the
// write of the POST's outcome and not the claim before it.
type afterPost struct {
	inner submit.Genace
	arm   func()
}

func (g *afterPost) Submit(ctx context.Context, req genace.SubmitRequest, timeout time.Duration) genace.SubmitResult {
	res := g.inner.Submit(ctx, req, timeout)
	if g.arm != nil {
		g.arm()
	}
	return res
}

// handlePumped runs one batch while moving the manual clock to each timer
// the handler waits on once pump says so (the persist loop's backoff).
func handlePumped(t *testing.T, h *submit.Handler, clk *clock.Manual, pump *atomic.Bool, ev events.SQSEvent) []string {
	t.Helper()
	done := make(chan events.SQSEventResponse)
	go func() {
		resp, _ := h.Handle(context.Background(), ev)
		done <- resp
	}()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case resp := <-done:
			return handlertest.Failed(resp)
		case <-deadline:
			t.Fatal("handler did not finish within 30s")
		case <-time.After(time.Millisecond):
			if at, ok := clk.NextWaiter(); ok && pump.Load() {
				clk.Set(at)
			}
		}
	}
}

// TestLostAckOfUncertainWriteStillOpensAReview: the POST's outcome is
// unknown, the write that marks the operation uncertain is applied, and
// its answer is lost. The handler must still see its own write: the
// operation ends uncertain with a review for the operator, not parked
// silently (as if another worker had written first).
func TestLostAckOfUncertainWriteStillOpensAReview(t *testing.T) {
	t.Parallel()
	for _, loss := range []storetest.AckLoss{storetest.AckRetried, storetest.AckErrored} {
		for _, kind := range handlertest.StoreKinds() {
			t.Run(loss.String()+"/"+kind, func(t *testing.T) {
				t.Parallel()
				clk := clock.NewManual(handlertest.Start)
				sim, client := handlertest.Sim(t, clk, genacesim.Config{})
				la := storetest.LoseAcks(handlertest.OpenStore(t, kind))
				var pump atomic.Bool
				var disarm func() int
				g := &afterPost{inner: client, arm: func() { disarm = la.Lose(loss); pump.Store(true) }}
				out := &handlertest.Outbox{}
				h := submit.New(submit.Deps{Store: la.Store, Genace: g, Extender: &handlertest.Extender{}, Sender: out, Clock: clk, Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()}, submit.Config{})

				rec := handlertest.Create(t, la.Store, handlertest.Prepared("op-ack"))
				sim.ScriptPOST("op-ack", genacesim.AcceptThenDrop())
				failed := handlePumped(t, h, clk, &pump, handlertest.Event(t, clk.Now(), handlertest.Dispatch(rec)))
				if disarm == nil || disarm() == 0 {
					t.Fatal("the fault never fired: no write's answer was lost")
				}
				if len(failed) != 0 {
					t.Fatalf("failed records %v", failed)
				}
				got := handlertest.Get(t, la.Store, "op-ack")
				if got.Phase != operation.PhaseUncertain {
					t.Fatalf("phase %s, want uncertain", got.Phase)
				}
				reviews, err := la.Store.OpenReviews(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				var mine []string
				for _, r := range reviews {
					if r.OperationID == "op-ack" && r.Recommended == operation.ActionReconcile && r.Revision == got.Revision {
						mine = append(mine, r.ID)
					}
				}
				if len(mine) != 1 {
					t.Fatalf("open reviews %+v: want one asking to reconcile op-ack at revision %d (the handler took its own write for a lost race)", reviews, got.Revision)
				}
				if n := sim.PostCount("op-ack"); n != 1 {
					t.Fatalf("%d POSTs, want 1", n)
				}
			})
		}
	}
}

// TestLostAckOfClaimStillPosts: the claim is applied and its answer lost;
// the SDK's retry meets the applied claim. That claim is this worker's:
// it POSTs once and records the job, rather than dropping the message as
// a lost claim race and leaving a claim nobody follows.
func TestLostAckOfClaimStillPosts(t *testing.T) {
	t.Parallel()
	for _, kind := range handlertest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewManual(handlertest.Start)
			sim, client := handlertest.Sim(t, clk, genacesim.Config{})
			la := storetest.LoseAcks(handlertest.OpenStore(t, kind))
			out := &handlertest.Outbox{}
			h := submit.New(submit.Deps{Store: la.Store, Genace: client, Extender: &handlertest.Extender{}, Sender: out, Clock: clk, Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()}, submit.Config{})

			rec := handlertest.Create(t, la.Store, handlertest.Prepared("op-claim"))
			disarm := la.Lose(storetest.AckRetried) // the first conditional write is the claim
			resp, err := h.Handle(context.Background(), handlertest.Event(t, clk.Now(), handlertest.Dispatch(rec)))
			if err != nil {
				t.Fatal(err)
			}
			if lost := disarm(); lost != 1 {
				t.Fatalf("%d answers lost, want the claim's", lost)
			}
			if failed := handlertest.Failed(resp); len(failed) != 0 {
				t.Fatalf("failed records %v", failed)
			}
			got := handlertest.Get(t, la.Store, "op-claim")
			jobs := sim.JobsForOperation("op-claim")
			if got.Phase != operation.PhaseAccepted || len(jobs) != 1 || got.RemoteJobID != jobs[0] {
				t.Fatalf("record %s job %q, simulator jobs %v: want accepted with the one job", got.Phase, got.RemoteJobID, jobs)
			}
			if sent := out.Take(); len(sent) != 1 {
				t.Fatalf("sent %+v, want the first observation", sent)
			}
		})
	}
}

// barrierGet holds every Get until n of them have arrived, so n workers
// all read the same revision before any of them writes.
type barrierGet struct {
	store.Store
	arrived sync.WaitGroup
}

func newBarrierGet(st store.Store, n int) *barrierGet {
	b := &barrierGet{Store: st}
	b.arrived.Add(n)
	return b
}

func (b *barrierGet) Get(ctx context.Context, id string) (operation.Record, error) {
	rec, err := b.Store.Get(ctx, id)
	b.arrived.Done()
	b.arrived.Wait()
	return rec, err
}

// TestIdenticalLookingClaimsStayExclusive: two workers receive the same
// dispatch at the same instant (an SQS duplicate), with the same worker
// name, and both read the prepared record. The store recognises a write
// whose answer was lost by its content, so the two claims must differ:
// the loser must see a lost race, never take the winner's claim for its
// own and POST a second time.
func TestIdenticalLookingClaimsStayExclusive(t *testing.T) {
	t.Parallel()
	for _, kind := range handlertest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewManual(handlertest.Start) // never advanced: both claims carry the same time
			sim, client := handlertest.Sim(t, clk, genacesim.Config{})
			st := newBarrierGet(handlertest.OpenStore(t, kind), 2)
			rec := handlertest.Create(t, st, handlertest.Prepared("op-twice"))
			ev := handlertest.Event(t, clk.Now(), handlertest.Dispatch(rec))
			var wg sync.WaitGroup
			for i := range 2 {
				h := submit.New(submit.Deps{Store: st, Genace: client, Extender: &handlertest.Extender{}, Sender: &handlertest.Outbox{}, Clock: clk, Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()}, submit.Config{Worker: "submit"})
				ev := events.SQSEvent{Records: []events.SQSMessage{ev.Records[0]}}
				ev.Records[0].ReceiptHandle += "-receive-" + string(rune('a'+i)) // each receive has its own handle
				wg.Go(func() {
					if _, err := h.Handle(context.Background(), ev); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if n := sim.PostCount("op-twice"); n != 1 {
				t.Fatalf("%d POSTs for one operation: a worker took another's identical claim for its own", n)
			}
		})
	}
}
