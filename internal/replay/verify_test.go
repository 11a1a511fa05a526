package replay_test

import (
	"context"
	"errors"
	"testing"

	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/replay"
	"github.com/genjobs/genjobs/internal/review"
)

// Hole 4: --job-id is evidence to verify, not to trust. A job Genace
// does not know, one whose metadata names another operation, or one
// another operation holds (on its record or only in a review, the sole
// trace of a job whose accepted outcome could not be written) is refused
// and the record left as it was; a job Genace confirms is attached.
func TestReconcileVerifiesTheJobID(t *testing.T) {
	t.Parallel()
	for _, kind := range handlertest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, kind)
			var base fixture
			for _, f := range fixtures(t) {
				if f.Name == "uncertain-lost-response" {
					base = f
				}
			}
			if base.Name == "" {
				t.Fatal("fixture uncertain-lost-response missing")
			}
			load := func(opID string) operation.Record {
				f := base
				f.Record.OperationID = opID
				return e.load(t, f)
			}
			ctx := context.Background()

			// op-holder's 202 could not be written: its job is named only in a review.
			holder := load("op-holder")
			heldJob := e.jobOnGenace(t, "op-held")
			rv := review.ForRecord("job:"+heldJob, review.SourceHandler, &holder, e.clk.Now())
			rv.RemoteJobID = heldJob
			if _, err := e.store.PutReview(ctx, rv); err != nil {
				t.Fatal(err)
			}

			for _, tc := range []struct {
				name, op string
				job      func() string
				want     error
			}{
				{"no such job on Genace", "op-missing", func() string { return "job_nonexistent00000000" }, replay.ErrUnverified},
				{"the job names another operation", "op-foreign", func() string { return e.jobOnGenace(t, "op-other") }, replay.ErrUnverified},
				{"another operation holds the job in a review", "op-held", func() string { return heldJob }, replay.ErrJobHeld},
				{"verified", "op-verified", func() string { return e.jobOnGenace(t, "op-verified") }, nil},
			} {
				before := load(tc.op)
				job := tc.job()
				res, err := e.r.Replay(ctx, replay.Request{OperationID: tc.op, Action: operation.ActionReconcile, Operator: "eve", JobID: job})
				if !errors.Is(err, tc.want) {
					t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
					continue
				}
				after, gerr := e.store.Get(ctx, tc.op)
				if gerr != nil {
					t.Fatal(gerr)
				}
				if tc.want != nil {
					if after.Revision != before.Revision || after.RemoteJobID != "" {
						t.Errorf("%s: refused, yet the record moved to revision %d with job %q", tc.name, after.Revision, after.RemoteJobID)
					}
					continue
				}
				if after.RemoteJobID != job || res.Entry.Verification != replay.Verified {
					t.Errorf("%s: record holds job %q (want %q), audit verification %q", tc.name, after.RemoteJobID, job, res.Entry.Verification)
				}
			}
		})
	}
}
