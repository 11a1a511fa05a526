package handlertest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/genjobs/genjobs/internal/dev/modroot"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

// SeedRecovery writes the recovery fixtures (testdata/recovery, a record
// per recovery-matrix row) into st, each at revision 1, with a review for
// each parked record, as automation would have left them.
func SeedRecovery(t testing.TB, st store.Store) {
	t.Helper()
	root, err := modroot.Find("")
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "testdata", "recovery", "*.json"))
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
