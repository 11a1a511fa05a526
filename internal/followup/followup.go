// Package followup turns a persisted record into what must happen next:
// the message its Schedule expects, and the review its parked state needs.
// Handlers call it after each winning write, and again when a redelivered
// message finds its own write already applied (the crash-between-write-
// and-send case), so the chain never dies silently.
package followup

import (
	"context"
	"fmt"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/schedule"
)

// Sender delivers an envelope after a delay (SQS DelaySeconds or an
// EventBridge schedule).
type Sender interface {
	Send(ctx context.Context, env message.Envelope, delay time.Duration) (schedule.Route, error)
}

// ReviewWriter stores a review; writing the same one twice is a no-op.
type ReviewWriter interface {
	PutReview(ctx context.Context, r review.Record) (bool, error)
}

// Of returns the envelope a record's Schedule expects and its delay.
func Of(rec *operation.Record, attempt int, now time.Time) (message.Envelope, time.Duration, bool) {
	if rec.Schedule == nil {
		return message.Envelope{}, 0, false
	}
	env := message.Envelope{
		Action: message.Action(rec.Schedule.Action), OperationID: rec.OperationID,
		ExpectedRevision: rec.Revision, Attempt: attempt,
	}
	if env.Action != message.SubmitGeneration {
		env.ExpectedRemoteJobID = rec.RemoteJobID
	}
	return env, max(0, rec.Schedule.Due.Sub(now)), true
}

// NeedsReview reports whether automation has stopped driving the record.
func NeedsReview(rec *operation.Record) bool {
	return rec.Parked != nil || rec.Phase == operation.Uncertain || rec.Phase == operation.Stalled
}

// Emitter sends follow-ups and writes reviews.
type Emitter struct {
	Sender  Sender
	Reviews ReviewWriter
	Clock   clock.Clock
	Metrics *metrics.Emitter
	Source  review.Source
}

// Emit does what the persisted record expects next.
func (e *Emitter) Emit(ctx context.Context, rec *operation.Record, attempt int) error {
	now := e.Clock.Now()
	if env, delay, ok := Of(rec, attempt, now); ok {
		route, err := e.Sender.Send(ctx, env, delay)
		if err != nil {
			return fmt.Errorf("follow-up %s for %s r%d: %w", env.Action, rec.OperationID, rec.Revision, err)
		}
		e.Metrics.Count(metrics.Scheduled, 1, metrics.Dim{Name: "Action", Value: string(env.Action)}, metrics.Dim{Name: "Route", Value: string(route)})
	}
	if NeedsReview(rec) {
		r := review.ForRecord(review.ParkedID(rec.OperationID, rec.Revision), e.Source, rec, now)
		wrote, err := e.Reviews.PutReview(ctx, r)
		if err != nil {
			return fmt.Errorf("review for %s r%d: %w", rec.OperationID, rec.Revision, err)
		}
		if wrote {
			e.Metrics.Count(metrics.Reviews, 1, metrics.Dim{Name: "Phase", Value: string(rec.Phase)})
		}
	}
	return nil
}
