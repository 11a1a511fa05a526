// Package deliver is the deliver function's handler: for a succeeded
// operation it copies every remote output into our artifact store and
// then marks the operation delivered. Delivery is idempotent (design
// invariant 5): keys are deterministic, every copy is verified against the
// sha256 Genace reported, an output already recorded on the record is
// skipped, and an output already in the store (an earlier attempt that
// stored it but died before recording it) is recorded without a second
// download or upload.
//
// One delivery message legitimately moves the revision several times: one
// conditional write per stored output, then the completion. Every such
// write carries the message's id as LastAppliedMessageID, so a redelivery
// of that message recognises the record's newer revision as its own
// progress and continues from it, while any other message that finds the
// revision moved is acknowledged as obsolete.
package deliver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/worker"
)

// Store is what the handler needs of persistence.
type Store = worker.RecordStore

// Genace reads the job (for freshly signed output URLs) and downloads its
// outputs. Download dials the signed URL; nothing else here reveals it.
type Genace interface {
	Get(ctx context.Context, jobID string, wait, timeout time.Duration) (*genace.Job, error)
	Download(ctx context.Context, u genace.SignedURL, timeout time.Duration) (io.ReadCloser, int64, error)
}

// Artifacts is our artifact store (artifact.S3 deployed, localpack.Dir
// on local runs). Put streams and verifies, never replaces an object, and
// reuses one with the same content; Stat reports size and sha256.
type Artifacts interface {
	Stat(ctx context.Context, key string) (artifact.Object, bool, error)
	Put(ctx context.Context, key string, r io.Reader, size int64, sha256hex, contentType string) (artifact.Object, error)
}

// Config tunes the handler.
type Config struct {
	// QueueURL and Visibility describe the deliver queue (for the lease).
	QueueURL   string
	Visibility time.Duration
	// ReadTimeout bounds one GET of the job.
	ReadTimeout time.Duration
	// CopyTimeout bounds one output's download and store. A copy gets less
	// when the function's deadline or the lease leaves less, but never
	// less than MinCopyWindow: then the rest is handed on.
	CopyTimeout   time.Duration
	MinCopyWindow time.Duration
	// Overhead is what one output needs beyond the copy: the store's Stat
	// and the conditional write.
	Overhead time.Duration
	// MaxCopyFailures is how many consecutive transient failed attempts
	// (reading the job, downloading or storing an output:
	// worker.VerdictRetry) the operation rides out by scheduling retries
	// itself, before it is parked for review. The default, 30 with the
	// default Retry (10 s doubling to 15 min), covers about 6 hours.
	MaxCopyFailures int
	// Retry is the delay before the retry after the n-th consecutive
	// failure; its Jitter also spreads the retries after a 429
	// (schedule.WaitOut). Its Cap must stay within SQS's 15-minute delay or the
	// dispatcher routes the retry through EventBridge Scheduler.
	Retry       schedule.Backoff
	Concurrency int
	// OverdueAfter is the sweep's overdue threshold
	// (SWEEP_OVERDUE_SECONDS): a delivery that starts so late that its
	// first write could land only once the record looks overdue moves the
	// record's due time first (worker.KeepDue), so the sweep does not
	// re-arm it mid-copy. Zero: never.
	OverdueAfter time.Duration
}

// Defaults fills zero fields.
func (c Config) Defaults() Config {
	c.Visibility = cmp.Or(c.Visibility, 6*time.Minute)
	c.ReadTimeout = cmp.Or(c.ReadTimeout, 10*time.Second)
	c.CopyTimeout = cmp.Or(c.CopyTimeout, 5*time.Minute)
	c.MinCopyWindow = cmp.Or(c.MinCopyWindow, 20*time.Second)
	c.Overhead = cmp.Or(c.Overhead, 5*time.Second)
	c.MaxCopyFailures = cmp.Or(c.MaxCopyFailures, DefaultMaxCopyFailures)
	c.Retry = cmp.Or(c.Retry, schedule.Backoff{Base: 10 * time.Second, Cap: 15 * time.Minute, Multiplier: 2, Jitter: 0.2})
	return c
}

// DefaultMaxCopyFailures is the default Config.MaxCopyFailures.
const DefaultMaxCopyFailures = 30

// Deps is what the handler works with.
type Deps struct {
	Store     Store
	Genace    Genace
	Artifacts Artifacts
	// Extender renews message visibility; Sender delivers follow-up
	// messages (retries and continuations).
	Extender worker.Extender
	Sender   worker.Sender
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *metrics.Emitter
}

// Handler handles delivery batches.
type Handler struct {
	genace    Genace
	artifacts Artifacts
	w         *worker.Worker
	clk       clock.Clock
	log       *slog.Logger
	metrics   *metrics.Emitter
	cfg       Config
	rnd       func() float64
}

// New wires a handler.
func New(d Deps, cfg Config) *Handler {
	cfg = cfg.Defaults()
	return &Handler{
		genace: d.Genace, artifacts: d.Artifacts, clk: d.Clock, log: d.Log, metrics: d.Metrics, cfg: cfg,
		w: worker.New(worker.Deps{Store: d.Store, Extender: d.Extender, Sender: d.Sender, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics},
			worker.Config{Action: message.ActionDeliverArtifacts, Name: "deliver", Queue: "deliver", QueueURL: cfg.QueueURL,
				Visibility: cfg.Visibility, Concurrency: cfg.Concurrency}),
		rnd: rand.Float64,
	}
}

// Handle is the Lambda entry point for an SQS batch.
func (h *Handler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	return h.w.Handle(ctx, ev, h.decide), nil
}

// decide runs one message's delivery on its record.
func (h *Handler) decide(ctx context.Context, t worker.Turn) worker.Decision {
	run := &delivery{h: h, m: t.Msg, env: t.Env, lease: t.Lease, cur: t.Rec}
	return run.decide(ctx)
}

// delivery is one message's work on one record. cur is the record as this
// worker last read or wrote it; job is the job as last read (nil before
// the first read).
type delivery struct {
	h     *Handler
	m     events.SQSMessage
	env   message.Envelope
	lease *worker.Lease
	cur   operation.Record
	job   *genace.Job
	// copyBudget is the time the next copy may take; stored counts the
	// outputs this message stored (progress, for yield).
	copyBudget time.Duration
	stored     int
}

// decide checks the message against the record, then delivers.
func (d *delivery) decide(ctx context.Context) worker.Decision {
	rec := &d.cur
	if rec.RemoteJobID != d.env.ExpectedRemoteJobID {
		return worker.Obsolete{Why: worker.ReasonJobIDMismatch}
	}
	if rec.Phase == operation.PhaseDelivered {
		return worker.Obsolete{Why: worker.ReasonAlreadyDelivered}
	}
	if rec.Revision != d.env.ExpectedRevision {
		if rec.LastAppliedMessageID != d.m.MessageId {
			return worker.Obsolete{Why: worker.ReasonStaleRevision}
		}
		// The newer revision is this message's own work (a redelivery
		// after a crash, a timeout or an unacknowledged batch).
		if rec.Phase == operation.PhaseSucceeded && rec.Schedule != nil && rec.Schedule.Due.After(d.h.clk.Now()) {
			// Its last write scheduled a retry for later (a failure, or a
			// 429, which counts no failure; progress is due at once); the
			// retry message may not have left. Send it (duplicates
			// collapse on the revision) instead of retrying early.
			return worker.Emit{Outcome: worker.OutcomeReemitted, Attempt: d.env.Attempt + 1}
		}
		// Otherwise its last writes were progress: continue from them.
	}
	if rec.Phase != operation.PhaseSucceeded {
		return worker.Obsolete{Why: worker.ReasonPhase(rec.Phase)}
	}
	if rec.Parked != nil {
		if rec.LastAppliedMessageID == d.m.MessageId {
			// This message parked it; its review may not have been
			// written (the worker died, the write failed): write it.
			return worker.Emit{Outcome: worker.OutcomeReemitted, Attempt: d.env.Attempt + 1}
		}
		return worker.Obsolete{Why: worker.ReasonParked}
	}
	if rec.Remote == nil {
		return d.park(errors.New("succeeded without a remote snapshot"))
	}
	if pending(rec) > 0 {
		// The first write is the first output's: after the job's read and
		// its copy, within the function's deadline.
		lands := d.h.clk.Now().Add(d.h.cfg.ReadTimeout + d.h.cfg.CopyTimeout + d.h.cfg.Overhead)
		if dl, ok := ctx.Deadline(); ok && dl.Before(lands) {
			lands = dl
		}
		// A lost race: another worker drives the delivery now.
		return worker.KeepDue{Lands: lands, OverdueAfter: d.h.cfg.OverdueAfter, Then: d.next,
			Failed: func(err error) worker.Decision {
				return worker.Done{Outcome: worker.OutcomeFailed, Err: fmt.Errorf("deliver %s: keep the sweep informed: %w", d.cur.OperationID, err)}
			}}
	}
	return d.deliver(ctx)
}

// next goes on with the delivery from the record as written.
func (d *delivery) next(ctx context.Context, saved operation.Record) worker.Decision {
	d.cur = saved
	return d.deliver(ctx)
}

// deliver stores the next output not yet recorded and goes on from its
// write, until every output is recorded; then it completes.
func (d *delivery) deliver(ctx context.Context) worker.Decision {
	h := d.h
	descs := d.cur.Remote.Outputs
	for i, desc := range descs {
		if !artifact.ValidSHA256(desc.SHA256) || desc.SizeBytes < 0 {
			return d.park(fmt.Errorf("output %d: the snapshot holds no usable sha256 or size to verify a copy against", i))
		}
	}
	if pending(&d.cur) > 0 && d.job == nil {
		// Fresh signed URLs: the snapshot never keeps them, and any URL an
		// earlier read saw may have expired.
		if st := d.fetch(ctx); st != nil {
			return st
		}
	}
	for i, desc := range descs {
		if _, ok := d.cur.Delivered(i); ok {
			continue // recorded by an earlier attempt: reuse it
		}
		if why := d.authority(ctx); why != handOnNone {
			return d.yield(ctx, why)
		}
		key := artifact.Key(d.cur.OperationID, d.cur.RemoteJobID, i, desc.ContentType)
		obj, how, err := d.store(ctx, i, desc, key)
		if err != nil {
			return d.failed(err)
		}
		rec := operation.Delivery{Index: i, Key: obj.Key, SizeBytes: obj.Size, SHA256: obj.SHA256, StoredAt: h.clk.Now()}
		return d.record(rec, func(ctx context.Context, saved operation.Record) worker.Decision {
			d.stored++
			h.metrics.Count(metrics.Deliveries, 1, metrics.Dim{Name: "Outcome", Value: how})
			h.log.InfoContext(ctx, "output stored", "operation_id", saved.OperationID, "index", i, "key", obj.Key,
				"size_bytes", obj.Size, "outcome", how, "revision", saved.Revision)
			return d.next(ctx, saved)
		})
	}
	if d.cur.Phase == operation.PhaseSucceeded {
		// Every output was recorded before this message (a crash between
		// the last output and the completion): complete now.
		return d.persist(func(r operation.Record) (operation.Record, error) {
			if r.Phase != operation.PhaseSucceeded {
				return r, worker.ErrMovedOn
			}
			return operation.CompleteDelivery(r, h.clk.Now())
		}, d.next)
	}
	h.log.InfoContext(ctx, "operation delivered", "operation_id", d.cur.OperationID, "revision", d.cur.Revision, "outputs", len(descs))
	return worker.Emit{Outcome: worker.OutcomeDelivered, Attempt: d.env.Attempt + 1}
}

func pending(r *operation.Record) int {
	n := 0
	for i := range r.Remote.Outputs {
		if _, ok := r.Delivered(i); !ok {
			n++
		}
	}
	return n
}

// fetch GETs the job (no long poll) for freshly signed URLs and checks the
// outputs against the snapshot's descriptors. It returns nil when the
// delivery can go on, or how it ends.
func (d *delivery) fetch(ctx context.Context) worker.Decision {
	job, err := d.h.genace.Get(ctx, d.cur.RemoteJobID, 0, d.h.cfg.ReadTimeout)
	if err != nil {
		return d.failed(&readError{err: err})
	}
	if err := matches(d.cur.Remote.Outputs, job); err != nil {
		// The outputs we would copy are not the ones observation saw. A
		// copy could not be verified against the record; a person must
		// look.
		return d.park(fmt.Errorf("job %s: %w", d.cur.RemoteJobID, err))
	}
	d.job = job
	return nil
}

// matches cross-checks a fresh read of the job with the snapshot's
// descriptors. Its errors name indexes and fields, never URLs.
func matches(descs []operation.OutputDescriptor, job *genace.Job) error {
	if job.State != genace.RemoteSucceeded {
		return fmt.Errorf("remote state is now %s, observed succeeded", job.State)
	}
	if len(job.Outputs) != len(descs) {
		return fmt.Errorf("remote lists %d outputs, the snapshot %d", len(job.Outputs), len(descs))
	}
	for i, o := range job.Outputs {
		w := descs[i]
		if o.SizeBytes != w.SizeBytes || o.SHA256 != w.SHA256 || o.ContentType != w.ContentType {
			return fmt.Errorf("output %d is now %s/%d bytes/sha256 %s, the snapshot says %s/%d bytes/sha256 %s",
				i, o.ContentType, o.SizeBytes, o.SHA256, w.ContentType, w.SizeBytes, w.SHA256)
		}
		if o.URL.IsZero() {
			return fmt.Errorf("output %d has no URL", i)
		}
	}
	return nil
}

// handOn says why a delivery hands the rest of its outputs on.
type handOn string

const (
	handOnNone     handOn = ""
	handOnDeadline handOn = "deadline"
	handOnLease    handOn = "lease"
)

// outcome is the handing on's outcome for metrics.
func (why handOn) outcome() worker.Outcome {
	if why == handOnLease {
		return worker.OutcomeYieldedLease
	}
	return worker.OutcomeYieldedDeadline
}

// authority says why this worker should stop before another copy, or
// handOnNone. A copy needs the lease and the function's deadline to
// outlast it; if either will not, progress so far is kept and the rest
// handed on.
func (d *delivery) authority(ctx context.Context) handOn {
	budget := d.h.cfg.CopyTimeout
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, dl.Sub(d.h.clk.Now())-d.h.cfg.Overhead)
	}
	if budget < d.h.cfg.MinCopyWindow {
		return handOnDeadline
	}
	d.copyBudget = budget
	if err := d.lease.Ensure(ctx, budget+d.h.cfg.Overhead); err != nil {
		d.h.log.WarnContext(ctx, "lease not renewed; handing the rest of the delivery on", "operation_id", d.cur.OperationID, "error", err.Error())
		return handOnLease
	}
	return handOnNone
}

// yield hands the remaining outputs to a fresh message at the current
// revision, instead of copying past the lease or the deadline. Nothing is
// lost: recorded outputs stay recorded, and a stored but unrecorded one
// is found by the next attempt's Stat.
func (d *delivery) yield(ctx context.Context, why handOn) worker.Decision {
	next := message.Envelope{Action: message.ActionDeliverArtifacts, OperationID: d.cur.OperationID, ExpectedRevision: d.cur.Revision,
		ExpectedRemoteJobID: d.cur.RemoteJobID, Attempt: d.env.Attempt + 1}
	// Handing on at once is right after progress; without any, an
	// immediate re-send would spin (a function whose timeout cannot fit a
	// copy), so wait the retry backoff instead.
	delay := time.Duration(0)
	if d.stored == 0 {
		delay = d.h.cfg.Retry.Delay(0, nil)
	}
	d.h.log.InfoContext(ctx, "delivery handed on", "operation_id", d.cur.OperationID, "reason", string(why), "revision", d.cur.Revision)
	return worker.Send{Env: next, Delay: delay, Outcome: why.outcome(), What: "hand on after " + string(why)}
}

// store puts output i under key, or finds it already there. how is
// "reused" or "copied".
func (d *delivery) store(ctx context.Context, i int, desc operation.OutputDescriptor, key string) (artifact.Object, string, error) {
	obj, ok, err := d.h.artifacts.Stat(ctx, key)
	if err != nil {
		return artifact.Object{}, "", &copyError{err: err}
	}
	if ok {
		if obj.Size == desc.SizeBytes && obj.SHA256 == desc.SHA256 {
			return obj, "reused", nil
		}
		return artifact.Object{}, "", worker.MarkPermanent(fmt.Errorf("output %d: %s already holds %d bytes with sha256 %q, expected %d bytes with %s: %w",
			i, key, obj.Size, obj.SHA256, desc.SizeBytes, desc.SHA256, artifact.ErrConflict))
	}
	for refreshed := false; ; refreshed = true {
		obj, err = d.copy(ctx, d.job.Outputs[i].URL, key, desc)
		if err == nil {
			return obj, "copied", nil
		}
		if !errors.Is(err, genace.ErrURLExpired) || refreshed {
			return artifact.Object{}, "", &copyError{err: fmt.Errorf("output %d: %w", i, err)}
		}
		// Signed URLs expire; a new GET signs them afresh. Once.
		d.h.log.InfoContext(ctx, "signed URL expired; reading the job again", "operation_id", d.cur.OperationID, "index", i)
		if st := d.fetch(ctx); st != nil {
			return artifact.Object{}, "", &handled{st}
		}
	}
}

// copy streams one output from its signed URL into the store.
func (d *delivery) copy(ctx context.Context, u genace.SignedURL, key string, desc operation.OutputDescriptor) (artifact.Object, error) {
	ctx, cancel := context.WithTimeout(ctx, d.copyBudget)
	defer cancel()
	body, n, err := d.h.genace.Download(ctx, u, d.copyBudget)
	if err != nil {
		return artifact.Object{}, err
	}
	defer body.Close()
	if n >= 0 && n != desc.SizeBytes {
		return artifact.Object{}, fmt.Errorf("%w: download announces %d bytes, the snapshot %d", artifact.ErrMismatch, n, desc.SizeBytes)
	}
	return d.h.artifacts.Put(ctx, key, body, desc.SizeBytes, desc.SHA256, desc.ContentType)
}

// park stops automation on a delivery that no retry can complete (an
// object of other content under an output's key, outputs that differ
// from the snapshot, a job Genace no longer knows): worker.Park with the
// cause, and the message acknowledged. Failed towards the DLQ instead, it
// left the record's delivery due, and every sweep run re-armed it: five
// receives, the DLQ and one more review each time, forever.
func (d *delivery) park(cause error) worker.Decision {
	return worker.Park{Reason: "delivery cannot complete: " + cause.Error(), Category: "delivery_blocked", Attempt: d.env.Attempt + 1}
}

// record notes one stored output with a conditional write, completing the
// operation when it was the last, and goes on with then.
func (d *delivery) record(del operation.Delivery, then worker.Then) worker.Decision {
	now := d.h.clk.Now()
	return d.persist(func(r operation.Record) (operation.Record, error) {
		if r.Phase != operation.PhaseSucceeded {
			return r, worker.ErrMovedOn // another worker completed the delivery
		}
		n, changed, err := operation.RecordDelivery(r, del, now)
		if err != nil {
			return r, err // recorded with another checksum or key: permanent
		}
		if !changed && pending(&n) > 0 {
			return r, worker.ErrNothingToWrite // another worker recorded the same output
		}
		// A stored output ends a run of failures.
		n.Counters.ReadFailures = 0
		if pending(&n) == 0 {
			return operation.CompleteDelivery(n, now)
		}
		// Progress: the sweep sees a delivery that is due now, and
		// re-arms it only if progress stops for its grace period.
		n.Schedule = &operation.NextAction{Action: string(message.ActionDeliverArtifacts), Due: now}
		return n, nil
	}, then)
}

// persist writes mutate's record, re-applied to the record as it stands
// on a conflict, and goes on with then. A record that left succeeded
// (worker.ErrMovedOn) ends the message: the newer state stands. mutate's
// own error (an output recorded with another checksum or key) parks the
// operation: no retry can reconcile the two; a person must look.
func (d *delivery) persist(mutate worker.Mutation, then worker.Then) worker.Decision {
	var refused error
	return worker.Write{Then: then,
		Mutate: func(r operation.Record) (operation.Record, error) {
			n, err := mutate(r)
			if err != nil && !errors.Is(err, worker.ErrMovedOn) && !errors.Is(err, worker.ErrNothingToWrite) {
				refused = err
			}
			return n, err
		},
		Lost: worker.Done{Outcome: worker.OutcomeMovedOn},
		Failed: func(err error) worker.Decision {
			if refused != nil {
				return d.park(refused)
			}
			return worker.Done{Outcome: worker.OutcomeError, Err: fmt.Errorf("deliver %s: write: %w", d.cur.OperationID, err)}
		}}
}

// readError is a failed GET of the job.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// copyError is a failed download or store of one output.
type copyError struct{ err error }

func (e *copyError) Error() string { return e.err.Error() }
func (e *copyError) Unwrap() error { return e.err }

// handled carries an end already decided deeper down (a re-read that
// failed, or found the outputs changed).
type handled struct{ worker.Decision }

func (e *handled) Error() string { return "decided: the job's re-read" }

// judge is worker.Judge for a failed read or copy of this delivery.
func judge(err error) worker.Failure {
	var re *readError
	if errors.As(err, &re) {
		return worker.Judge(err, "genace_read_failed")
	}
	return worker.Judge(err, "artifact_copy_failed")
}

// failed hands a failed read or copy to the worker's failure policy
// (worker.Retry), with deliver's budgets: a 429 is waited out for its
// Retry-After (schedule.WaitOut); any other failure is retried after
// Config.Retry until its budget runs out (MaxCopyFailures for a 5xx, a
// timeout or a store error; worker.SuspectAttempts for a copy that does
// not verify or a body that no longer decodes; at once for a conflict or
// a 4xx), and then the operation is parked with one review.
func (d *delivery) failed(err error) worker.Decision {
	h := d.h
	var done *handled
	if errors.As(err, &done) {
		return done.Decision
	}
	f := judge(err)
	rec := d.cur
	return worker.Retry{Err: err, Failure: f, Action: message.ActionDeliverArtifacts, Budget: h.cfg.MaxCopyFailures,
		Throttled: func(retryAfter time.Duration) time.Duration {
			return schedule.WaitOut(retryAfter, h.cfg.Retry.Jitter, h.cfg.Retry.Cap, h.rnd)
		},
		Backoff: func(failures int) time.Duration { return h.cfg.Retry.Delay(failures-1, h.rnd) },
		Park: func(failures int) string {
			return fmt.Sprintf("delivery cannot complete: job %s: %s, %d failed attempt(s) in a row", rec.RemoteJobID, f.Category, failures)
		},
		Attempt: d.env.Attempt + 1, Failed: worker.OutcomeFailed, Retried: worker.OutcomeOfRetry(f.Category)}
}
