package observe_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store/storetest"
	"github.com/genjobs/genjobs/internal/submit"
)

// TestLostAckOfObservationStillSchedulesTheNext: the observation's write
// is applied and its answer lost. The observer must know its own write
// and send the next observation; taking it for another observer's write
// would leave the chain with no message and nobody told.
func TestLostAckOfObservationStillSchedulesTheNext(t *testing.T) {
	t.Parallel()
	for _, loss := range []storetest.AckLoss{storetest.AckRetried, storetest.AckErrored} {
		for _, kind := range handlertest.StoreKinds() {
			t.Run(loss.String()+"/"+kind, func(t *testing.T) {
				t.Parallel()
				clk := clock.NewManual(handlertest.Start)
				sim, client := handlertest.Sim(t, clk, genacesim.Config{})
				la := storetest.LoseAcks(handlertest.OpenStore(t, kind))
				out := &handlertest.Outbox{}
				ps := testPolicies()
				ps.Default.LongPoll = 0 // an immediate GET: nothing waits on the manual clock
				delays := schedule.NewObservation(ps)
				delays.Rand = func() float64 { return 0.5 }
				log := slog.New(slog.DiscardHandler)
				obs := observe.New(observe.Deps{Store: la.Store, Genace: client, Delays: delays, Extender: &handlertest.Extender{}, Sender: out, Clock: clk, Log: log, Metrics: metrics.Discard()}, observe.Config{})
				sub := submit.New(submit.Deps{Store: la.Store, Genace: client, Extender: &handlertest.Extender{}, Sender: out, Clock: clk, Log: log, Metrics: metrics.Discard()}, submit.Config{})

				rec := handlertest.Create(t, la.Store, handlertest.Prepared("op-obs"))
				if _, err := sub.Handle(context.Background(), handlertest.Event(t, clk.Now(), handlertest.Dispatch(rec))); err != nil {
					t.Fatal(err)
				}
				first := out.Take()
				if len(first) != 1 || first[0].Env.Action != message.ActionObserveGeneration {
					t.Fatalf("submit sent %+v, want the first observation", first)
				}
				accepted := handlertest.Get(t, la.Store, "op-obs")

				clk.Advance(time.Second)
				disarm := la.Lose(loss)
				resp, err := obs.Handle(context.Background(), handlertest.Event(t, clk.Now(), first[0]))
				if err != nil {
					t.Fatal(err)
				}
				if lost := disarm(); lost != 1 {
					t.Fatalf("%d answers lost, want the observation's", lost)
				}
				if loss == storetest.AckErrored {
					// The write's outcome is unknown: the message fails and
					// comes back, and its redelivery finds its own write.
					if failed := handlertest.Failed(resp); len(failed) != 1 {
						t.Fatalf("failed records %v, want the observation to be retried", failed)
					}
					if resp, err = obs.Handle(context.Background(), handlertest.Event(t, clk.Now(), first[0])); err != nil {
						t.Fatal(err)
					}
				}
				if failed := handlertest.Failed(resp); len(failed) != 0 {
					t.Fatalf("failed records %v", failed)
				}
				got := handlertest.Get(t, la.Store, "op-obs")
				if got.Revision != accepted.Revision+1 || got.Counters.Observations != 1 || got.Schedule == nil {
					t.Fatalf("record r%d with %d observations, schedule %+v: want the observation saved once at r%d",
						got.Revision, got.Counters.Observations, got.Schedule, accepted.Revision+1)
				}
				next := out.Take()
				if len(next) != 1 || next[0].Env.Action != message.ActionObserveGeneration || next[0].Env.ExpectedRevision != got.Revision {
					t.Fatalf("sent %+v, want the next observation at r%d (the observer took its own write for a lost race)", next, got.Revision)
				}
				if n := sim.GetCount(got.RemoteJobID); n != 1 {
					t.Fatalf("%d GETs, want 1", n)
				}
			})
		}
	}
}
