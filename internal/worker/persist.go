package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store"
)

// Updater writes a record conditionally on its revision (store.Update).
type Updater interface {
	Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error)
}

// Mutation gives the record to write in place of cur. It must give the
// same record for the same input (take the time once, outside it): a
// write sent again after an error whose write was in fact applied is then
// that same write, which the store reports as written. It returns
// ErrNothingToWrite when cur already holds what it would write, and
// ErrMovedOn when cur has moved past what the decision was about.
type Mutation func(cur operation.Record) (operation.Record, error)

var (
	// ErrNothingToWrite, from a Mutation, ends Persist without a write:
	// the record as it stands is the result.
	ErrNothingToWrite = errors.New("nothing to write")
	// ErrMovedOn, from a Mutation, says another writer moved the record
	// past the decision (it completed the step, or it won the revision):
	// the newer state stands and this decision is dropped.
	ErrMovedOn = errors.New("record moved on")
)

// persistAttempts bounds the writes of one Persist: each conflict means a
// concurrent writer moved the record, which happens a handful of times at
// most.
const persistAttempts = 8

// Persister writes one handler's decisions.
type Persister struct {
	Store   Updater
	Clock   clock.Clock
	Metrics *metrics.Emitter
	// Action is the Action dimension of the StaleWritesRejected count.
	Action string
	// Resends is how many times a write that failed without a verdict (a
	// store error other than a conflict) is sent again, each after
	// Backoff times its attempt (at once when Backoff is 0); 0: such an
	// error ends Persist at once. Sent again, an applied write is known
	// as its own (store.Update).
	Resends int
	Backoff time.Duration
}

// Persist applies mutate to cur and writes the result conditionally on
// cur's revision, stamped with messageID (LastAppliedMessageID). On a
// conflict it counts the stale write and re-applies mutate to the record
// as it now stands, so a concurrent writer's progress is kept and a
// decision that still applies is written on top of it. It returns the
// record as written, or, with ErrNothingToWrite, the record as it stands
// (nil error). With any other error it returns the record as last read,
// and the error: mutate's own (ErrMovedOn, an illegal transition), the
// store's, or, after persistAttempts conflicting writes, the last
// conflict.
func (p Persister) Persist(ctx context.Context, cur operation.Record, messageID string, mutate Mutation) (operation.Record, error) {
	var lastErr error
	resent := 0
	for attempt := range persistAttempts {
		next, err := mutate(cur)
		if errors.Is(err, ErrNothingToWrite) {
			return cur, nil
		}
		if err != nil {
			return cur, err
		}
		next.LastAppliedMessageID = messageID
		saved, err := p.Store.Update(ctx, next, cur.Revision)
		if err == nil {
			return saved, nil
		}
		lastErr = err
		var ce *store.ConflictError
		if errors.As(err, &ce) && ce.Current != nil {
			p.Metrics.Count(metrics.StaleWrites, 1, metrics.Dim{Name: "Action", Value: p.Action})
			cur = *ce.Current
			continue
		}
		if resent >= p.Resends {
			return cur, err
		}
		resent++
		if ctx.Err() != nil {
			break
		}
		if p.Backoff > 0 {
			select {
			case <-p.Clock.After(time.Duration(attempt+1) * p.Backoff):
			case <-ctx.Done():
			}
		}
	}
	if errors.Is(lastErr, store.ErrConflict) {
		return cur, fmt.Errorf("still conflicting after %d writes: %w", persistAttempts, lastErr)
	}
	return cur, lastErr
}

// OnlyAt is the Mutation of a decision that holds only for the record at
// revision: it writes next while the record stands there, and gives
// ErrMovedOn once another writer moved it (the decision was computed
// from a view that is now stale, and is dropped, never re-applied).
func OnlyAt(revision int64, next operation.Record) Mutation {
	return func(cur operation.Record) (operation.Record, error) {
		if cur.Revision != revision {
			return cur, ErrMovedOn
		}
		return next, nil
	}
}
