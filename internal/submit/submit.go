// Package submit is the submit function's handler: for each dispatch
// message it loads the operation and acts on the record, never on the
// message alone, so a redelivered or replayed dispatch never becomes a
// second POST.
package submit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/worker"
)

// Store is what the handler needs of persistence.
type Store = worker.RecordStore

// Genace creates jobs.
type Genace interface {
	Submit(ctx context.Context, req genace.SubmitRequest, timeout time.Duration) genace.SubmitResult
}

// Config tunes the handler.
type Config struct {
	// QueueURL is the dispatch queue, whose messages' visibility the lease
	// renews.
	QueueURL string
	// Visibility is the dispatch queue's visibility timeout.
	Visibility time.Duration
	// SubmitTimeout is the shortest POST worth sending (default 20 s): the
	// POST waits until PersistBudget before the function's deadline, and
	// with less time than this left it is not sent (the claim goes back).
	// Without a deadline (a local run), the POST waits exactly this long.
	SubmitTimeout time.Duration
	// PersistBudget is the time kept for persisting the outcome after it.
	PersistBudget time.Duration
	// OverdueAfter: a scheduled observation this late counts as lost (the
	// sweep's threshold, SWEEP_OVERDUE_SECONDS), and
	// a dispatch for a known job sends a new one.
	OverdueAfter time.Duration
	// RetryJitter spreads 429 retries over [1, 1+RetryJitter] × Retry-After.
	RetryJitter float64
	// ConnectBackoff delays a dispatch whose POST never left this process.
	ConnectBackoff time.Duration
	// Concurrency bounds records in flight per batch.
	Concurrency int
	// Worker names this process in claims when no Lambda request id exists.
	Worker string
}

// Defaults fills zero fields.
func (c Config) Defaults() Config {
	c.Visibility = cmp.Or(c.Visibility, 3*time.Minute)
	c.SubmitTimeout = cmp.Or(c.SubmitTimeout, 20*time.Second)
	c.PersistBudget = cmp.Or(c.PersistBudget, 5*time.Second)
	c.OverdueAfter = cmp.Or(c.OverdueAfter, 5*time.Minute)
	c.RetryJitter = cmp.Or(c.RetryJitter, 0.25)
	c.ConnectBackoff = cmp.Or(c.ConnectBackoff, 10*time.Second)
	c.Worker = cmp.Or(c.Worker, "submit")
	return c
}

// Deps is what the handler works with.
type Deps struct {
	Store  Store
	Genace Genace
	// Extender renews message visibility; Sender delivers follow-up
	// messages.
	Extender worker.Extender
	Sender   worker.Sender
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *metrics.Emitter
}

// Handler handles dispatch batches.
type Handler struct {
	genace  Genace
	w       *worker.Worker
	clk     clock.Clock
	log     *slog.Logger
	metrics *metrics.Emitter
	cfg     Config
	rnd     func() float64
}

// New wires a handler.
func New(d Deps, cfg Config) *Handler {
	cfg = cfg.Defaults()
	return &Handler{
		genace: d.Genace, clk: d.Clock, log: d.Log, metrics: d.Metrics, cfg: cfg,
		w: worker.New(worker.Deps{Store: d.Store, Extender: d.Extender, Sender: d.Sender, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics},
			worker.Config{Action: message.ActionSubmitGeneration, Name: "submit", Queue: "dispatch", QueueURL: cfg.QueueURL,
				Visibility: cfg.Visibility, Concurrency: cfg.Concurrency, StaleWriteAction: "submit",
				Resends: resends, ResendBackoff: 100 * time.Millisecond}),
		rnd: rand.Float64,
	}
}

// Handle is the Lambda entry point for an SQS batch.
func (h *Handler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	return h.w.Handle(ctx, ev, h.decide), nil
}

// decide acts on the record: it returns what it decided, which the
// worker commits.
func (h *Handler) decide(ctx context.Context, t worker.Turn) worker.Decision {
	rec, m, env := t.Rec, t.Msg, t.Env
	switch {
	case rec.Terminal():
		return worker.Obsolete{Why: worker.ReasonTerminal}
	case rec.Phase == operation.PhaseSubmitting && (rec.Claim == nil || rec.Claim.MessageID == m.MessageId):
		// The claiming message came back: its worker died or ran out of
		// time, maybe after POSTing, and redelivery is no proof that it did
		// not. Reconcile, never POST again. (A claimant still alive applies
		// its definite answer all the same.)
		return h.markUncertain(rec, "redelivered_while_submitting", worker.OutcomeUncertain)
	case rec.Phase == operation.PhaseSubmitting:
		// Another message holds the claim (this one is an SQS duplicate, a
		// re-emit, a sweep re-arm): the claimant settles it, or, should it
		// die, its own message's redelivery or the sweep marks it uncertain.
		return worker.Obsolete{Why: worker.ReasonClaimedByAnotherMessage}
	case rec.LastAppliedMessageID == m.MessageId && rec.Phase == operation.PhasePrepared && rec.LastError == operation.LastErrorUnauthorized:
		// This message's own POST had our key refused: it put its claim
		// back and failed so as to come back, and nothing wrote since (its
		// write is the last). It tries again at the record's revision, past
		// the one it expects by its own writes; a refused POST created
		// nothing (operation.Claim.Unauthorized).
	case rec.LastAppliedMessageID == m.MessageId && rec.Revision > env.ExpectedRevision:
		// This message's own write landed and the worker died before the
		// follow-up left: send it now.
		return worker.Emit{Outcome: worker.OutcomeReemitted, Attempt: env.Attempt + 1}
	case rec.RemoteJobID != "":
		return h.ensureObservation(ctx, env, &rec)
	case rec.Phase == operation.PhaseUncertain:
		return worker.Obsolete{Why: worker.ReasonAwaitingReconciliation}
	case rec.Phase != operation.PhasePrepared:
		return worker.Obsolete{Why: worker.ReasonPhase(rec.Phase)}
	case rec.Revision != env.ExpectedRevision:
		return worker.Obsolete{Why: worker.ReasonStaleRevision}
	}
	if c, bad := operation.FailedCheck(operation.SubmitChecks(&rec)); bad {
		return worker.Obsolete{Why: worker.ReasonPrecondition(c.Name)}
	}
	return h.claim(ctx, t)
}

// ensureObservation answers a dispatch for an operation whose job id is
// known: make sure an observation (or delivery) is pending, never POST.
func (h *Handler) ensureObservation(ctx context.Context, env message.Envelope, rec *operation.Record) worker.Decision {
	if worker.NeedsReview(rec) {
		return worker.Obsolete{Why: worker.ReasonAwaitingReview}
	}
	now := h.clk.Now()
	if rec.Schedule != nil && now.Before(rec.Schedule.Due.Add(h.cfg.OverdueAfter)) {
		return worker.Obsolete{Why: worker.ReasonFollowUpPending}
	}
	action := message.ActionObserveGeneration
	if rec.Phase == operation.PhaseSucceeded {
		action = message.ActionDeliverArtifacts
	}
	// Sent at the current revision without a write: duplicates of it
	// collapse on the revision check in the observer.
	next := message.Envelope{Action: action, OperationID: rec.OperationID, ExpectedRevision: rec.Revision,
		ExpectedRemoteJobID: rec.RemoteJobID, Attempt: env.Attempt + 1}
	h.log.InfoContext(ctx, "job id known: re-armed observation instead of submitting", "operation_id", rec.OperationID, "job_id", rec.RemoteJobID)
	return worker.Send{Env: next, Outcome: worker.OutcomeRearmed, What: "re-arm " + string(action)}
}

func (h *Handler) owner(ctx context.Context) string {
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		return lc.AwsRequestID
	}
	return h.cfg.Worker
}

// claim claims the operation with one conditional write; the POST
// follows only once the claim is written.
func (h *Handler) claim(ctx context.Context, t worker.Turn) worker.Decision {
	claimed, err := operation.ClaimSubmission(t.Rec, h.owner(ctx), t.Msg.MessageId, h.clk.Now())
	if err != nil {
		return worker.Obsolete{Why: worker.ReasonClaimRefused}
	}
	return worker.Write{Next: claimed, Once: true, What: "claim",
		// Another worker claimed first: it POSTs, never this one.
		Lost: worker.Obsolete{Why: worker.ReasonClaimConflict},
		Then: func(ctx context.Context, saved operation.Record) worker.Decision { return h.submit(ctx, t, saved) }}
}

// submit confirms the lease, POSTs once and settles the outcome.
func (h *Handler) submit(ctx context.Context, t worker.Turn, saved operation.Record) worker.Decision {
	rec := saved
	timeout, err := h.authority(ctx, t.Lease)
	if err != nil {
		// No POST without authority. Nothing was sent, so the claim can
		// honestly go back to prepared with a fresh dispatch.
		h.log.WarnContext(ctx, "no authority to POST; releasing the claim", "operation_id", rec.OperationID, "error", err.Error())
		return h.release(saved, 0, worker.OutcomeReleased)
	}
	res := h.genace.Submit(ctx, genace.SubmitRequest{OperationID: rec.OperationID, Model: rec.Model, Input: rec.Input}, timeout)
	h.metrics.Count(metrics.PostOutcomes, 1, metrics.Dim{Name: "Outcome", Value: string(res.Outcome)}, metrics.Dim{Name: "Model", Value: rec.Model})
	if res.Outcome == genace.OutcomeUnauthorized {
		h.metrics.Count(metrics.GenaceUnauthorized, 1)
	}
	h.log.InfoContext(ctx, "POST classified", "operation_id", rec.OperationID, "result", res)
	return h.settle(ctx, t.Msg, saved, res)
}

// authority sizes the POST's timeout and renews the message's visibility
// right before the POST: the POST may wait until PersistBudget before the
// function's deadline (a POST given up on is an uncertain operation, a
// manual reconciliation, so it gets all the time the function has), at
// least SubmitTimeout, and the lease must outlast it and the write after
// it. The renewal goes to the queue whatever the lease estimates, since
// the estimate starts when the handler reached the record, not at the
// receive, and only the queue knows the message is still ours.
func (h *Handler) authority(ctx context.Context, l *worker.Lease) (time.Duration, error) {
	timeout := h.cfg.SubmitTimeout
	if dl, ok := ctx.Deadline(); ok {
		left := dl.Sub(h.clk.Now())
		if left-h.cfg.PersistBudget < h.cfg.SubmitTimeout {
			return 0, fmt.Errorf("function deadline in %s, a POST of at least %s and its persist (%s) need %s",
				left.Round(time.Millisecond), h.cfg.SubmitTimeout, h.cfg.PersistBudget, h.cfg.SubmitTimeout+h.cfg.PersistBudget)
		}
		timeout = (left - h.cfg.PersistBudget).Truncate(time.Millisecond)
	}
	return timeout, l.Renew(ctx, timeout+h.cfg.PersistBudget)
}

// release puts an unused claim back and schedules a fresh dispatch, also
// when the claim's own redelivery marked it uncertain meanwhile.
func (h *Handler) release(claimed operation.Record, delay time.Duration, outcome worker.Outcome) worker.Decision {
	now := h.clk.Now()
	claim := *claimed.Claim
	return worker.Write{Outcome: outcome, Attempt: 1,
		Mutate: func(r operation.Record) (operation.Record, error) {
			n, err := claim.Release(r, now)
			n.Schedule = &operation.NextAction{Action: string(message.ActionSubmitGeneration), Due: now.Add(delay)}
			return n, err
		},
		Failed: func(err error) worker.Decision {
			if errors.Is(err, operation.ErrIllegalTransition) {
				// The claim is gone (an operator reconciled the operation, or
				// another claim followed): what the record says now stands.
				h.log.Warn("claim gone before release; this worker sent no POST", "operation_id", claimed.OperationID, "error", err.Error())
				return worker.Done{Outcome: outcome}
			}
			return worker.Done{Outcome: outcome, Err: fmt.Errorf("submit %s: release claim: %w", claimed.OperationID, err)}
		}}
}

// settle persists the POST's outcome. A job id is persisted even when the
// revision moved meanwhile (invariant 2): the write re-applies the outcome
// to whatever the record now is, as long as it still carries this claim
// (or no claim, for a job id); one refused keeps its job id in a review.
func (h *Handler) settle(ctx context.Context, m events.SQSMessage, claimed operation.Record, res genace.SubmitResult) worker.Decision {
	now := h.clk.Now()
	outcome := worker.OutcomeOfPost(res.Outcome)
	// The outcome is this claim's: it applies while the record carries it,
	// uncertain meanwhile or not (operation.Claim).
	claim := *claimed.Claim
	var mutate worker.Mutation
	switch res.Outcome {
	case genace.OutcomeAccepted:
		var snap *operation.Snapshot
		if res.Job != nil { // nil when the body drifted: the observation's GET fills it in
			s := res.Job.Snapshot(now)
			snap = &s
		}
		mutate = func(r operation.Record) (operation.Record, error) {
			if r.RemoteJobID == res.JobID && r.Phase != operation.PhaseSubmitting && r.Phase != operation.PhaseUncertain && r.LastAppliedMessageID != m.MessageId {
				return operation.Record{}, errAlreadyRecorded
			}
			n, err := claim.Accept(r, res.JobID, snap, now)
			n.Schedule = &operation.NextAction{Action: string(message.ActionObserveGeneration), Due: now}
			return n, err
		}
	case genace.OutcomeSubmissionFailed:
		mutate = func(r operation.Record) (operation.Record, error) {
			n, err := claim.SubmissionFailed(r, res.JobID, res.ErrorCode, now)
			n.Schedule = &operation.NextAction{Action: string(message.ActionObserveGeneration), Due: now}
			return n, err
		}
	case genace.OutcomeRejected:
		mutate = func(r operation.Record) (operation.Record, error) {
			return claim.Reject(r, safeCode(res.ErrorCode, "rejected_"+strconv.Itoa(res.StatusCode)), now)
		}
	case genace.OutcomeUnauthorized:
		mutate = func(r operation.Record) (operation.Record, error) {
			return claim.Unauthorized(r, now)
		}
	case genace.OutcomeRateLimited:
		h.metrics.Count(metrics.GenaceThrottled, 1)
		// Capped at SQS's longest delay: the dispatch queue needs no
		// Scheduler, and retrying earlier than asked only earns another 429
		// (nothing is created either way).
		delay := min(maxRetryDelay, time.Duration(float64(res.RetryAfter)*(1+h.cfg.RetryJitter*h.rnd())))
		mutate = func(r operation.Record) (operation.Record, error) {
			n, err := claim.RateLimited(r, now)
			n.Schedule = &operation.NextAction{Action: string(message.ActionSubmitGeneration), Due: now.Add(delay)}
			return n, err
		}
	default:
		if !res.RequestSent {
			// No connection was ever made: proof that nothing was POSTed.
			return h.release(claimed, h.cfg.ConnectBackoff, outcome)
		}
		h.metrics.Count(metrics.UncertainSubmissions, 1)
		if res.UnusableJobID != "" {
			return h.keepUnusableJobID(ctx, claimed, res.UnusableJobID, h.markUncertain(claimed, "unusable_job_id", outcome))
		}
		return h.markUncertain(claimed, "post_outcome_unknown", outcome)
	}
	w := worker.Write{Mutate: mutate, Outcome: outcome, Attempt: 1,
		Failed: func(err error) worker.Decision {
			if errors.Is(err, errAlreadyRecorded) {
				h.log.InfoContext(ctx, "the record already holds the job this POST created", "operation_id", claimed.OperationID, "job_id", res.JobID)
				return worker.Done{Outcome: outcome}
			}
			if res.JobID != "" {
				// The job id could not be attached. Keep it where an operator
				// will find it rather than lose it.
				return h.keepJobID(ctx, claimed, res.JobID, err, outcome)
			}
			if errors.Is(err, operation.ErrIllegalTransition) {
				h.log.WarnContext(ctx, "outcome no longer applies", "operation_id", claimed.OperationID, "error", err.Error())
				return worker.Done{Outcome: outcome}
			}
			return worker.Done{Outcome: outcome, Err: fmt.Errorf("submit %s: persist %s: %w", claimed.OperationID, res.Outcome, err)}
		}}
	if res.Outcome == genace.OutcomeUnauthorized {
		// No follow-up: the message fails, and SQS brings it back after its
		// visibility timeout until the key is fixed or its receives run out
		// (the DLQ's review then names genace_unauthorized). Retrying a
		// refused key sooner would only be refused again.
		w.Then = func(ctx context.Context, _ operation.Record) worker.Decision {
			h.log.ErrorContext(ctx, "Genace refused the API key; the operation waits, prepared", "operation_id", claimed.OperationID, "status", res.StatusCode)
			return worker.Done{Outcome: outcome, Err: fmt.Errorf("submit %s: %w: check GENACE_API_KEY", claimed.OperationID, res.Err)}
		}
	}
	return w
}

// errAlreadyRecorded is a claimant's 202 for the job that a record past
// its submission already holds by another message's write: an operator
// reconciled the operation with it while the POST was in flight (the
// observation may have moved it on since). The answer is applied already;
// writing it again would start a second observation chain, or, past
// accepted, be refused and ask an operator to attach a job id the record
// carries. (The claimant's own write is its own: the store reports it as
// written, and its follow-up is still owed.)
var errAlreadyRecorded = errors.New("the job is already on the record")

// resends is how often a write of the POST's outcome that failed without
// a verdict is sent again: the outcome (a job id above all) must land.
const resends = 7

// maxRetryDelay is SQS's longest DelaySeconds.
const maxRetryDelay = 15 * time.Minute

// keepJobID is the last resort when a job id cannot be attached: a review
// that carries it, and an error log line with it (job ids are not
// secrets), so reconciliation can find it.
func (h *Handler) keepJobID(ctx context.Context, rec operation.Record, jobID string, cause error, outcome worker.Outcome) worker.Decision {
	h.log.ErrorContext(ctx, "job id could not be persisted on the record", "operation_id", rec.OperationID, "job_id", jobID, "error", cause.Error())
	r := review.ForRecord("job:"+jobID, review.SourceHandler, &rec, h.clk.Now())
	r.RemoteJobID = jobID
	r.ErrorCategory = "job_id_not_attached"
	r.Recommended = operation.ActionReconcile
	return worker.File{Review: r, Then: worker.Done{Outcome: outcome}, Failed: func(err error) worker.Decision {
		return worker.Done{Outcome: outcome, Err: fmt.Errorf("submit %s: keep job id %s: %w (after %w)", rec.OperationID, jobID, err, cause)}
	}}
}

// keepUnusableJobID keeps the evidence of a job Genace named by an id that
// no record or message may carry, in a review for the reconciliation the
// operation now waits for, then goes on with then (the park). It is
// written before the operation is parked: a redelivery would find it
// uncertain and write nothing more.
func (h *Handler) keepUnusableJobID(ctx context.Context, rec operation.Record, evidence string, then worker.Decision) worker.Decision {
	r := review.ForRecord("evidence:"+review.ParkedID(rec.OperationID, rec.Revision), review.SourceHandler, &rec, h.clk.Now())
	r.ErrorCategory = "unusable_job_id"
	r.Recommended = operation.ActionReconcile
	r.Reason = "Genace named the job by an id outside the job id definition: " + evidence +
		"; find the job on Genace and reconcile the operation with it"
	return worker.File{Review: r, Then: then, Failed: func(err error) worker.Decision {
		// The log line is then the only copy; job ids are not secrets and
		// the evidence is quoted, capped and stripped of any URL query.
		h.log.ErrorContext(ctx, "evidence of a job id could not be kept in a review", "operation_id", rec.OperationID, "unusable_job_id", evidence, "error", err.Error())
		return then
	}}
}

// markUncertain parks a claimed operation whose POST outcome is unknown,
// as long as the record still carries rec's claim.
func (h *Handler) markUncertain(rec operation.Record, reason string, outcome worker.Outcome) worker.Decision {
	// One time for every attempt: a re-sent write must be the same write
	// for the store to know it as its own (store.Update).
	now := h.clk.Now()
	return worker.Write{
		Mutate: func(r operation.Record) (operation.Record, error) {
			if rec.Claim == nil {
				return operation.MarkUncertain(r, reason, now)
			}
			return rec.Claim.MarkUncertain(r, reason, now)
		},
		Then: func(ctx context.Context, _ operation.Record) worker.Decision {
			h.log.WarnContext(ctx, "submission outcome unknown: left for reconciliation", "operation_id", rec.OperationID, "reason", reason)
			return worker.Emit{Outcome: outcome, Attempt: 1}
		},
		Failed: func(err error) worker.Decision {
			if errors.Is(err, operation.ErrIllegalTransition) {
				return worker.Done{Outcome: outcome} // evidence or a release came first; nothing uncertain any more
			}
			return worker.Done{Outcome: outcome, Err: fmt.Errorf("submit %s: mark uncertain: %w", rec.OperationID, err)}
		}}
}

func safeCode(code, fallback string) string {
	if code == "" || len(code) > 48 {
		return fallback
	}
	return code
}
