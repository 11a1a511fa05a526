package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store"
)

// benchRecord is a record of realistic size: an accepted operation with a
// snapshot, two outputs and a schedule, so it is in the Due index too.
func benchRecord(id string) operation.Record {
	return operation.Record{
		OperationID: id, Phase: operation.PhaseAccepted, UserID: "user-1", Model: "genace-v2",
		Input:      []byte(`{"prompt":"a lighthouse at dusk","size":"1024x1024"}`),
		Authorized: true, BudgetCredits: 500, EstimatedCredits: 120, RemoteJobID: "job-" + id,
		Remote: &operation.Snapshot{State: operation.RemoteRunning, Progress: 0.5,
			Credits:   operation.Credits{Reserved: 120, RefundState: operation.RefundNone},
			Outputs:   []operation.OutputDescriptor{{ContentType: "image/png", SizeBytes: 1 << 20, SHA256: "00"}, {ContentType: "image/png", SizeBytes: 1 << 20, SHA256: "11"}},
			CreatedAt: base, UpdatedAt: base, ObservedAt: base},
		Schedule:   &operation.NextAction{Action: "observe_generation", Due: base.Add(time.Minute)},
		Timestamps: operation.Timestamps{Created: base, Updated: base},
	}
}

var benchSeq atomic.Int64

func benchID(b *testing.B) string {
	return fmt.Sprintf("bench-%d-%d-%s", time.Now().UnixNano(), benchSeq.Add(1), b.Name())
}

func reportOpsPerSecond(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "ops/s")
	}
}

// BenchUpdate measures revision-guarded writes: serially on one record
// (each write's latency), and in parallel on a record per goroutine (the
// store's write throughput; bbolt serialises them, DynamoDB does not).
func BenchUpdate(b *testing.B, st store.Store) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		rec, err := st.Create(ctx, benchRecord(benchID(b)))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			rec.Counters.Observations++
			if rec, err = st.Update(ctx, rec, rec.Revision); err != nil {
				b.Fatal(err)
			}
		}
		reportOpsPerSecond(b)
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			rec, err := st.Create(ctx, benchRecord(benchID(b)))
			if err != nil {
				b.Error(err)
				return
			}
			for pb.Next() {
				rec.Counters.Observations++
				if rec, err = st.Update(ctx, rec, rec.Revision); err != nil {
					b.Error(err)
					return
				}
			}
		})
		reportOpsPerSecond(b)
	})
}

// BenchGet measures consistent point reads of one record.
func BenchGet(b *testing.B, st store.Store) {
	ctx := context.Background()
	rec, err := st.Create(ctx, benchRecord(benchID(b)))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := st.Get(ctx, rec.OperationID); err != nil {
			b.Fatal(err)
		}
	}
	reportOpsPerSecond(b)
}
