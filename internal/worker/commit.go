// The commit: handlers decide, the worker commits. A handler's step
// returns what it decided as a Decision value; Commit carries it out,
// the only place that writes a record, recognises a lost race, sends a
// follow-up or parks an operation.

package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

// Decision is what a handler decided about one record: Write, KeepDue,
// Park, Retry, File, Emit, Send, Obsolete, Finally or Done.
type Decision interface{ decision() }

// Then goes on from the record as written (or as it stands, when there
// was nothing to write): the next decision of the same handling.
type Then func(ctx context.Context, saved operation.Record) Decision

// Write writes the record, conditionally, stamped with the message's id.
type Write struct {
	// Next is the record to write while the record stands at the revision
	// it was decided from (OnlyAt); once another writer moved it, the race
	// is lost.
	Next operation.Record
	// Mutate, instead of Next, gives the record to write from the record
	// as it stands, re-applied on a conflict (Persister.Persist); the race
	// is lost only when it gives ErrMovedOn.
	Mutate Mutation
	// Once writes Next once, as it is: no re-send after an error without
	// a verdict and no stale write counted (a claim, whose loss is its
	// answer; the sweep's dropped dispatch, which its next run judges
	// again).
	Once bool
	// ReviewFirst files the review Next will need before writing it
	// (Emitter.Review): for a write that takes the record out of the
	// sweep's index (an expired claim made uncertain).
	ReviewFirst bool
	// Then, when set, goes on from the record as written, nothing sent;
	// otherwise the follow-up the record expects is emitted with Attempt
	// and the handling ends with Outcome.
	Then    Then
	Outcome Outcome
	Attempt int
	// Lost is what a lost race leads to (default: Done with
	// OutcomeLostRace): another writer moved the record first, and this
	// decision writes and sends nothing.
	Lost Decision
	// Failed is what any other error leads to (default: OutcomeError,
	// the error naming What).
	Failed func(err error) Decision
	What   string

	// counted runs after a winning write (the worker's own metrics).
	counted func(ctx context.Context, saved operation.Record)
}

// KeepDue keeps the sweep from taking live work for lost, then goes on
// with Then. The sweep measures lateness from Schedule.Due, which work
// that writes nothing until it ends (a quiet observation chain, a
// delivery's first copy) leaves where the hand-over put it; work that
// starts late (its message waited in the queue, or for a slot of the
// batch) and whose next write could land only once the record looks
// overdue (lands not before Due + OverdueAfter) first moves Due to now
// with one conditional write, counted in DueRefreshes. Any other work
// writes nothing here, and with OverdueAfter 0 (not configured) nothing is
// written either. Work that dies after this write is re-armed
// OverdueAfter after it, plus the sweep's cadence.
type KeepDue struct {
	Lands        time.Time
	OverdueAfter time.Duration
	Then         Then
	// Failed: as Write's.
	Failed func(err error) Decision
}

// Park stops automation on an operation no retry can move on (the job
// is unknown to Genace, a delivery cannot be verified): the record keeps
// its phase, is parked with Reason, which takes it out of the sweep's
// index, and one review is filed; an operator's replay clears the park.
// Failed towards the DLQ instead, the record would stay due and the sweep
// re-arm it every run. Each park is counted in OperationsParked by
// Category, the record's LastError. Lost, as Write's: the newer state
// stands.
type Park struct {
	Reason, Category string
	Attempt          int
}

// File files a review (twice is a no-op), counted in ReviewsOpened by
// phase (and by its ErrorCategory with ByReason: triage's dead letters)
// when new, then goes on with Then (nil: done). Failed is what a failed
// write leads to (default: OutcomeError, the error naming What).
type File struct {
	Review   review.Record
	ByReason bool
	What     string
	Then     Decision
	Failed   func(err error) Decision
}

// Emit does what the record as it stands expects next (Emitter.Emit):
// a redelivered message whose own write landed sends the follow-up it
// may not have sent. The handling then ends with Outcome, or, with Then
// set and the follow-up sent, goes on from the record (observe's linger:
// its last poll, still held at Genace past the hand-over, may yet bring
// a change to write); a failed send ends it with the error either way.
type Emit struct {
	Outcome Outcome
	Attempt int
	Then    Then
}

// Send sends one message the record does not schedule itself (a re-arm,
// a hand-over), after Delay.
type Send struct {
	Env     message.Envelope
	Delay   time.Duration
	Outcome Outcome
	What    string
}

// Obsolete acknowledges a message that the record makes pointless
// (Consumer.Obsolete).
type Obsolete struct{ Why Reason }

// Finally runs Do once the handling ends, whatever it ends with, after
// Then and every decision it leads to (observe's polls still in flight).
type Finally struct {
	Then Decision
	Do   func()
}

// Done ends the handling with Outcome and Err (nil acknowledges the
// message; otherwise Classify decides its retry).
type Done struct {
	Outcome Outcome
	Err     error
}

func (Write) decision()    {}
func (KeepDue) decision()  {}
func (Park) decision()     {}
func (File) decision()     {}
func (Emit) decision()     {}
func (Send) decision()     {}
func (Obsolete) decision() {}
func (Done) decision()     {}
func (Finally) decision()  {}
func (Retry) decision()    {}

// Commit carries out d, and every decision it leads to, on t's record,
// and returns the outcome and the error for the message. Handle commits
// each SQS step's decision; the sweep and triage, which are not fed one
// operation per message, commit theirs directly.
func (w *Worker) Commit(ctx context.Context, t Turn, d Decision) (Outcome, error) {
	for {
		switch d1 := d.(type) {
		case Done:
			return d1.Outcome, d1.Err
		case Finally:
			defer d1.Do()
			d = d1.Then
		case Retry:
			d = w.retry(ctx, &t, d1)
		case Obsolete:
			return w.consumer.Obsolete(ctx, t.Env, &t.Rec, d1.Why)
		case Emit:
			if err := w.emitter.Emit(ctx, &t.Rec, d1.Attempt); err != nil || d1.Then == nil {
				return d1.Outcome, err
			}
			d = d1.Then(ctx, t.Rec)
		case Send:
			if _, err := w.sender.Send(ctx, d1.Env, d1.Delay); err != nil {
				d = w.failed(&t, d1.What, err)
				continue
			}
			return d1.Outcome, nil
		case File:
			d = w.file(ctx, &t, d1)
		case Write:
			d = w.write(ctx, &t, d1)
		case KeepDue:
			d = w.keepDue(ctx, &t, d1)
		case Park:
			d = w.park(&t, d1)
		default:
			return OutcomeError, fmt.Errorf("%s: unknown decision %T", w.name, d)
		}
	}
}

// lostRace reports whether a write's error says another writer moved the
// record first: a decision for one revision meets any conflict as one; a
// mutation re-applied on conflicts only when it says so (ErrMovedOn),
// since a conflict that outlasts its re-applications is no verdict on it.
func lostRace(err error, reapplied bool) bool {
	return errors.Is(err, ErrMovedOn) || (!reapplied && errors.Is(err, store.ErrConflict))
}

func (w *Worker) write(ctx context.Context, t *Turn, d Write) Decision {
	from := t.Rec
	if d.ReviewFirst {
		if d.Mutate != nil || d.Once {
			// The review is built from Next at the next revision: a
			// mutation (or a write that may land at another revision)
			// has no Next to build it from.
			return w.failed(t, "review before the write", errors.New("ReviewFirst needs Next, without Mutate or Once"))
		}
		will := d.Next
		will.Revision = from.Revision + 1
		if err := w.emitter.Review(ctx, &will); err != nil {
			return w.failed(t, "review before the write", err)
		}
	}
	var (
		saved operation.Record
		err   error
	)
	switch {
	case d.Once:
		next := d.Next
		next.LastAppliedMessageID = t.Msg.MessageId
		if saved, err = w.store.Update(ctx, next, from.Revision); err != nil {
			saved = from
		}
	case d.Mutate != nil:
		saved, err = w.persister.Persist(ctx, from, t.Msg.MessageId, d.Mutate)
	default:
		saved, err = w.persister.Persist(ctx, from, t.Msg.MessageId, OnlyAt(from.Revision, d.Next))
	}
	t.Rec = saved
	switch {
	case lostRace(err, d.Mutate != nil):
		w.log.InfoContext(ctx, "lost the revision race; the newer state stands", "operation_id", from.OperationID,
			"expected_revision", from.Revision, "revision", saved.Revision, "phase", string(saved.Phase))
		if d.Lost != nil {
			return d.Lost
		}
		return Done{Outcome: OutcomeLostRace}
	case err != nil && d.Failed != nil:
		return d.Failed(err)
	case err != nil:
		return w.failed(t, d.What, err)
	}
	if d.counted != nil {
		d.counted(ctx, saved)
	}
	if d.Then != nil {
		return d.Then(ctx, saved)
	}
	return Emit{Outcome: d.Outcome, Attempt: d.Attempt}
}

func (w *Worker) keepDue(ctx context.Context, t *Turn, d KeepDue) Decision {
	rec := t.Rec
	if d.OverdueAfter <= 0 || rec.Schedule == nil || d.Lands.Before(rec.Schedule.Due.Add(d.OverdueAfter)) {
		return d.Then(ctx, rec)
	}
	now := w.clock.Now()
	next := rec.Clone()
	next.Schedule.Due = now
	next.Timestamps.Updated = now
	return Write{Next: next, Then: d.Then, Failed: d.Failed, What: "keep the sweep informed",
		counted: func(context.Context, operation.Record) { w.metrics.Count(metrics.DueRefreshes, 1) }}
}

func (w *Worker) park(t *Turn, d Park) Decision {
	now := w.clock.Now()
	next := t.Rec.Clone()
	next.Parked = &operation.ParkedState{Reason: d.Reason, At: now}
	next.Schedule = nil
	next.LastError = d.Category
	next.Timestamps.Updated = now
	return Write{Next: next, Outcome: OutcomeParked, Attempt: d.Attempt, What: "park (" + d.Reason + ")",
		counted: func(ctx context.Context, saved operation.Record) {
			w.metrics.Count(metrics.Parked, 1, metrics.Dim{Name: "Reason", Value: d.Category})
			w.log.WarnContext(ctx, "cannot continue; parked for review", "operation_id", saved.OperationID, "revision", saved.Revision, "cause", d.Reason)
		}}
}

func (w *Worker) file(ctx context.Context, t *Turn, d File) Decision {
	wrote, err := w.store.PutReview(ctx, d.Review)
	if err != nil && d.Failed != nil {
		return d.Failed(err)
	}
	if err != nil {
		return w.failed(t, cmp.Or(d.What, "write review"), err)
	}
	switch phase := string(d.Review.Phase); {
	case wrote && d.ByReason:
		w.metrics.Count(metrics.Reviews, 1, metrics.Dim{Name: "Phase", Value: phase}, metrics.Dim{Name: "Reason", Value: d.Review.ErrorCategory})
	case wrote:
		w.metrics.Count(metrics.Reviews, 1, metrics.Dim{Name: "Phase", Value: phase})
	}
	if d.Then == nil {
		return Done{}
	}
	return d.Then
}

// failed ends the handling on an error of what it was doing.
func (w *Worker) failed(t *Turn, what string, err error) Decision {
	return Done{Outcome: OutcomeError, Err: fmt.Errorf("%s %s: %s: %w", w.name, cmp.Or(t.Rec.OperationID, t.Msg.MessageId), cmp.Or(what, "write"), err)}
}
