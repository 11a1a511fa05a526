package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/worker"
)

// listing counts the reads of an operation's reviews, the cost Emit must
// spare ordinary writes.
type listing struct {
	store.Store
	mu    sync.Mutex
	lists int
}

func (l *listing) OpenReviewsOf(ctx context.Context, operationID string) ([]review.Record, error) {
	l.mu.Lock()
	l.lists++
	l.mu.Unlock()
	return l.Store.OpenReviewsOf(ctx, operationID)
}

func (l *listing) count() int { l.mu.Lock(); defer l.mu.Unlock(); return l.lists }

const (
	job   = "job_late"
	other = "job_other"
)

// at builds a record in phase p; job "" leaves it without a job id.
func at(p operation.Phase, jobID string, observations int) func(*operation.Record) {
	return func(r *operation.Record) {
		r.Phase, r.RemoteJobID, r.Counters.Observations = p, jobID, observations
		if p == operation.PhaseUncertain {
			r.Parked = &operation.ParkedState{Reason: "post_outcome_unknown", At: handlertest.Start}
		}
	}
}

// A review as its writers make them: by the worker's Emitter for a parked record
// (ParkedID), by submit's keepJobID for a job id it could not attach
// ("job:"), by triage for a dead-lettered message ("dlq:").
type planted struct {
	id          string
	recommended operation.Action
	jobID       string
	// closed: the write must close it, with a reason that contains this.
	closed string
}

// Late evidence that resolves an operation closes its reviews, with the
// reason recorded; a review about a job the record does not hold, or
// about what the write did not settle, stays open; and a write that can
// have settled nothing does not read the reviews at all.
func TestEmitClosesTheReviewsAWriteResolved(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		before func(*operation.Record)
		after  func(*operation.Record)
		// reviews: planted while the record is at "before".
		reviews []planted
		// reads: whether Emit reads the operation's reviews; opens: whether
		// it opens one for the record it was given.
		reads, opens bool
	}{{
		name:   "uncertain POST answered late: accepted",
		before: at(operation.PhaseUncertain, "", 0),
		after:  func(r *operation.Record) { at(operation.PhaseAccepted, job, 0)(r); r.Parked = nil },
		reviews: []planted{
			{id: "op:{op}:r{rev}", recommended: operation.ActionReconcile, closed: "resolved: job " + job + " is on the record (operation accepted at revision"},
			{id: "dlq:dispatch-copy", recommended: operation.ActionReconcile, closed: "resolved: job " + job},
			{id: "job:" + other, recommended: operation.ActionReconcile, jobID: other},
		},
		reads: true,
	}, {
		name:   "job id kept only in a review, attached later",
		before: at(operation.PhaseSubmitting, "", 0),
		after:  at(operation.PhaseAccepted, job, 0),
		reviews: []planted{
			{id: "job:" + job, recommended: operation.ActionReconcile, jobID: job, closed: "resolved: job " + job + " is on the record"},
			{id: "job:" + other, recommended: operation.ActionReconcile, jobID: other},
		},
		reads: true,
	}, {
		name:   "a dropped dispatch, re-authorized and accepted",
		before: at(operation.PhasePrepared, "", 0),
		after:  at(operation.PhaseAccepted, job, 0),
		reviews: []planted{
			{id: "dispatch:{op}:r{rev}", recommended: operation.ActionDispatch, closed: "resolved: job " + job},
		},
		reads: true,
	}, {
		name:   "delivered: every review about this job closes",
		before: at(operation.PhaseSucceeded, job, 4),
		after:  at(operation.PhaseDelivered, job, 4),
		reviews: []planted{
			{id: "dlq:observe-msg", recommended: operation.ActionObserve, jobID: job, closed: "resolved: operation delivered at revision"},
			{id: "op:{op}:r{rev}", recommended: operation.ActionDeliver, closed: "resolved: operation delivered"},
			{id: "job:" + other, recommended: operation.ActionReconcile, jobID: other},
		},
		reads: true,
	}, {
		name:   "rejected after uncertain: terminal, no new review",
		before: at(operation.PhaseUncertain, "", 0),
		after: func(r *operation.Record) {
			at(operation.PhaseRejected, "", 0)(r)
			r.Parked = &operation.ParkedState{Reason: "post_outcome_unknown"}
		},
		reviews: []planted{
			{id: "op:{op}:r{rev}", recommended: operation.ActionReconcile, closed: "resolved: operation rejected"},
		},
		reads: true,
	}, {
		name:   "just accepted: an observation review is not settled by a job id",
		before: at(operation.PhaseSubmitting, "", 0),
		after:  at(operation.PhaseAccepted, job, 0),
		reviews: []planted{
			{id: "dlq:observe-msg", recommended: operation.ActionObserve, jobID: job},
		},
		reads: true,
	}, {
		name:   "ordinary observation: nothing read, nothing closed",
		before: at(operation.PhaseAccepted, job, 3),
		after:  at(operation.PhaseAccepted, job, 4),
		reviews: []planted{
			{id: "dlq:dispatch-copy", recommended: operation.ActionReconcile},
		},
	}, {
		name:   "still uncertain with the job id attached: nothing settled",
		before: at(operation.PhaseSubmitting, "", 0),
		after:  at(operation.PhaseUncertain, job, 0),
		reviews: []planted{
			{id: "dlq:dispatch-copy", recommended: operation.ActionReconcile},
		},
		opens: true,
	}}
	for _, kind := range handlertest.StoreKinds() {
		for i, tc := range cases {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				st := &listing{Store: handlertest.OpenStore(t, kind)}
				clk := clock.NewManual(handlertest.Start.Add(time.Hour))
				e := &worker.Emitter{Sender: &handlertest.Outbox{}, Reviews: st, Clock: clk, Metrics: metrics.Discard(), Source: review.SourceHandler}
				op := fmt.Sprintf("op-%d-%s", i, kind)
				rec := handlertest.Prepared(op)
				tc.before(&rec)
				rec = handlertest.Create(t, st, rec)
				ids := make([]string, len(tc.reviews))
				for j, p := range tc.reviews {
					ids[j] = strings.NewReplacer("{op}", op, "{rev}", fmt.Sprint(rec.Revision)).Replace(p.id)
					r := review.ForRecord(ids[j], review.SourceHandler, &rec, handlertest.Start)
					r.Recommended, r.RemoteJobID = p.recommended, p.jobID
					if _, err := st.PutReview(ctx, r); err != nil {
						t.Fatal(err)
					}
				}
				next := rec.Clone()
				tc.after(&next)
				if next.Active() {
					next.Schedule = &operation.NextAction{Action: string(message.ActionObserveGeneration), Due: clk.Now()}
				}
				saved, err := st.Update(ctx, next, rec.Revision)
				if err != nil {
					t.Fatal(err)
				}
				if err := e.Emit(ctx, &saved, 1); err != nil {
					t.Fatal(err)
				}
				if got := st.count() > 0; got != tc.reads {
					t.Errorf("Emit read the operation's reviews %d times; want reads=%t", st.count(), tc.reads)
				}
				for j, p := range tc.reviews {
					got, err := st.GetReview(ctx, ids[j])
					if err != nil {
						t.Fatal(err)
					}
					switch {
					case p.closed == "" && !got.Open:
						t.Errorf("review %s closed (%q by %q); it must stay open", got.ID, got.ClosedReason, got.ClosedBy)
					case p.closed != "" && got.Open:
						t.Errorf("review %s still open after r%d %s; want it closed: %s", got.ID, saved.Revision, saved.Phase, p.closed)
					case p.closed != "" && (!strings.Contains(got.ClosedReason, p.closed) || got.ClosedBy != "automation (handler)" || !got.ClosedAt.Equal(clk.Now())):
						t.Errorf("review %s closed by %q at %s because %q; want automation (handler) at %s, %q", got.ID, got.ClosedBy, got.ClosedAt, got.ClosedReason, clk.Now(), p.closed)
					}
				}
				open, err := st.OpenReviewsOf(ctx, op)
				if err != nil {
					t.Fatal(err)
				}
				opened := 0
				for _, r := range open {
					if r.Revision == saved.Revision {
						opened++
					}
				}
				if opened > 0 != tc.opens {
					t.Errorf("Emit opened %d reviews for r%d %s; want opens=%t", opened, saved.Revision, saved.Phase, tc.opens)
				}
			})
		}
	}
}
