package observe_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/observe"
)

// BenchmarkObserveAction measures one observation handled end to end: load,
// one GET of the job from the simulator over loopback (no long poll), the
// conditional snapshot write and the follow-up send, on the embedded store
// with and without fsync (handlertest.BenchStores): CPU per action apart
// from the disk's latency. Every iteration observes a different accepted
// operation.
func BenchmarkObserveAction(b *testing.B) {
	for _, kind := range handlertest.BenchStores {
		b.Run("store="+kind, func(b *testing.B) { benchObserve(b, kind) })
	}
}

func benchObserve(b *testing.B, kind string) {
	e := newEnv(b, kind, genacesim.Config{}, observe.Config{})
	msgs := make([]handlertest.Sent, b.N)
	for i := range b.N {
		msgs[i] = e.acceptB(b, fmt.Sprintf("op-%d", i))
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := handlertest.CPUTime()
	for i := range b.N {
		if resp, _ := e.obs.Handle(ctx, handlertest.Event(b, e.clk.Now(), msgs[i])); len(resp.BatchItemFailures) != 0 {
			b.Fatal("observation failed")
		}
		if i%256 == 0 {
			e.out.Take()
		}
	}
	handlertest.ReportAction(b, cpu0)
}
