package benchmark

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestVirtualProto(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		renders := make([]time.Duration, 20)
		for i := range renders {
			renders[i] = 95 * time.Second
		}
		lat := DefaultLatency
		res, err := RunPipeline(context.Background(), PipelineConfig{Renders: renders, Virtual: &lat, Spacing: 3 * time.Second, Timeout: time.Hour, KeepProcs: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Renders {
			t.Logf("%v gets %d detect %v", r.Length, r.GETs, r.Detection)
		}
		o := res.Invocations["observe"]
		t.Logf("observe: %d inv, %d rec, busy %v, GB-s/render %.3f peak %d", o.Count, o.Records, o.Busy, o.GBSeconds()/float64(len(renders)), o.PeakConcurrent)
	})
}
