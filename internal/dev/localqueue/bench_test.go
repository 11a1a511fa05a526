package localqueue

import (
	"context"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
)

// BenchmarkSendReceiveDelete measures one message's full round trip on a
// queue that already holds a backlog (delayed messages, so the heap is
// not trivially small).
func BenchmarkSendReceiveDelete(b *testing.B) {
	ctx := context.Background()
	br := New(clock.NewManual(t0))
	url, err := br.Create("bench", Config{})
	if err != nil {
		b.Fatal(err)
	}
	for range 1000 {
		if _, err := br.Send(ctx, url, []byte("backlog"), time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	body := []byte(`{"action":"submit_generation","operation_id":"op-123"}`)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := br.Send(ctx, url, body, 0); err != nil {
			b.Fatal(err)
		}
		msgs, err := br.Receive(ctx, url, 1, 0)
		if err != nil || len(msgs) != 1 {
			b.Fatalf("Receive = %d, %v", len(msgs), err)
		}
		if err := br.Delete(ctx, url, msgs[0].ReceiptHandle); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
