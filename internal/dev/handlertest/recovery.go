package handlertest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

// SeedRecovery writes the recovery fixtures (testdata/recovery, a record
// per recovery-matrix row) into st, each at revision 1, with a review for
// each parked record, as automation would have left them.
func SeedRecovery(t testing.TB, st store.Store) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(moduleRoot(t), "testdata", "recovery", "*.json"))
	if len(files) < 10 {
		t.Fatalf("only %d recovery fixtures", len(files))
	}
	ctx := context.Background()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var fx struct {
			Record operation.Record `json:"record"`
		}
		if err := json.Unmarshal(b, &fx); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		fx.Record.Revision = 0
		rec, err := st.Create(ctx, fx.Record)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Parked != nil {
			if _, err := st.PutReview(ctx, review.ForRecord(review.ParkedID(rec.OperationID, rec.Revision), review.SourceHandler, &rec, Start)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// moduleRoot is the folder holding go.mod, above the test's own.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = parent
	}
}
