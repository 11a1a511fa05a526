// The follow-up turns a persisted record into what must happen next:
// the message its Schedule expects, the review its parked state needs,
// and the closing of the reviews the write resolved. Handlers call it
// after each winning write, and again when a redelivered message finds
// its own write already applied (the crash-between-write-and-send case),
// so the chain never dies silently and an operator is asked only while
// there is something to decide.

package worker

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

// ReviewStore stores reviews: PutReview writes one (twice is a no-op);
// OpenReviewsOf lists an operation's open ones, consistently; and
// ResolveReview closes one with the reason (a closed one stays as it is).
type ReviewStore interface {
	PutReview(ctx context.Context, r review.Record) (bool, error)
	OpenReviewsOf(ctx context.Context, operationID string) ([]review.Record, error)
	ResolveReview(ctx context.Context, id, by, reason string, at time.Time) error
}

// FollowUpOf returns the envelope a record's Schedule expects and its delay.
func FollowUpOf(rec *operation.Record, attempt int, now time.Time) (message.Envelope, time.Duration, bool) {
	if rec.Schedule == nil {
		return message.Envelope{}, 0, false
	}
	env := message.Envelope{
		Action: message.Action(rec.Schedule.Action), OperationID: rec.OperationID,
		ExpectedRevision: rec.Revision, Attempt: attempt,
	}
	if env.Action != message.ActionSubmitGeneration {
		env.ExpectedRemoteJobID = rec.RemoteJobID
	}
	return env, max(0, rec.Schedule.Due.Sub(now)), true
}

// NeedsReview reports whether automation has stopped driving the record.
func NeedsReview(rec *operation.Record) bool {
	return rec.Parked != nil || rec.Phase == operation.PhaseUncertain || rec.Phase == operation.PhaseStalled
}

// Resolves says whether rec, as written, settles what the open review r
// was about, and the reason to record when closing it:
//   - never a review that carries a job id the record does not hold: that
//     job may be a second one (created, perhaps charged), and only an
//     operator can tell;
//   - a terminal operation settles every other review;
//   - a job id on a record that needs no review itself settles a review
//     that asked for reconciliation or a dispatch: the job it asked about
//     exists, and automation drives it (an uncertain POST whose answer
//     arrived late, a job id that had been kept only in a review).
//
// Reviews about observation, delivery or accounting stay until the
// operation ends or an operator replays it.
func Resolves(rec *operation.Record, r review.Record) (string, bool) {
	switch {
	case !r.Open || r.OperationID != rec.OperationID:
		return "", false
	case r.RemoteJobID != "" && r.RemoteJobID != rec.RemoteJobID:
		return "", false
	case rec.Terminal():
		return fmt.Sprintf("resolved: operation %s at revision %d", rec.Phase, rec.Revision), true
	case rec.RemoteJobID != "" && !NeedsReview(rec) &&
		(r.Recommended == operation.ActionReconcile || r.Recommended == operation.ActionDispatch):
		return fmt.Sprintf("resolved: job %s is on the record (operation %s at revision %d)", rec.RemoteJobID, rec.Phase, rec.Revision), true
	}
	return "", false
}

// mayResolve reports whether the write that produced rec can have settled
// a review (see Resolves), so that only those writes read the operation's
// reviews: the one that ended it, and those that carry a job id no
// observation has followed yet (the write that recorded it). An ordinary
// observation or delivery step reads nothing more.
func mayResolve(rec *operation.Record) bool {
	return rec.Terminal() || (rec.RemoteJobID != "" && rec.Counters.Observations == 0 && !NeedsReview(rec))
}

// Emitter sends follow-ups, writes reviews and closes the ones a write
// resolved.
type Emitter struct {
	Sender  Sender
	Reviews ReviewStore
	Clock   clock.Clock
	Metrics *metrics.Emitter
	Source  review.Source
}

// Emit does what the persisted record expects next.
func (e *Emitter) Emit(ctx context.Context, rec *operation.Record, attempt int) error {
	now := e.Clock.Now()
	if env, delay, ok := FollowUpOf(rec, attempt, now); ok {
		route, err := e.Sender.Send(ctx, env, delay)
		if err != nil {
			return fmt.Errorf("follow-up %s for %s r%d: %w", env.Action, rec.OperationID, rec.Revision, err)
		}
		e.Metrics.Count(metrics.Scheduled, 1, metrics.Dim{Name: "Action", Value: string(env.Action)}, metrics.Dim{Name: "Route", Value: string(route)})
	}
	if err := e.Review(ctx, rec); err != nil {
		return err
	}
	if mayResolve(rec) {
		return e.resolve(ctx, rec, now)
	}
	return nil
}

// Review files the review rec needs (NeedsReview), keyed by its revision,
// so a second call writes nothing. A writer whose write takes the record
// out of the sweep's index (an expired claim made uncertain) calls it
// before that write too, with the record as it will be written: a crash
// between the two then leaves the record in the index for the next run,
// never out of it with no review.
func (e *Emitter) Review(ctx context.Context, rec *operation.Record) error {
	// A terminal record leaves nothing to decide, parked or not.
	if !NeedsReview(rec) || rec.Terminal() {
		return nil
	}
	r := review.ForRecord(review.ParkedID(rec.OperationID, rec.Revision), e.Source, rec, e.Clock.Now())
	wrote, err := e.Reviews.PutReview(ctx, r)
	if err != nil {
		return fmt.Errorf("review for %s r%d: %w", rec.OperationID, rec.Revision, err)
	}
	if wrote {
		e.Metrics.Count(metrics.Reviews, 1, metrics.Dim{Name: "Phase", Value: string(rec.Phase)})
	}
	return nil
}

// resolve closes the operation's open reviews that rec settles, each with
// its reason. A failure fails the handler's message like any other
// follow-up failure: the redelivery finds its own write and emits again.
func (e *Emitter) resolve(ctx context.Context, rec *operation.Record, now time.Time) error {
	open, err := e.Reviews.OpenReviewsOf(ctx, rec.OperationID)
	if err != nil {
		return fmt.Errorf("reviews of %s r%d: %w", rec.OperationID, rec.Revision, err)
	}
	for _, r := range open {
		reason, ok := Resolves(rec, r)
		if !ok {
			continue
		}
		if err := e.Reviews.ResolveReview(ctx, r.ID, "automation ("+string(e.Source)+")", reason, now); err != nil {
			return fmt.Errorf("close review %s of %s r%d: %w", r.ID, rec.OperationID, rec.Revision, err)
		}
		e.Metrics.Count(metrics.ReviewsResolved, 1, metrics.Dim{Name: "Phase", Value: string(rec.Phase)})
	}
	return nil
}
