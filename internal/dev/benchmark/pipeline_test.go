package benchmark

import (
	"context"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/topology"
)

// The harness runs every render to delivery through the real handlers and
// counts what the DynamoDB, SQS and S3 adapters would have been asked.
func TestPipelineCountsEachAction(t *testing.T) {
	const n = 20
	res, err := RunPipeline(context.Background(), PipelineConfig{Operations: n, QueueFor: 2 * time.Second, RunFor: time.Second,
		Dir: t.TempDir(), Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != n || res.DeadLettered != 0 || res.GenacePOSTs != n {
		t.Fatalf("delivered %d, dead-lettered %d, POSTs %d; want %d, 0, %d", res.Delivered, res.DeadLettered, res.GenacePOSTs, n, n)
	}
	// One observation message chains its long polls from queued to
	// finished: one action per render.
	want := map[string]int64{topology.Submit: n, topology.Observe: n, topology.Deliver: n}
	for fn, a := range want {
		if got := res.Functions[fn].Actions; got != a {
			t.Errorf("%s actions %d, want %d", fn, got, a)
		}
		f := res.Functions[fn]
		// A receive per batch; observe's feed adds its own, at least one
		// per invocation, and a delete per record it took (they were once
		// left out of the bill).
		receives := f.Requests.SQSReceive == float64(f.Batches)
		if fn == topology.Observe {
			receives = f.Requests.SQSReceive >= float64(2*f.Batches) && f.Requests.SQSDelete >= float64(f.Batches)
		}
		if f.Batches < 1 || f.Batches > f.Actions || !receives || f.Requests.LambdaInvocations != float64(f.Batches) {
			t.Errorf("%s: %d batches, %+v", fn, f.Batches, f.Requests)
		}
	}
	// The operation's reviews are read twice per render, not per write:
	// when the job id is recorded (submit) and when it ends (deliver).
	for fn, w := range map[string]Requests{
		topology.Submit:  {DynamoGet: 1, DynamoPut: 2, DynamoQuery: 1, SQSSend: 1},
		topology.Observe: {DynamoGet: 1, DynamoPut: 2, SQSSend: 1}, // a write per change: running, succeeded
		// The delivered write, then its completion event sent and marked.
		topology.Deliver: {DynamoGet: 1, DynamoPut: 2, DynamoQuery: 1, S3Head: 1, S3Put: 1, Events: 1},
	} {
		got := res.PerAction(fn)
		if got.DynamoGet != w.DynamoGet || got.DynamoPut != w.DynamoPut || got.DynamoQuery != w.DynamoQuery || got.SQSSend != w.SQSSend || got.S3Head != w.S3Head || got.S3Put != w.S3Put || got.Events != w.Events || got.DynamoTransact != 0 {
			t.Errorf("%s per action %+v, want %+v", fn, got, w)
		}
		if got.RRU < got.DynamoGet || got.WRU < got.DynamoPut {
			t.Errorf("%s: %v RRU for %v reads, %v WRU for %v writes", fn, got.RRU, got.DynamoGet, got.WRU, got.DynamoPut)
		}
	}
	if res.App.DynamoPut != n || res.App.SQSSend != n {
		t.Errorf("application: %+v", res.App)
	}
	// GETs: two observations and delivery's fresh read per render.
	if res.GenaceGETs != 3*n {
		t.Errorf("Genace GETs %d, want %d", res.GenaceGETs, 3*n)
	}
}

func TestPipelineInstantRenders(t *testing.T) {
	res, err := RunPipeline(context.Background(), PipelineConfig{Operations: 50, Dir: t.TempDir(), Policies: instantPolicy(), Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// On disk each operation's writes and Put end in fsyncs of the store
	// and the pack (shared, but at least one of each).
	if res.Delivered != 50 || res.Actions() != 150 || res.Elapsed <= 0 || res.Syncs < 4 || res.Syncs > 50*12 {
		t.Errorf("delivered %d in %v with %d actions and %d fsyncs", res.Delivered, res.Elapsed, res.Actions(), res.Syncs)
	}
}

func BenchmarkPipelineInstant(b *testing.B) {
	parent := b.TempDir()
	for b.Loop() {
		res, err := RunPipeline(context.Background(), PipelineConfig{Operations: 200, Dir: parent, Policies: instantPolicy(), Timeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(res.Delivered)/res.Elapsed.Seconds(), "ops/s")
		b.ReportMetric(float64(res.CPU.Microseconds())/float64(res.Actions()), "cpu-µs/action")
	}
}
