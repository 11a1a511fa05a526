package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/replay"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store/bolt"
)

// benchOps is the store size the console must stay fast on (issue 14:
// a page in under 200 ms on 10,000 operations).
const benchOps = 10_000

// bigStore holds benchOps operations made from the recovery fixtures,
// each with an open review: the worst case for the reviews page.
func bigStore(b *testing.B) *bolt.Store {
	b.Helper()
	st, err := bolt.OpenWith(filepath.Join(b.TempDir(), "big.db"), bolt.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "recovery", "*.json"))
	var fixtures []operation.Record
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		var fx struct {
			Record operation.Record `json:"record"`
		}
		if err := json.Unmarshal(raw, &fx); err != nil {
			b.Fatal(err)
		}
		fixtures = append(fixtures, fx.Record)
	}
	ctx := context.Background()
	for i := range benchOps {
		rec := fixtures[i%len(fixtures)].Clone()
		rec.OperationID, rec.Revision, rec.RemoteJobID = fmt.Sprintf("op-bench-%05d", i), 0, ""
		if rec.Phase == operation.PhaseAccepted || rec.Phase == operation.PhaseSucceeded {
			rec.RemoteJobID = fmt.Sprintf("job_bench%05d", i)
		}
		saved, err := st.Create(ctx, rec)
		if err != nil {
			b.Fatal(err)
		}
		at := handlertest.Start.Add(time.Duration(i) * time.Second)
		if _, err := st.PutReview(ctx, review.ForRecord(review.ParkedID(saved.OperationID, saved.Revision), review.SourceSweep, &saved, at)); err != nil {
			b.Fatal(err)
		}
	}
	return st
}

// BenchmarkPages loads each page from a store of benchOps operations.
func BenchmarkPages(b *testing.B) {
	st := bigStore(b)
	clk := clock.NewManual(now)
	srv, err := New(Config{Store: st, Replayer: &replay.Replayer{Store: st, Clock: clk}, Clock: clk, Operator: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	for _, page := range []string{"reviews", "reviews?model=flux-pro-2", "reviews?op=op-bench-0999", "op/op-bench-04242"} {
		b.Run("/"+page, func(b *testing.B) {
			for b.Loop() {
				w := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodGet, srv.root+page, nil)
				req.AddCookie(&http.Cookie{Name: sessionCookie, Value: srv.session})
				srv.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("GET %s: %d", page, w.Code)
				}
			}
		})
	}
}
