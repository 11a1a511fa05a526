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
// conditional snapshot write and the follow-up send, with the embedded
// store. Every iteration observes a different accepted operation.
func BenchmarkObserveAction(b *testing.B) {
	e := newEnvB(b)
	msgs := make([]handlertest.Sent, b.N)
	for i := range b.N {
		msgs[i] = e.acceptB(b, fmt.Sprintf("op-%d", i))
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if resp, _ := e.obs.Handle(ctx, handlertest.Event(b, e.clk.Now(), msgs[i])); len(resp.BatchItemFailures) != 0 {
			b.Fatal("observation failed")
		}
		if i%256 == 0 {
			e.out.Take()
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "actions/s")
}

func newEnvB(b *testing.B) *env { return newEnv(b, "bolt", genacesim.Config{}, observe.Config{}) }
