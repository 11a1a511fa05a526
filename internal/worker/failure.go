// The failure policy: the one place that decides, for a failed step of
// observe (its GET) or deliver (its GET, a download, a store), whether
// to wait, retry, or park the operation for a person (Judge), and that
// carries the verdict out (Retry). The handlers only say what failed.

package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
)

// Verdict is what a failed step calls for.
type Verdict string

const (
	// VerdictWait: Genace asked us to slow down (429). The step is retried
	// once its Retry-After (plus jitter) has passed, and the failure is not
	// counted towards any budget: a rate limit says nothing about the job,
	// and counting it would strand operations under load.
	VerdictWait Verdict = "wait"
	// VerdictRetry: a failure that may clear by itself: a 5xx, a 408, a
	// timeout, a reset or refused connection, a failed store write (S3).
	// Outages of this kind last minutes to hours, so the step is retried
	// with capped backoff until the handler's budget of consecutive
	// failures (observe's MaxReadFailures, deliver's MaxCopyFailures),
	// sized so the retries cover hours.
	VerdictRetry Verdict = "retry"
	// VerdictSuspect: an answer arrived, complete, and is wrong: a 200
	// whose body no longer decodes or is over the limit (contract drift: a
	// new state or refund_state value), or a download whose bytes do not
	// match the sha256 Genace reported. Retrying the same call gets the
	// same answer; only a glitch in one answer clears, so the step is
	// tried SuspectAttempts times in a row and then parked, before Genace
	// purges the render.
	VerdictSuspect Verdict = "suspect"
	// VerdictPark: no retry can succeed (Genace does not know the job, it
	// refused the request with a 4xx, another object holds the output's
	// key): park at once.
	VerdictPark Verdict = "park"
	// VerdictKey: Genace refused our API key. That is our configuration,
	// not the job's fault: nothing is recorded against the job, the
	// message fails, and GenaceUnauthorized alarms.
	VerdictKey Verdict = "key"
)

// SuspectAttempts is how many consecutive VerdictSuspect failures a step
// takes before it parks: enough to ride out one bad answer, few enough
// that a person hears of contract drift within minutes.
const SuspectAttempts = 3

// Failure is one failed step, judged.
type Failure struct {
	// Category is the safe token recorded as the record's LastError, the
	// review's ErrorCategory and the OperationsParked metric's Reason: a
	// fixed word, never a URL, body or key.
	Category string
	Verdict  Verdict
	// Wait is Genace's Retry-After (VerdictWait only; 0 if it gave none).
	Wait time.Duration
}

// Budget is how many consecutive failures of f's verdict the step takes
// in all before it parks; transient is the handler's budget for
// VerdictRetry. 0 means the verdict is never counted (VerdictWait,
// VerdictKey), 1 that it parks at once.
func (f Failure) Budget(transient int) int {
	switch f.Verdict {
	case VerdictRetry:
		return max(transient, 1)
	case VerdictSuspect:
		return SuspectAttempts
	case VerdictPark:
		return 1
	}
	return 0
}

// Parks reports whether the failure, the failures-th in a row (counting
// this one) after one of category last, parks the operation; transient
// is the handler's budget for VerdictRetry. A VerdictSuspect failure
// right after a failure of another category starts the count again, so a
// drift after an outage is not parked for the outage's failures; after
// that the count is of every failure in a row (an outage between two
// drifts does not restart it), which errs towards parking sooner.
func (f Failure) Parks(failures int, last string, transient int) bool {
	b := f.Budget(transient)
	if f.Verdict == VerdictSuspect && last != f.Category {
		failures = 1
	}
	return b > 0 && failures >= b
}

// Judge classifies a failed step's error. transient is the category of a
// VerdictRetry failure the error does not name more precisely (the
// handler says what it was doing: "genace_read_failed",
// "artifact_copy_failed").
func Judge(err error, transient string) Failure {
	var (
		de *genace.DecodeError
		ae *genace.APIError
	)
	switch {
	case errors.Is(err, genace.ErrUnauthorized):
		return Failure{Category: "genace_unauthorized", Verdict: VerdictKey}
	case errors.Is(err, genace.ErrRateLimited):
		f := Failure{Category: "genace_rate_limited", Verdict: VerdictWait}
		if errors.As(err, &ae) {
			f.Wait = ae.RetryAfter
		}
		return f
	case errors.Is(err, genace.ErrNotFound):
		return Failure{Category: "genace_job_not_found", Verdict: VerdictPark}
	case errors.Is(err, artifact.ErrConflict):
		return Failure{Category: "artifact_conflict", Verdict: VerdictPark}
	case errors.Is(err, artifact.ErrInvalid), errors.Is(err, genace.ErrInvalidArgument), Classify(err) == ClassPermanent:
		return Failure{Category: "invalid", Verdict: VerdictPark}
	case errors.As(err, &de), errors.Is(err, genace.ErrBodyTooLarge):
		return Failure{Category: "genace_contract_drift", Verdict: VerdictSuspect}
	case errors.Is(err, artifact.ErrMismatch):
		return Failure{Category: "artifact_verify_failed", Verdict: VerdictSuspect}
	case errors.Is(err, genace.ErrURLExpired):
		// Refreshed once already by the caller: a clock skew or a Genace
		// signing fault, which clears.
		return Failure{Category: "signed_url_expired", Verdict: VerdictRetry}
	case errors.As(err, &ae) && !genace.Retryable(err):
		return Failure{Category: "genace_refused", Verdict: VerdictPark}
	}
	return Failure{Category: transient, Verdict: VerdictRetry}
}

// Retry is the decision on a failed step: Err, judged as Failure (Judge).
// A refused key fails the message (retryable) and records nothing against
// the job: GenaceUnauthorizedAlarm, not a dead letter, tells a person. A
// 429 is waited out for its Retry-After and counts for nothing. Any other
// failure is recorded on the record (phase unchanged, failure counted in
// Counters.ReadFailures, Action scheduled after Backoff), so the step
// rides out an outage without burning the message's receive count, until
// the failure's budget runs out (Failure.Parks): then the operation is
// parked with one review. Failed towards the DLQ instead, the message
// would never get there: the sweep re-arms the due record with a new
// revision first and the old message comes back obsolete.
type Retry struct {
	Err     error
	Failure Failure
	// Rec is the record the step failed on, at the turn's revision (an
	// observation chain's looks kept in memory); nil: the turn's.
	Rec *operation.Record
	// Action is the step's, scheduled for the retry.
	Action message.Action
	// Budget is the handler's budget for VerdictRetry.
	Budget int
	// Throttled is the delay after a 429 with this Retry-After; Backoff
	// the delay after the failures-th consecutive failure.
	Throttled func(retryAfter time.Duration) time.Duration
	Backoff   func(failures int) time.Duration
	// Park gives the park's reason after failures in a row.
	Park func(failures int) string
	// Attempt is the retry's (and the park's review's) follow-up attempt.
	Attempt int
	// Failed is the outcome of a failure not ridden out; Retried that of
	// a retry scheduled.
	Failed, Retried Outcome
}

func (w *Worker) retry(ctx context.Context, t *Turn, d Retry) Decision {
	if d.Rec != nil {
		t.Rec = *d.Rec
	}
	rec, f, now := t.Rec, d.Failure, w.clock.Now()
	var (
		next  operation.Record
		terr  error
		delay time.Duration
	)
	switch failures := rec.Counters.ReadFailures + 1; {
	case f.Verdict == VerdictKey:
		w.metrics.Count(metrics.GenaceUnauthorized, 1)
		return Done{Outcome: d.Failed, Err: fmt.Errorf("%s %s: %w: check GENACE_API_KEY", w.name, rec.OperationID, d.Err)}
	case f.Verdict == VerdictWait:
		w.metrics.Count(metrics.GenaceThrottled, 1)
		next, terr = operation.ReadThrottled(rec, now)
		delay = d.Throttled(f.Wait)
	case f.Parks(failures, rec.LastError, d.Budget):
		w.log.WarnContext(ctx, "failed beyond its budget", "operation_id", rec.OperationID, "category", f.Category,
			"failures", failures, "error", d.Err.Error())
		return Park{Reason: d.Park(failures), Category: f.Category, Attempt: d.Attempt}
	default:
		next, terr = operation.ReadFailed(rec, f.Category, now)
		delay = d.Backoff(next.Counters.ReadFailures)
	}
	if terr != nil {
		return Done{Outcome: d.Failed, Err: fmt.Errorf("%s %s: %w (after %w)", w.name, rec.OperationID, terr, d.Err)}
	}
	next.Schedule = &operation.NextAction{Action: string(d.Action), Due: now.Add(delay)}
	return Write{Next: next, Outcome: d.Retried, Attempt: d.Attempt,
		Failed: func(err error) Decision {
			return Done{Outcome: d.Failed, Err: fmt.Errorf("%s %s: record the failure: %w (after %w)", w.name, rec.OperationID, err, d.Err)}
		},
		counted: func(ctx context.Context, saved operation.Record) {
			w.log.WarnContext(ctx, "failed; retrying later", "operation_id", rec.OperationID, "category", f.Category,
				"failures", saved.Counters.ReadFailures, "retry_at", saved.Schedule.Due, "error", d.Err.Error())
		}}
}
