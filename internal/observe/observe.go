// Package observe is the observe function's handler: it reads the job an
// observation message names with long polls chained back to back while
// the message's lease, the function's deadline and Config.Chain allow,
// and writes the record, conditioned on the revision the message
// expects, only when the job's state or money changed, when the chain
// hands over to a fresh message, or when the next look is not due at
// once. The last write does exactly one thing: schedule the next
// observation, hand over to delivery, settle, or park the operation for
// review. Duplicate observations collapse on the revision check; the
// loser writes and schedules nothing.
package observe

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/worker"
)

// Store is what the handler needs of persistence.
type Store = worker.RecordStore

// Genace reads jobs.
type Genace interface {
	Get(ctx context.Context, jobID string, wait, timeout time.Duration) (*genace.Job, error)
}

// Delays is the observation delay policy.
type Delays interface {
	// LongPoll is the wait to ask Genace for on each GET of this model.
	LongPoll(model string) time.Duration
	// Next is the delay before the next observation of an active job.
	Next(rec *operation.Record, now time.Time) time.Duration
	// Accounting is the delay before re-reading a failed job's refund.
	Accounting(rec *operation.Record, now time.Time) time.Duration
	// ReadRetry is the delay after the n-th consecutive failed GET.
	ReadRetry(n int) time.Duration
	// Budgets bounds observation of this model.
	BudgetsFor(model string) operation.Budgets
	// Longest bounds every delay Next, Accounting and ReadRetry return.
	Longest() time.Duration
}

// Config tunes the handler.
type Config struct {
	// QueueURL and Visibility describe the observe queue (for the lease).
	QueueURL   string
	Visibility time.Duration
	// Overhead is the time beyond the long poll that one action needs:
	// connection, parsing and the conditional write.
	Overhead time.Duration
	// MaxReadFailures is how many consecutive failed GETs the chain rides
	// out by itself before it lets the message fail towards the DLQ.
	MaxReadFailures int
	// Concurrency bounds the batch's records observed at once (default:
	// all of them). A record waiting for a slot would wait out a whole
	// chain of another, so keep it at least the mapping's batch size.
	Concurrency int
	// Chain is how long one message may chain long polls before it hands
	// over to a fresh message (default DefaultChain). The record is not
	// written while nothing changes, so its Schedule.Due stays at the last
	// write: keep Chain below the sweep's overdue threshold
	// (SWEEP_OVERDUE_SECONDS), or the sweep re-arms live chains.
	Chain time.Duration
}

// DefaultChain is the default Config.Chain: eight 30 s long polls, a
// minute below the sweep's default overdue threshold of 5 minutes.
const DefaultChain = 4 * time.Minute

// allAtOnce is the default Concurrency: more than any batch SQS delivers.
const allAtOnce = 10000

// Defaults fills zero fields.
func (c Config) Defaults() Config {
	c.Visibility = cmp.Or(c.Visibility, 6*time.Minute)
	c.Overhead = cmp.Or(c.Overhead, 5*time.Second)
	c.MaxReadFailures = cmp.Or(c.MaxReadFailures, 20)
	c.Concurrency = cmp.Or(c.Concurrency, allAtOnce)
	c.Chain = cmp.Or(c.Chain, DefaultChain)
	return c
}

// Deps is what the handler works with.
type Deps struct {
	Store  Store
	Genace Genace
	Delays Delays
	// Extender renews message visibility; Sender delivers follow-up
	// messages.
	Extender worker.Extender
	Sender   worker.Sender
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *metrics.Emitter
}

// Handler handles observation batches.
type Handler struct {
	genace  Genace
	delays  Delays
	w       *worker.Worker
	clk     clock.Clock
	log     *slog.Logger
	metrics *metrics.Emitter
	cfg     Config
}

// New wires a handler.
func New(d Deps, cfg Config) *Handler {
	cfg = cfg.Defaults()
	return &Handler{
		genace: d.Genace, delays: d.Delays, clk: d.Clock, log: d.Log, metrics: d.Metrics, cfg: cfg,
		w: worker.New(worker.Deps{Store: d.Store, Extender: d.Extender, Sender: d.Sender, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics},
			worker.Config{Action: message.ActionObserveGeneration, Name: "observe", Queue: "observe", QueueURL: cfg.QueueURL,
				Visibility: cfg.Visibility, Concurrency: cfg.Concurrency}),
	}
}

// Handle is the Lambda entry point for an SQS batch.
func (h *Handler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	return h.w.Handle(ctx, ev, h.decide), nil
}

// obsolete acknowledges a message that the record makes pointless.
func (h *Handler) obsolete(ctx context.Context, env message.Envelope, rec *operation.Record, why worker.Reason) (worker.Outcome, error) {
	return h.w.Obsolete(ctx, env, rec, why)
}

func observable(rec *operation.Record) bool {
	if rec.Parked != nil {
		return false
	}
	return rec.Phase == operation.PhaseAccepted || (rec.Phase == operation.PhaseFailed && rec.Settlement == operation.SettlementUnresolved)
}

func (h *Handler) decide(ctx context.Context, m events.SQSMessage, env message.Envelope, rec operation.Record, l *worker.Lease) (worker.Outcome, error) {
	if rec.RemoteJobID != env.ExpectedRemoteJobID {
		return h.obsolete(ctx, env, &rec, worker.ReasonJobIDMismatch)
	}
	if rec.Revision != env.ExpectedRevision {
		if rec.LastAppliedMessageID == m.MessageId {
			// Our own write landed before a crash: the follow-up may not
			// have left. Send it (duplicates collapse downstream).
			return worker.OutcomeReemitted, h.w.Emit(ctx, &rec, env.Attempt+1)
		}
		return h.obsolete(ctx, env, &rec, worker.ReasonStaleRevision)
	}
	if !observable(&rec) {
		return h.obsolete(ctx, env, &rec, worker.ReasonPhase(rec.Phase))
	}
	return h.chain(ctx, m, env, rec, l)
}

// chain observes the job with long polls back to back, as long as the
// next look is due at once, a whole poll still fits Config.Chain and the
// function's deadline, and the lease holds. An observation that changes
// nothing the record keeps for a reason (the job's state, its credits,
// the phase, settlement, parking) stays in memory; any other is written
// at once, and the chain goes on from what it wrote. The last
// observation is always written, with the follow-up it schedules: the
// record then carries the observations' counters and the time of the
// last look (so the next message long-polls again), and a Schedule.Due
// of now for the sweep. A crash mid-chain loses only unwritten looks:
// the message comes back (or the sweep re-arms it) and reads again; a
// write of its own that landed is found and its follow-up re-sent.
func (h *Handler) chain(ctx context.Context, m events.SQSMessage, env message.Envelope, rec operation.Record, l *worker.Lease) (worker.Outcome, error) {
	end := h.clk.Now().Add(h.cfg.Chain)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-h.cfg.Overhead).Before(end) {
		end = dl.Add(-h.cfg.Overhead)
	}
	poll := h.delays.LongPoll(rec.Model)
	// A clock that does not move with the polls must still end the chain,
	// and so must polls shorter than Genace's window: the chain holds as
	// many looks as full windows fit in Config.Chain, whatever each wait.
	maxPolls := 1
	if poll > 0 {
		maxPolls += int(h.cfg.Chain / max(poll, genace.MaxWait))
	}
	for polls := 1; ; polls++ {
		wait := h.window(ctx, l, &rec)
		job, err := h.genace.Get(ctx, rec.RemoteJobID, wait, wait+h.cfg.Overhead)
		if err != nil {
			return h.readFailed(ctx, m, rec, err)
		}
		now := h.clk.Now()
		snap := job.Snapshot(now)
		if !job.CreatedAt.IsZero() {
			h.metrics.Duration(metrics.RemoteRenderAge, now.Sub(job.CreatedAt), metrics.Dim{Name: "Model", Value: rec.Model})
		}
		next, follow, err := operation.Observe(rec, snap, now, h.delays.BudgetsFor(rec.Model))
		if err != nil {
			return h.obsolete(ctx, env, &rec, worker.ReasonNotApplicable)
		}
		delay := time.Duration(0)
		switch follow {
		case operation.FollowObserve:
			delay = h.delays.Next(&next, now)
			if next.Phase == operation.PhaseFailed {
				delay = h.delays.Accounting(&next, now)
			}
			next.Schedule = &operation.NextAction{Action: string(message.ActionObserveGeneration), Due: now.Add(delay)}
		case operation.FollowDeliver:
			next.Schedule = &operation.NextAction{Action: string(message.ActionDeliverArtifacts), Due: now}
		default:
			next.Schedule = nil
		}
		more := follow == operation.FollowObserve && delay == 0 && poll > 0 && polls < maxPolls &&
			!now.Add(poll).After(end) && !l.Lost()
		if more && !changed(&rec, &next) {
			rec = next // same revision: the look is kept in memory only
			continue
		}
		saved, err := h.w.Persist(ctx, rec, m.MessageId, worker.OnlyAt(rec.Revision, next))
		if errors.Is(err, worker.ErrMovedOn) || errors.Is(err, store.ErrConflict) {
			// Another observer (or the user) wrote first: this worker's view is
			// stale. It writes nothing and schedules nothing.
			h.log.InfoContext(ctx, "observation lost the revision race", "operation_id", rec.OperationID, "expected_revision", rec.Revision)
			return worker.OutcomeLostRace, nil
		}
		if err != nil {
			return worker.OutcomeError, fmt.Errorf("observe %s: save snapshot: %w", rec.OperationID, err)
		}
		h.log.InfoContext(ctx, "observation saved", "operation_id", saved.OperationID, "revision", saved.Revision,
			"phase", string(saved.Phase), "remote_state", string(snap.State), "follow", string(follow), "polls", polls, "chained", more)
		if more {
			rec = saved
			continue
		}
		if follow != operation.FollowObserve {
			h.metrics.Count(metrics.ObservationsPerOp, float64(saved.Counters.Observations), metrics.Dim{Name: "Phase", Value: string(saved.Phase)})
		}
		return worker.OutcomeOfObservation(follow), h.w.Emit(ctx, &saved, env.Attempt+1)
	}
}

// changed reports whether an observation changed what the record must
// keep at once: the job's state or credits (the long poll answers early on
// exactly these), or the operation's phase, settlement, parking or error.
// Progress, timestamps and counters wait for the chain's last write.
func changed(before, after *operation.Record) bool {
	if before.Remote == nil || after.Remote == nil {
		return true
	}
	return before.Remote.State != after.Remote.State || before.Remote.Credits != after.Remote.Credits ||
		before.Remote.SubmissionFailure != after.Remote.SubmissionFailure ||
		before.Phase != after.Phase || before.Settlement != after.Settlement ||
		(before.Parked == nil) != (after.Parked == nil) || before.LastError != after.LastError
}

// window is the long poll that fits the lease and the function's deadline.
// Genace holds a long poll until the job changes from what it is when the
// request arrives, so a long poll only pays off right after the previous
// look: after a delay the job may already be finished (it would never
// change again and the poll would wait in vain), so that read is immediate.
func (h *Handler) window(ctx context.Context, l *worker.Lease, rec *operation.Record) time.Duration {
	wait := h.delays.LongPoll(rec.Model)
	if rec.Remote == nil || h.clk.Now().Sub(rec.Remote.ObservedAt) > wait || rec.Remote.State == operation.RemoteSucceeded {
		// A succeeded job never changes again: its long poll would be held
		// for the whole window.
		wait = 0
	}
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, dl.Sub(h.clk.Now())-h.cfg.Overhead)
	}
	if err := l.Ensure(ctx, wait+h.cfg.Overhead); err != nil {
		// Ownership may be lost. Reading is harmless and the write is
		// conditional, but do not hold the message any longer than the
		// lease that may still run.
		h.log.WarnContext(ctx, "lease not renewed; shortening the long poll", "error", err.Error())
		wait = min(wait, l.Remaining()-h.cfg.Overhead)
	}
	return max(0, wait.Truncate(time.Second))
}

// readFailed handles a failed GET. A transient failure is recorded on the
// record with the next attempt scheduled, so the chain rides out an
// outage without burning the message's receive count; past
// MaxReadFailures, or for a permanent failure, the message fails towards
// the DLQ and triage. A refused key fails the message (retryable) and
// leaves the record as it is.
func (h *Handler) readFailed(ctx context.Context, m events.SQSMessage, rec operation.Record, err error) (worker.Outcome, error) {
	if errors.Is(err, genace.ErrNotFound) {
		return worker.OutcomeNotFound, worker.MarkPermanent(fmt.Errorf("observe %s: job %s: %w", rec.OperationID, rec.RemoteJobID, err))
	}
	if errors.Is(err, genace.ErrUnauthorized) {
		// Our key, not the job: nothing to record against the job. The
		// message comes back after its visibility timeout, and dead-letters
		// (a review asking to observe) if the key stays wrong.
		h.metrics.Count(metrics.GenaceUnauthorized, 1)
		return worker.OutcomeReadError, fmt.Errorf("observe %s: %w: check GENACE_API_KEY", rec.OperationID, err)
	}
	if !genace.Retryable(err) {
		return worker.OutcomeReadError, worker.MarkPermanent(fmt.Errorf("observe %s: %w", rec.OperationID, err))
	}
	if rec.Counters.ReadFailures+1 >= h.cfg.MaxReadFailures {
		return worker.OutcomeReadError, fmt.Errorf("observe %s: %d consecutive failed reads: %w", rec.OperationID, rec.Counters.ReadFailures+1, err)
	}
	now := h.clk.Now()
	next, terr := operation.ReadFailed(rec, "genace_read_failed", now)
	if terr != nil {
		return worker.OutcomeReadError, fmt.Errorf("observe %s: %w (after %w)", rec.OperationID, terr, err)
	}
	next.Schedule = &operation.NextAction{Action: string(message.ActionObserveGeneration), Due: now.Add(h.delays.ReadRetry(next.Counters.ReadFailures))}
	saved, uerr := h.w.Persist(ctx, rec, m.MessageId, worker.OnlyAt(rec.Revision, next))
	if errors.Is(uerr, worker.ErrMovedOn) || errors.Is(uerr, store.ErrConflict) {
		return worker.OutcomeLostRace, nil
	}
	if uerr != nil {
		return worker.OutcomeReadError, fmt.Errorf("observe %s: record read failure: %w (after %w)", rec.OperationID, uerr, err)
	}
	h.log.WarnContext(ctx, "job read failed; retrying later", "operation_id", rec.OperationID, "failures", saved.Counters.ReadFailures, "error", err.Error())
	return worker.OutcomeReadRetry, h.w.Emit(ctx, &saved, rec.Counters.Observations+1)
}
