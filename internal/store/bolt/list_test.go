package bolt_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
)

// TestOperationIDs: every record is listed once, in id order, and nothing
// else the file holds (reviews, audit entries) is.
func TestOperationIDs(t *testing.T) {
	t.Parallel()
	st := openTemp(t)
	defer st.Close()
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, id := range []string{"op-c", "op-a", "op-b"} {
		if _, err := st.Create(ctx, operation.Record{OperationID: id, Phase: operation.PhasePrepared, Timestamps: operation.Timestamps{Created: now, Updated: now}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.PutReview(ctx, review.Record{ID: "r-1", OperationID: "op-z", Open: true, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	ids, err := st.OperationIDs(ctx)
	if err != nil || !slices.Equal(ids, []string{"op-a", "op-b", "op-c"}) {
		t.Fatalf("OperationIDs = %v, %v; want op-a, op-b, op-c", ids, err)
	}
}
