package genace_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/genace"
)

// BenchmarkSubmit measures one POST round trip against the simulator over
// loopback, including JSON encoding and strict decoding.
func BenchmarkSubmit(b *testing.B) {
	e := newEnv(b, genacesim.Config{})
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		res := e.client.Submit(ctx, req("bench-"+strconv.Itoa(i)), 5*time.Second)
		if res.Outcome != genace.OutcomeAccepted {
			b.Fatal(res.Err)
		}
	}
}

// BenchmarkGet measures one immediate (wait=0) GET of a succeeded job with
// a freshly signed output URL.
func BenchmarkGet(b *testing.B) {
	e := newEnv(b, genacesim.Config{})
	ctx := context.Background()
	res := e.client.Submit(ctx, req("bench"), 5*time.Second)
	if res.Outcome != genace.OutcomeAccepted {
		b.Fatal(res.Err)
	}
	e.clk.Advance(time.Minute)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		j, err := e.client.Get(ctx, res.JobID, 0, 5*time.Second)
		if err != nil || j.State != genace.RemoteSucceeded {
			b.Fatal(err)
		}
	}
}
