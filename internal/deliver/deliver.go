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
	"github.com/genjobs/genjobs/internal/store"
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
func (h *Handler) decide(ctx context.Context, m events.SQSMessage, env message.Envelope, rec operation.Record, l *worker.Lease) (worker.Outcome, error) {
	run := &delivery{h: h, m: m, env: env, lease: l, cur: rec}
	return run.decide(ctx)
}

// delivery is one message's work on one record. cur is the record as this
// worker last read or wrote it.
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

// obsolete acknowledges a message that the record makes pointless.
func (d *delivery) obsolete(ctx context.Context, why worker.Reason) (worker.Outcome, error) {
	return d.h.w.Obsolete(ctx, d.env, &d.cur, why)
}

// decide checks the message against the record, then delivers.
func (d *delivery) decide(ctx context.Context) (worker.Outcome, error) {
	rec := &d.cur
	if rec.RemoteJobID != d.env.ExpectedRemoteJobID {
		return d.obsolete(ctx, worker.ReasonJobIDMismatch)
	}
	if rec.Phase == operation.PhaseDelivered {
		return d.obsolete(ctx, worker.ReasonAlreadyDelivered)
	}
	if rec.Revision != d.env.ExpectedRevision {
		if rec.LastAppliedMessageID != d.m.MessageId {
			return d.obsolete(ctx, worker.ReasonStaleRevision)
		}
		// The newer revision is this message's own work (a redelivery
		// after a crash, a timeout or an unacknowledged batch).
		if rec.Phase == operation.PhaseSucceeded && rec.Schedule != nil && rec.Schedule.Due.After(d.h.clk.Now()) {
			// Its last write scheduled a retry for later (a failure, or a
			// 429, which counts no failure; progress is due at once); the
			// retry message may not have left. Send it (duplicates
			// collapse on the revision) instead of retrying early.
			return worker.OutcomeReemitted, d.h.w.Emit(ctx, rec, d.env.Attempt+1)
		}
		// Otherwise its last writes were progress: continue from them.
	}
	if rec.Phase != operation.PhaseSucceeded {
		return d.obsolete(ctx, worker.ReasonPhase(rec.Phase))
	}
	if rec.Parked != nil {
		if rec.LastAppliedMessageID == d.m.MessageId {
			// This message parked it; its review may not have been
			// written (the worker died, the write failed): write it.
			return worker.OutcomeReemitted, d.h.w.Emit(ctx, rec, d.env.Attempt+1)
		}
		return d.obsolete(ctx, worker.ReasonParked)
	}
	if rec.Remote == nil {
		return d.park(ctx, errors.New("succeeded without a remote snapshot"))
	}
	if pending(rec) > 0 {
		// The first write is the first output's: after the job's read and
		// its copy, within the function's deadline.
		lands := d.h.clk.Now().Add(d.h.cfg.ReadTimeout + d.h.cfg.CopyTimeout + d.h.cfg.Overhead)
		if dl, ok := ctx.Deadline(); ok && dl.Before(lands) {
			lands = dl
		}
		cur, err := d.h.w.KeepDue(ctx, d.cur, d.m.MessageId, lands, d.h.cfg.OverdueAfter)
		if errors.Is(err, worker.ErrMovedOn) || errors.Is(err, store.ErrConflict) {
			return worker.OutcomeLostRace, nil // another worker drives the delivery now
		}
		if err != nil {
			return worker.OutcomeFailed, fmt.Errorf("deliver %s: keep the sweep informed: %w", d.cur.OperationID, err)
		}
		d.cur = cur
	}
	return d.deliver(ctx)
}

// deliver stores every output not yet recorded, then completes.
func (d *delivery) deliver(ctx context.Context) (worker.Outcome, error) {
	h := d.h
	descs := d.cur.Remote.Outputs
	for i, desc := range descs {
		if !artifact.ValidSHA256(desc.SHA256) || desc.SizeBytes < 0 {
			return d.park(ctx, fmt.Errorf("output %d: the snapshot holds no usable sha256 or size to verify a copy against", i))
		}
	}
	if pending(&d.cur) > 0 {
		// Fresh signed URLs: the snapshot never keeps them, and any URL an
		// earlier read saw may have expired.
		if st := d.fetch(ctx); st != nil {
			return st.outcome, st.err
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
			return d.failed(ctx, err)
		}
		rec := operation.Delivery{Index: i, Key: obj.Key, SizeBytes: obj.Size, SHA256: obj.SHA256, StoredAt: h.clk.Now()}
		if st := d.record(ctx, rec); st != nil {
			return st.outcome, st.err
		}
		d.stored++
		h.metrics.Count(metrics.Deliveries, 1, metrics.Dim{Name: "Outcome", Value: how})
		h.log.InfoContext(ctx, "output stored", "operation_id", d.cur.OperationID, "index", i, "key", obj.Key,
			"size_bytes", obj.Size, "outcome", how, "revision", d.cur.Revision)
	}
	if d.cur.Phase == operation.PhaseSucceeded {
		// Every output was recorded before this message (a crash between
		// the last output and the completion): complete now.
		if st := d.persist(ctx, func(r operation.Record) (operation.Record, error) {
			if r.Phase != operation.PhaseSucceeded {
				return r, worker.ErrMovedOn
			}
			return operation.CompleteDelivery(r, h.clk.Now())
		}); st != nil {
			return st.outcome, st.err
		}
	}
	h.log.InfoContext(ctx, "operation delivered", "operation_id", d.cur.OperationID, "revision", d.cur.Revision, "outputs", len(descs))
	return worker.OutcomeDelivered, h.w.Emit(ctx, &d.cur, d.env.Attempt+1)
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

// stop is how a message's handling ends early: the outcome for metrics
// and the error for the batch (nil acknowledges the message).
type stop struct {
	outcome worker.Outcome
	err     error
}

// fetch GETs the job (no long poll) for freshly signed URLs and checks the
// outputs against the snapshot's descriptors.
func (d *delivery) fetch(ctx context.Context) *stop {
	job, err := d.h.genace.Get(ctx, d.cur.RemoteJobID, 0, d.h.cfg.ReadTimeout)
	if err != nil {
		outcome, err := d.failed(ctx, &readError{err: err})
		return &stop{outcome, err}
	}
	if err := matches(d.cur.Remote.Outputs, job); err != nil {
		// The outputs we would copy are not the ones observation saw. A
		// copy could not be verified against the record; a person must
		// look.
		outcome, err := d.park(ctx, fmt.Errorf("job %s: %w", d.cur.RemoteJobID, err))
		return &stop{outcome, err}
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
func (d *delivery) yield(ctx context.Context, why handOn) (worker.Outcome, error) {
	next := message.Envelope{Action: message.ActionDeliverArtifacts, OperationID: d.cur.OperationID, ExpectedRevision: d.cur.Revision,
		ExpectedRemoteJobID: d.cur.RemoteJobID, Attempt: d.env.Attempt + 1}
	// Handing on at once is right after progress; without any, an
	// immediate re-send would spin (a function whose timeout cannot fit a
	// copy), so wait the retry backoff instead.
	delay := time.Duration(0)
	if d.stored == 0 {
		delay = d.h.cfg.Retry.Delay(0, nil)
	}
	if _, err := d.h.w.Send(ctx, next, delay); err != nil {
		return worker.OutcomeError, fmt.Errorf("deliver %s: hand on after %s: %w", d.cur.OperationID, why, err)
	}
	d.h.log.InfoContext(ctx, "delivery handed on", "operation_id", d.cur.OperationID, "reason", string(why), "revision", d.cur.Revision)
	return why.outcome(), nil
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
// from the snapshot, a job Genace no longer knows): the record keeps its
// phase, is parked with the cause, which takes it out of the sweep's
// index, and one review asks an operator, whose replay clears the park.
// The message is acknowledged. Failed towards the DLQ instead, it left
// the record's delivery due, and every sweep run re-armed it: five
// receives, the DLQ and one more review each time, forever.
func (d *delivery) park(ctx context.Context, cause error) (worker.Outcome, error) {
	return d.parkAs(ctx, cause.Error(), "delivery_blocked")
}

// parkAs is park with the review's reason and the failure's category
// (the record's LastError and the OperationsParked metric's Reason).
func (d *delivery) parkAs(ctx context.Context, cause, category string) (worker.Outcome, error) {
	h := d.h
	parked, outcome, err := h.w.Park(ctx, d.cur, d.m.MessageId, "delivery cannot complete: "+cause, category, d.env.Attempt+1)
	switch outcome {
	case worker.OutcomeLostRace:
		// Another worker moved the record: it drives the delivery now,
		// and parks it too should it meet the same cause.
		h.log.InfoContext(ctx, "record moved on under this delivery; the newer state stands", "operation_id", d.cur.OperationID, "cause", cause)
		return outcome, nil
	case worker.OutcomeError:
		return outcome, fmt.Errorf("deliver %s: park after %s: %w", d.cur.OperationID, cause, err)
	}
	d.cur = parked
	h.log.WarnContext(ctx, "delivery cannot complete; parked for review", "operation_id", parked.OperationID, "revision", parked.Revision, "cause", cause)
	return outcome, err
}

// record notes one stored output with a conditional write, completing the
// operation when it was the last.
func (d *delivery) record(ctx context.Context, del operation.Delivery) *stop {
	now := d.h.clk.Now()
	return d.persist(ctx, func(r operation.Record) (operation.Record, error) {
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
	})
}

// persist writes mutate's record through the worker (worker.Persist),
// from the record as this worker last read or wrote it, and keeps the
// record as written, or as it now stands, as d.cur. A record that left
// succeeded (worker.ErrMovedOn) ends the message: the newer state stands.
// mutate's own error (an output recorded with another checksum or key)
// is permanent.
func (d *delivery) persist(ctx context.Context, mutate worker.Mutation) *stop {
	var refused error
	saved, err := d.h.w.Persist(ctx, d.cur, d.m.MessageId, func(r operation.Record) (operation.Record, error) {
		n, err := mutate(r)
		if err != nil && !errors.Is(err, worker.ErrMovedOn) && !errors.Is(err, worker.ErrNothingToWrite) {
			refused = err
		}
		return n, err
	})
	d.cur = saved
	switch {
	case err == nil:
		return nil
	case errors.Is(err, worker.ErrMovedOn):
		d.h.log.InfoContext(ctx, "record moved on under this delivery; the newer state stands", "operation_id", d.cur.OperationID,
			"revision", d.cur.Revision, "phase", string(d.cur.Phase))
		return &stop{worker.OutcomeMovedOn, nil}
	case refused != nil:
		// An output recorded with another checksum or key: no retry
		// can reconcile the two; a person must look.
		outcome, err := d.park(ctx, refused)
		return &stop{outcome, err}
	}
	return &stop{worker.OutcomeError, fmt.Errorf("deliver %s: write: %w", d.cur.OperationID, err)}
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
// failed and was recorded, or found the outputs changed).
type handled struct{ *stop }

func (e *handled) Error() string {
	if e.err == nil {
		return string(e.outcome)
	}
	return e.err.Error()
}
func (e *handled) Unwrap() error { return e.err }

// judge is worker.Judge for a failed read or copy of this delivery.
func judge(err error) worker.Failure {
	var re *readError
	if errors.As(err, &re) {
		return worker.Judge(err, "genace_read_failed")
	}
	return worker.Judge(err, "artifact_copy_failed")
}

// failed handles a failed read or copy, as worker.Judge decides (the one
// place that does). A 429 is waited out for its Retry-After and counts
// for nothing. Any other failure is recorded on the record (phase
// unchanged, failure counted, retry scheduled with backoff) so delivery
// rides out an outage without burning the message's receive count, until
// the failure's budget runs out (MaxCopyFailures for a 5xx, a timeout or
// a store error; worker.SuspectAttempts for a copy that does not verify or
// a body that no longer decodes; at once for a conflict or a 4xx): then
// the operation is parked with one review (park). Failed towards the DLQ
// instead, the message would never get there: the sweep re-arms the due
// record first and the old message comes back obsolete. A refused key
// fails the message (retryable) and leaves the record as it is.
func (d *delivery) failed(ctx context.Context, err error) (worker.Outcome, error) {
	h := d.h
	var done *handled
	if errors.As(err, &done) {
		return done.outcome, done.err
	}
	f := judge(err)
	rec := d.cur
	now := h.clk.Now()
	var (
		next  operation.Record
		terr  error
		delay time.Duration
	)
	switch failures := rec.Counters.ReadFailures + 1; {
	case f.Verdict == worker.VerdictKey:
		// Our key, not the job or its outputs: nothing to record against
		// them. The message comes back after its visibility timeout (or
		// the sweep re-arms the record first); GenaceUnauthorizedAlarm,
		// not a dead letter, tells a person that the key is wrong.
		h.metrics.Count(metrics.GenaceUnauthorized, 1)
		return worker.OutcomeFailed, fmt.Errorf("deliver %s: %w: check GENACE_API_KEY", d.cur.OperationID, err)
	case f.Verdict == worker.VerdictWait:
		h.metrics.Count(metrics.GenaceThrottled, 1)
		next, terr = operation.ReadThrottled(rec, now)
		delay = schedule.WaitOut(f.Wait, h.cfg.Retry.Jitter, h.cfg.Retry.Cap, h.rnd)
	case f.Parks(failures, rec.LastError, h.cfg.MaxCopyFailures):
		h.log.WarnContext(ctx, "delivery failed beyond its budget", "operation_id", rec.OperationID, "category", f.Category,
			"failures", failures, "error", err.Error())
		return d.parkAs(ctx, fmt.Sprintf("job %s: %s, %d failed attempt(s) in a row", rec.RemoteJobID, f.Category, failures), f.Category)
	default:
		next, terr = operation.ReadFailed(rec, f.Category, now)
		delay = h.cfg.Retry.Delay(next.Counters.ReadFailures-1, h.rnd)
	}
	if terr != nil {
		return worker.OutcomeFailed, fmt.Errorf("deliver %s: %w (after %w)", rec.OperationID, terr, err)
	}
	next.Schedule = &operation.NextAction{Action: string(message.ActionDeliverArtifacts), Due: now.Add(delay)}
	saved, uerr := h.w.Persist(ctx, rec, d.m.MessageId, worker.OnlyAt(rec.Revision, next))
	if errors.Is(uerr, worker.ErrMovedOn) || errors.Is(uerr, store.ErrConflict) {
		// Another worker moved the record: it drives the delivery now.
		return worker.OutcomeLostRace, nil
	}
	if uerr != nil {
		return worker.OutcomeFailed, fmt.Errorf("deliver %s: record failure: %w (after %w)", rec.OperationID, uerr, err)
	}
	d.cur = saved
	h.log.WarnContext(ctx, "delivery failed; retrying later", "operation_id", rec.OperationID, "category", f.Category,
		"failures", saved.Counters.ReadFailures, "retry_at", saved.Schedule.Due, "error", err.Error())
	return worker.OutcomeOfRetry(f.Category), h.w.Emit(ctx, &saved, d.env.Attempt+1)
}
