// The Runner runs an SQS batch's records concurrently within the
// function's deadline and reports per-record failures, and it is the one
// place that decides whether a failure is worth retrying.

package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/store"
)

// Class is what the queue should do with a failed record.
type Class string

const (
	// ClassRetry: a transient problem; the message becomes visible again and
	// another attempt may succeed.
	ClassRetry Class = "retry"
	// ClassPermanent: no retry can succeed (a malformed message, an unknown
	// operation). It is still reported as a failure so the redrive policy
	// moves it to the DLQ, where triage records it for review; nothing is
	// dropped silently.
	ClassPermanent Class = "permanent"
)

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// MarkPermanent marks err as one no retry can fix.
func MarkPermanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// Classify decides retry versus permanent for any error a handler returns.
func Classify(err error) Class {
	var p *permanentError
	switch {
	case errors.As(err, &p), errors.Is(err, message.ErrMalformed), errors.Is(err, store.ErrNotFound):
		return ClassPermanent
	}
	return ClassRetry
}

// Func handles one record. A nil error acknowledges it.
type Func func(ctx context.Context, m events.SQSMessage) error

// Runner runs a batch.
type Runner struct {
	// Action names the records' action in metrics.
	Action string
	Clock  clock.Clock
	// Concurrency bounds records in flight (default 8).
	Concurrency int
	Log         *slog.Logger
	Metrics     *metrics.Emitter
	// OnPermanent, if set, runs for each permanently failed record (the
	// handlers use it to hasten the message to its DLQ).
	OnPermanent func(ctx context.Context, m events.SQSMessage, err error)
}

// Run handles every record and returns the records to report as failed.
// A panic in one record fails that record only.
func (r Runner) Run(ctx context.Context, ev events.SQSEvent, fn Func) events.SQSEventResponse {
	n := r.Concurrency
	if n <= 0 {
		n = 8
	}
	log := r.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sem := make(chan struct{}, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
	for _, m := range ev.Records {
		wg.Add(1)
		sem <- struct{}{}
		go func(m events.SQSMessage) {
			defer wg.Done()
			defer func() { <-sem }()
			r.queueAge(m)
			err := safeCall(ctx, m, fn)
			if err == nil {
				return
			}
			class := Classify(err)
			log.ErrorContext(ctx, "record failed", "message_id", m.MessageId, "class", string(class), "error", err.Error())
			r.Metrics.Count(metrics.RecordFailures, 1, metrics.Dim{Name: "Outcome", Value: string(class)})
			if class == ClassPermanent && r.OnPermanent != nil {
				r.OnPermanent(ctx, m, err)
			}
			mu.Lock()
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
			mu.Unlock()
		}(m)
	}
	wg.Wait()
	return resp
}

// queueAge records how long the message waited in the queue: with action
// duration and remote render age, it tells backlog from slow workers.
func (r Runner) queueAge(m events.SQSMessage) {
	ms, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64)
	if err != nil || r.Clock == nil {
		return
	}
	r.Metrics.Duration(metrics.QueueAge, r.Clock.Now().Sub(time.UnixMilli(ms)), metrics.Dim{Name: "Action", Value: r.Action})
}

func safeCall(ctx context.Context, m events.SQSMessage, fn Func) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic handling message %s: %v\n%s", m.MessageId, p, debug.Stack())
		}
	}()
	return fn(ctx, m)
}
