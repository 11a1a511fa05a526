package submit_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/submit"
)

// BenchmarkSubmitAction measures one dispatch handled end to end: load,
// claim (a conditional write), one POST to the simulator over loopback,
// the accepted write and the follow-up send, on the embedded store with
// and without fsync (handlertest.BenchStores): CPU per action apart from
// the disk's latency.
func BenchmarkSubmitAction(b *testing.B) {
	for _, kind := range handlertest.BenchStores {
		b.Run("store="+kind, func(b *testing.B) { benchSubmit(b, kind) })
	}
}

func benchSubmit(b *testing.B, kind string) {
	clk := clock.NewManual(handlertest.Start)
	_, client := handlertest.Sim(b, clk, genacesim.Config{})
	st := handlertest.OpenStore(b, kind)
	out := &handlertest.Outbox{}
	h := submit.New(submit.Deps{Store: st, Genace: client, Extender: &handlertest.Extender{}, Sender: out, Clock: clk, Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()}, submit.Config{})
	events := make([]handlertest.Sent, b.N)
	for i := range b.N {
		events[i] = handlertest.Dispatch(handlertest.Create(b, st, handlertest.Prepared(fmt.Sprintf("op-%d", i))))
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := handlertest.CPUTime()
	for i := range b.N {
		if resp, _ := h.Handle(ctx, handlertest.Event(b, clk.Now(), events[i])); len(resp.BatchItemFailures) != 0 {
			b.Fatal("dispatch failed")
		}
		if i%256 == 0 {
			out.Take()
		}
	}
	handlertest.ReportAction(b, cpu0)
}
