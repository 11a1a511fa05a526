// Package observe is the observe function's handler: it reads the job an
// observation message names (one long poll), saves the snapshot with a
// write conditioned on the revision the message expects, and then does
// exactly one thing: schedule the next observation, hand over to delivery,
// settle, or park the operation for review. Duplicate observations
// collapse on the revision check; the loser writes and schedules nothing.
package observe

import (
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
	"github.com/genjobs/genjobs/internal/review"
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
	Concurrency     int
}

// Defaults fills zero fields.
func (c Config) Defaults() Config {
	if c.Visibility == 0 {
		c.Visibility = 6 * time.Minute
	}
	if c.Overhead == 0 {
		c.Overhead = 5 * time.Second
	}
	if c.MaxReadFailures == 0 {
		c.MaxReadFailures = 20
	}
	return c
}

// Handler handles observation batches.
type Handler struct {
	store   Store
	genace  Genace
	delays  Delays
	follow  *worker.Emitter
	clk     clock.Clock
	log     *slog.Logger
	metrics *metrics.Emitter
	cfg     Config
	runner  worker.Runner
	records worker.Consumer
}

// New wires a handler.
func New(cfg Config, st Store, g Genace, d Delays, ext worker.Extender, sender worker.Sender, clk clock.Clock, log *slog.Logger, m *metrics.Emitter) *Handler {
	cfg = cfg.Defaults()
	return &Handler{
		store: st, genace: g, delays: d, clk: clk, log: log, metrics: m, cfg: cfg,
		follow: &worker.Emitter{Sender: sender, Reviews: st, Clock: clk, Metrics: m, Source: review.SourceHandler},
		runner: worker.Runner{Action: string(message.ActionObserveGeneration), Concurrency: cfg.Concurrency, Log: log, Metrics: m, Clock: clk},
		records: worker.Consumer{Action: message.ActionObserveGeneration, Name: "observe", Queue: "observe", Store: st,
			Extender: ext, QueueURL: cfg.QueueURL, Visibility: cfg.Visibility, Clock: clk, Log: log, Metrics: m},
	}
}

// Handle is the Lambda entry point for an SQS batch.
func (h *Handler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	return h.runner.Run(ctx, ev, h.records.Record(h.decide)), nil
}

// obsolete acknowledges a message that the record makes pointless.
func (h *Handler) obsolete(ctx context.Context, env message.Envelope, rec *operation.Record, why string) (string, error) {
	return h.records.Obsolete(ctx, env, rec, why)
}

func observable(rec *operation.Record) bool {
	if rec.Parked != nil {
		return false
	}
	return rec.Phase == operation.PhaseAccepted || (rec.Phase == operation.PhaseFailed && rec.Settlement == operation.SettlementUnresolved)
}

func (h *Handler) decide(ctx context.Context, m events.SQSMessage, env message.Envelope, rec operation.Record, l *worker.Lease) (string, error) {
	if rec.RemoteJobID != env.ExpectedRemoteJobID {
		return h.obsolete(ctx, env, &rec, "job_id_mismatch")
	}
	if rec.Revision != env.ExpectedRevision {
		if rec.LastAppliedMessageID == m.MessageId {
			// Our own write landed before a crash: the follow-up may not
			// have left. Send it (duplicates collapse downstream).
			return "reemitted", h.follow.Emit(ctx, &rec, env.Attempt+1)
		}
		return h.obsolete(ctx, env, &rec, "stale_revision")
	}
	if !observable(&rec) {
		return h.obsolete(ctx, env, &rec, "phase_"+string(rec.Phase))
	}
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
		return h.obsolete(ctx, env, &rec, "not_applicable")
	}
	switch follow {
	case operation.FollowObserve:
		delay := h.delays.Next(&next, now)
		if next.Phase == operation.PhaseFailed {
			delay = h.delays.Accounting(&next, now)
		}
		next.Schedule = &operation.NextAction{Action: string(message.ActionObserveGeneration), Due: now.Add(delay)}
	case operation.FollowDeliver:
		next.Schedule = &operation.NextAction{Action: string(message.ActionDeliverArtifacts), Due: now}
	default:
		next.Schedule = nil
	}
	next.LastAppliedMessageID = m.MessageId
	saved, err := h.store.Update(ctx, next, rec.Revision)
	if errors.Is(err, store.ErrConflict) {
		// Another observer (or the user) wrote first: this worker's view is
		// stale. It writes nothing and schedules nothing.
		h.metrics.Count(metrics.StaleWrites, 1, metrics.Dim{Name: "Action", Value: string(env.Action)})
		h.log.InfoContext(ctx, "observation lost the revision race", "operation_id", rec.OperationID, "expected_revision", rec.Revision)
		return "lost_race", nil
	}
	if err != nil {
		return "error", fmt.Errorf("observe %s: save snapshot: %w", rec.OperationID, err)
	}
	if follow != operation.FollowObserve {
		h.metrics.Count(metrics.ObservationsPerOp, float64(saved.Counters.Observations), metrics.Dim{Name: "Phase", Value: string(saved.Phase)})
	}
	h.log.InfoContext(ctx, "observation saved", "operation_id", saved.OperationID, "revision", saved.Revision,
		"phase", string(saved.Phase), "remote_state", string(snap.State), "follow", string(follow))
	return string(follow), h.follow.Emit(ctx, &saved, env.Attempt+1)
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
// the DLQ and triage.
func (h *Handler) readFailed(ctx context.Context, m events.SQSMessage, rec operation.Record, err error) (string, error) {
	if errors.Is(err, genace.ErrNotFound) {
		return "not_found", worker.MarkPermanent(fmt.Errorf("observe %s: job %s: %w", rec.OperationID, rec.RemoteJobID, err))
	}
	if !genace.Retryable(err) {
		return "read_error", worker.MarkPermanent(fmt.Errorf("observe %s: %w", rec.OperationID, err))
	}
	if rec.Counters.ReadFailures+1 >= h.cfg.MaxReadFailures {
		return "read_error", fmt.Errorf("observe %s: %d consecutive failed reads: %w", rec.OperationID, rec.Counters.ReadFailures+1, err)
	}
	now := h.clk.Now()
	next, terr := operation.ReadFailed(rec, "genace_read_failed", now)
	if terr != nil {
		return "read_error", fmt.Errorf("observe %s: %w (after %w)", rec.OperationID, terr, err)
	}
	next.Schedule = &operation.NextAction{Action: string(message.ActionObserveGeneration), Due: now.Add(h.delays.ReadRetry(next.Counters.ReadFailures))}
	next.LastAppliedMessageID = m.MessageId
	saved, uerr := h.store.Update(ctx, next, rec.Revision)
	if errors.Is(uerr, store.ErrConflict) {
		return "lost_race", nil
	}
	if uerr != nil {
		return "read_error", fmt.Errorf("observe %s: record read failure: %w (after %w)", rec.OperationID, uerr, err)
	}
	h.log.WarnContext(ctx, "job read failed; retrying later", "operation_id", rec.OperationID, "failures", saved.Counters.ReadFailures, "error", err.Error())
	return "read_retry", h.follow.Emit(ctx, &saved, rec.Counters.Observations+1)
}
