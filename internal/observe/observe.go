// Package observe is the observe function's handler: it reads the job an
// observation message names with long polls chained back to back while
// the message's lease, the function's deadline and Config.Chain allow
// (each sent Config.Overlap before the previous window runs out, so one
// is always waiting at Genace), and writes the record, conditioned on the
// revision the message expects, only when the job's state or money
// changed, when the chain hands over to a fresh message, or when the next
// look is not due at once. The last write does exactly one thing: schedule the next
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
	"sync"
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
	// Throttled is the delay after a GET answered 429 with this
	// Retry-After (schedule.WaitOut), within Longest.
	Throttled(retryAfter time.Duration) time.Duration
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
	// MaxReadFailures is how many consecutive transient failed GETs (a
	// 5xx, a timeout, a broken connection: worker.VerdictRetry) the chain
	// rides out by itself before it parks the operation for review. The
	// default, 80 with the default read backoff (5 s doubling to 5 min),
	// covers about 6 hours of outage.
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
	// Overlap is how long before a long poll's window runs out the chain
	// sends the next one (default DefaultOverlap; negative: never).
	Overlap time.Duration
	// OverdueAfter is the sweep's overdue threshold (SWEEP_OVERDUE_SECONDS;
	// zero: no sweep to keep informed).
	OverdueAfter time.Duration
}

// DefaultChain is the default Config.Chain: eight 30 s long polls, a
// minute below the sweep's default overdue threshold of 5 minutes.
const DefaultChain = 4 * time.Minute

// DefaultOverlap is the default Config.Overlap. Genace answers a long
// poll when the job changes after the poll arrives, so a job that changes
// between one poll's window running out and the next poll arriving (a
// round trip, the processing and sometimes a write) would be seen only a
// whole window later. Sending the next poll this long before the window
// runs out keeps one waiting at Genace throughout; it must exceed the
// jitter of the one-way latency, or the next poll may still arrive late.
// It costs about Overlap/wait more GETs (1 s of a 30 s window: ~3 %).
const DefaultOverlap = time.Second

// DefaultMaxReadFailures is the default Config.MaxReadFailures.
const DefaultMaxReadFailures = 80

// allAtOnce is the default Concurrency: more than any batch SQS delivers.
const allAtOnce = 10000

// Defaults fills zero fields.
func (c Config) Defaults() Config {
	c.Visibility = cmp.Or(c.Visibility, 6*time.Minute)
	c.Overhead = cmp.Or(c.Overhead, 5*time.Second)
	c.MaxReadFailures = cmp.Or(c.MaxReadFailures, DefaultMaxReadFailures)
	c.Concurrency = cmp.Or(c.Concurrency, allAtOnce)
	c.Chain = cmp.Or(c.Chain, DefaultChain)
	c.Overlap = cmp.Or(c.Overlap, DefaultOverlap)
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
// function's deadline, and the lease holds. Config.Overlap before a
// poll's window runs out, while the chain is set to go on, the next poll
// is sent, so that one is always waiting at Genace: a job that changes
// between two windows is seen at once, not a window late. Answers are
// taken in the order the polls were sent; a poll sent before a change and
// answered with it changes nothing more. An observation that changes
// nothing the record keeps for a reason (the job's state, its credits,
// the phase, settlement, parking) stays in memory; any other is written
// at once, after the next poll has left, and the chain goes on from what
// it wrote. The last observation is always written, with the follow-up it
// schedules: the record then carries the observations' counters and the
// time of the last look (so the next message long-polls again), and a
// Schedule.Due of now for the sweep. Polls still in flight when the chain
// ends are cancelled (a GET changes nothing) and waited for. A crash
// mid-chain loses only unwritten looks: the message comes back (or the
// sweep re-arms it) and reads again; a write of its own that landed is
// found and its follow-up re-sent.
func (h *Handler) chain(ctx context.Context, m events.SQSMessage, env message.Envelope, rec operation.Record, l *worker.Lease) (worker.Outcome, error) {
	end := h.clk.Now().Add(h.cfg.Chain)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-h.cfg.Overhead).Before(end) {
		end = dl.Add(-h.cfg.Overhead)
	}
	rec, err := h.inform(ctx, m, rec, end)
	if errors.Is(err, worker.ErrMovedOn) || errors.Is(err, store.ErrConflict) {
		h.log.InfoContext(ctx, "observation lost the revision race", "operation_id", rec.OperationID, "expected_revision", rec.Revision)
		return worker.OutcomeLostRace, nil
	}
	if err != nil {
		return worker.OutcomeError, fmt.Errorf("observe %s: keep the sweep informed: %w", rec.OperationID, err)
	}
	poll := h.delays.LongPoll(rec.Model)
	// A clock that does not move with the polls must still end the chain,
	// and so must polls shorter than Genace's window: the chain holds as
	// many looks as full windows fit in Config.Chain, whatever each wait.
	maxPolls := 1
	if poll > 0 {
		maxPolls += int(h.cfg.Chain / max(poll, genace.MaxWait))
	}
	f := &flight{}
	defer f.stop()
	// goesOn is whether the chain, with r its last look, will want
	// another poll at at, when the newest poll's window runs out: the
	// conditions of more below, foreseen.
	goesOn := func(r *operation.Record, at time.Time) bool {
		return r.Phase == operation.PhaseAccepted && r.Parked == nil && poll > 0 && f.sent < maxPolls &&
			h.delays.Next(r, at) == 0 && !at.Add(poll).After(end) && !l.Lost()
	}
	// send starts a poll, with r the last look; since is the last time
	// the job is known to have held still (see window).
	send := func(r *operation.Record, since time.Time) {
		wait := h.window(ctx, l, r, since)
		now := h.clk.Now()
		var overlap <-chan time.Time
		if h.cfg.Overlap > 0 && wait > h.cfg.Overlap && goesOn(r, now.Add(wait)) {
			overlap = h.clk.After(wait - h.cfg.Overlap)
		}
		f.start(ctx, h.genace, h.clk, r.RemoteJobID, wait, wait+h.cfg.Overhead, overlap)
	}
	for looks := 1; ; looks++ {
		if len(f.polls) == 0 {
			send(&rec, lastLook(&rec))
		}
		head := f.polls[0]
		for waiting := true; waiting; {
			newest := f.polls[len(f.polls)-1]
			select {
			case <-head.done:
				waiting = false
			case fired := <-newest.overlap:
				newest.overlap = nil
				// A timer that fires only after the window ran out (a
				// stalled process, a virtual clock that jumped) sends
				// nothing: the answer is due, and the chain goes on from it.
				windowEnd := newest.sent.Add(newest.wait)
				if fired.Before(windowEnd) && goesOn(&rec, windowEnd) {
					// The newest poll still holds: the job has not changed
					// since it arrived.
					send(&rec, newest.sent)
				}
			}
		}
		f.polls = f.polls[1:]
		head.cancel()
		if head.err != nil {
			f.stop()
			return h.readFailed(ctx, m, rec, head.err)
		}
		job := head.job
		now := h.clk.Now()
		snap := job.Snapshot(now)
		if !job.CreatedAt.IsZero() {
			h.metrics.Duration(metrics.RemoteRenderAge, now.Sub(job.CreatedAt), metrics.Dim{Name: "Model", Value: rec.Model})
		}
		next, follow, err := operation.Observe(rec, snap, now, h.delays.BudgetsFor(rec.Model))
		if err != nil {
			f.stop()
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
		more := follow == operation.FollowObserve && delay == 0 && poll > 0 && looks < maxPolls &&
			!now.Add(poll).After(end) && !l.Lost()
		if more && !changed(&rec, &next) {
			rec = next // same revision: the look is kept in memory only
			continue
		}
		if !more {
			f.stop()
		} else if n := len(f.polls); (n == 0 || f.polls[n-1].sent.Before(head.at)) && f.sent < maxPolls {
			// Every poll in flight left before this change reached us, so
			// may have arrived before it and come back at once with it.
			// The poll that waits for the next change leaves now, not
			// after the write.
			send(&next, now)
		}
		saved, err := h.w.Persist(ctx, rec, m.MessageId, worker.OnlyAt(rec.Revision, next))
		if errors.Is(err, worker.ErrMovedOn) || errors.Is(err, store.ErrConflict) {
			// Another observer (or the user) wrote first: this worker's view is
			// stale. It writes nothing and schedules nothing.
			f.stop()
			h.log.InfoContext(ctx, "observation lost the revision race", "operation_id", rec.OperationID, "expected_revision", rec.Revision)
			return worker.OutcomeLostRace, nil
		}
		if err != nil {
			f.stop()
			return worker.OutcomeError, fmt.Errorf("observe %s: save snapshot: %w", rec.OperationID, err)
		}
		h.log.InfoContext(ctx, "observation saved", "operation_id", saved.OperationID, "revision", saved.Revision,
			"phase", string(saved.Phase), "remote_state", string(snap.State), "follow", string(follow), "polls", f.sent, "chained", more)
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

// inform keeps the sweep from taking a live chain for lost. The sweep
// measures lateness from Schedule.Due, which a quiet chain leaves at the
// hand-over that started it; a chain that starts late (its message waited
// in the queue, or for a slot of the batch) and whose last write could
// land only once the record looks overdue (end, plus Overhead for that
// write, not before Due + OverdueAfter) first moves Due to now, with a
// conditional write. Any other chain writes nothing here. A chain that
// crashes after this write is re-armed OverdueAfter after it (plus the
// sweep's cadence); Chain + Overhead below OverdueAfter, which the
// function checks at start-up, makes one write enough.
func (h *Handler) inform(ctx context.Context, m events.SQSMessage, rec operation.Record, end time.Time) (operation.Record, error) {
	if h.cfg.OverdueAfter <= 0 || rec.Schedule == nil || end.Add(h.cfg.Overhead).Before(rec.Schedule.Due.Add(h.cfg.OverdueAfter)) {
		return rec, nil
	}
	now := h.clk.Now()
	next := rec.Clone()
	next.Schedule.Due = now
	next.Timestamps.Updated = now
	h.metrics.Count(metrics.ChainRefreshes, 1)
	return h.w.Persist(ctx, rec, m.MessageId, worker.OnlyAt(rec.Revision, next))
}

// lastLook is when the record last saw the job (zero if never).
func lastLook(rec *operation.Record) time.Time {
	if rec.Remote == nil {
		return time.Time{}
	}
	return rec.Remote.ObservedAt
}

// A poll is one GET of a chain, in flight or answered.
type poll struct {
	sent, at time.Time // sent, and answered (set before done closes)
	wait     time.Duration
	cancel   context.CancelFunc
	done     chan struct{}
	job      *genace.Job
	err      error
	// overlap fires Config.Overlap before the poll's window runs out, if
	// the chain may go on then; nil once taken.
	overlap <-chan time.Time
}

// flight is a chain's polls in flight, oldest first.
type flight struct {
	polls []*poll
	sent  int // GETs sent by the chain
	wg    sync.WaitGroup
}

func (f *flight) start(ctx context.Context, g Genace, clk clock.Clock, jobID string, wait, timeout time.Duration, overlap <-chan time.Time) {
	pctx, cancel := context.WithCancel(ctx)
	p := &poll{sent: clk.Now(), wait: wait, cancel: cancel, done: make(chan struct{}), overlap: overlap}
	f.polls = append(f.polls, p)
	f.sent++
	f.wg.Go(func() {
		defer close(p.done)
		p.job, p.err = g.Get(pctx, jobID, wait, timeout)
		p.at = clk.Now()
	})
}

// stop cancels the polls in flight and waits for them: no GET outlives
// the chain.
func (f *flight) stop() {
	for _, p := range f.polls {
		p.cancel()
	}
	f.polls = nil
	f.wg.Wait()
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
// request arrives, so a long poll only pays off right after a look that
// found the job as rec has it (since: the previous answer, or the sending
// of a poll Genace still holds): after a delay the job may already be
// finished (it would never change again and the poll would wait in vain),
// so that read is immediate.
func (h *Handler) window(ctx context.Context, l *worker.Lease, rec *operation.Record, since time.Time) time.Duration {
	wait := h.delays.LongPoll(rec.Model)
	if rec.Remote == nil || h.clk.Now().Sub(since) > wait || rec.Remote.State == operation.RemoteSucceeded {
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

// readFailed handles a failed GET, as worker.Judge decides (the one
// place that does). A 429 is waited out for its Retry-After and counts
// for nothing; any other failure is counted on the record
// (Counters.ReadFailures) with the next attempt scheduled after backoff,
// so the chain rides out an outage without burning the message's receive
// count, until the failure's budget runs out (MaxReadFailures for a 5xx,
// a timeout or a broken connection; worker.SuspectAttempts for a 200 that
// no longer decodes; at once for a 404): then the operation is parked with
// one review. Failing the message towards the DLQ instead would loop
// forever: the sweep re-arms the due record with a new revision before the
// message comes back, so the old one is obsolete and never dead-letters.
// A refused key fails the message (retryable) and leaves the record as it
// is.
func (h *Handler) readFailed(ctx context.Context, m events.SQSMessage, rec operation.Record, err error) (worker.Outcome, error) {
	if ctx.Err() != nil {
		// The invocation is ending (its sandbox stops): neither the job's
		// fault nor Genace's. Nothing is recorded; the message comes back.
		return worker.OutcomeReadError, fmt.Errorf("observe %s: invocation ended during the read: %w", rec.OperationID, err)
	}
	f := worker.Judge(err, "genace_read_failed")
	now := h.clk.Now()
	var (
		next  operation.Record
		terr  error
		delay time.Duration
	)
	switch failures := rec.Counters.ReadFailures + 1; {
	case f.Verdict == worker.VerdictKey:
		// Our key, not the job: nothing to record against the job. The
		// message comes back after its visibility timeout, and dead-letters
		// (a review asking to observe) if the key stays wrong.
		h.metrics.Count(metrics.GenaceUnauthorized, 1)
		return worker.OutcomeReadError, fmt.Errorf("observe %s: %w: check GENACE_API_KEY", rec.OperationID, err)
	case f.Verdict == worker.VerdictWait:
		next, terr = operation.ReadThrottled(rec, now)
		delay = h.delays.Throttled(f.Wait)
	case f.Parks(failures, rec.LastError, h.cfg.MaxReadFailures):
		h.log.WarnContext(ctx, "job read failed beyond its budget", "operation_id", rec.OperationID, "category", f.Category,
			"failures", failures, "error", err.Error())
		return h.park(ctx, m, rec, f.Category, failures)
	default:
		next, terr = operation.ReadFailed(rec, f.Category, now)
		delay = h.delays.ReadRetry(next.Counters.ReadFailures)
	}
	if terr != nil {
		return worker.OutcomeReadError, fmt.Errorf("observe %s: %w (after %w)", rec.OperationID, terr, err)
	}
	next.Schedule = &operation.NextAction{Action: string(message.ActionObserveGeneration), Due: now.Add(delay)}
	saved, uerr := h.w.Persist(ctx, rec, m.MessageId, worker.OnlyAt(rec.Revision, next))
	if errors.Is(uerr, worker.ErrMovedOn) || errors.Is(uerr, store.ErrConflict) {
		return worker.OutcomeLostRace, nil
	}
	if uerr != nil {
		return worker.OutcomeReadError, fmt.Errorf("observe %s: record read failure: %w (after %w)", rec.OperationID, uerr, err)
	}
	h.log.WarnContext(ctx, "job read failed; retrying later", "operation_id", rec.OperationID, "category", f.Category,
		"failures", saved.Counters.ReadFailures, "retry_in", delay, "error", err.Error())
	return worker.OutcomeReadRetry, h.w.Emit(ctx, &saved, rec.Counters.Observations+1)
}

// park stops automation on an observation no retry will complete:
// worker.Park, with one review naming the job, the failure's category and
// how many reads failed in a row, and the message acknowledged. The
// review carries no error text: the category is a fixed word, while the
// log line above has the detail.
func (h *Handler) park(ctx context.Context, m events.SQSMessage, rec operation.Record, category string, failures int) (worker.Outcome, error) {
	reason := fmt.Sprintf("observation cannot continue: job %s: %s, %d failed read(s) in a row", rec.RemoteJobID, category, failures)
	parked, outcome, err := h.w.Park(ctx, rec, m.MessageId, reason, category, rec.Counters.Observations+1)
	switch outcome {
	case worker.OutcomeLostRace:
		return outcome, nil
	case worker.OutcomeError:
		return outcome, fmt.Errorf("observe %s: park (%s): %w", rec.OperationID, reason, err)
	}
	h.log.WarnContext(ctx, "observation cannot continue; parked for review", "operation_id", parked.OperationID, "revision", parked.Revision, "reason", reason)
	return outcome, err
}
