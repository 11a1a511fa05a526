// Package observe is the observe function's handler: it reads the job an
// observation message names with long polls chained back to back for as
// long as the invocation allows (up to the function's deadline, less
// room for the linger and its write, or Config.Span; the lease renews as
// it goes), each sent Config.Overlap before the previous window runs
// out, so one is always waiting at Genace. It writes the record,
// conditioned on the revision the message expects, when the job's state
// or money changed, when the next look is not due at once, at least
// every Config.Chain while nothing changes (so the sweep, which measures
// lateness from the record's Schedule.Due, never takes a live chain for
// lost), and when the invocation's time runs out: then it hands over to
// a fresh message and lingers on its last poll, still held at Genace, so
// that a job that changes during the hand-over is seen at once (see
// chain). The write that ends a chain, or its linger, does exactly one
// thing: schedule the next observation, hand over to delivery, settle,
// or park the operation for review. Duplicate observations collapse on
// the revision check; the loser writes and schedules nothing.
package observe

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
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
	// Span bounds one message's chain where the function's deadline does
	// not end it sooner (default DefaultSpan; without a deadline, as in
	// tests and tools, it is the only bound). Deployed, the deadline less
	// Overhead and a window for the linger ends the chain, and Span only
	// keeps it from running to a timeout beyond Lambda's 15 minutes.
	Span time.Duration
	// Spread staggers the hand-overs of an invocation's chains over its
	// last Spread before the deadline (default DefaultSpread; negative:
	// none): each chain's end moves earlier by a share of it drawn from
	// its message's id. An invocation holds up to Hold renders, and
	// handing them all over at once would send as many first polls to
	// Genace in one second (the observation benchmark measured bursts of
	// 1,600 GETs a second, refused with 429, at 1,000 renders in flight).
	Spread time.Duration
	// HandOverLead is how long before the lingering poll's window runs
	// out the next message becomes visible (default DefaultHandOverLead):
	// it must cover the message's pickup, the invocation's start and the
	// first poll's way to Genace, or the job goes unwatched in between
	// (the linger has answered and the next poll has not arrived).
	HandOverLead time.Duration
	// LifeSpread shortens each fed invocation's life by a share of it
	// drawn from its first record's id (default DefaultLifeSpread;
	// negative: none). The mapping starts invocations together when load
	// arrives, and each replaces one that ended: without it they would
	// stop feeding and hand over together for good, leaving the queue
	// without a receiver for their last FeedMargin (the observation
	// benchmark measured renders waiting up to two minutes for one).
	LifeSpread time.Duration
	// Chain is the longest a quiet chain goes without writing (default
	// DefaultChain): the record's Schedule.Due stays at the last write
	// while nothing changes, so every Chain the next look is written all
	// the same, and the chain goes on. Chain plus Overhead must stay below
	// the sweep's overdue threshold (OverdueAfter; Check), or the sweep
	// re-arms live chains.
	Chain time.Duration
	// Overlap is how long before a long poll's window runs out the chain
	// sends the next one (default DefaultOverlap; negative: never).
	Overlap time.Duration
	// OverdueAfter is the sweep's overdue threshold (SWEEP_OVERDUE_SECONDS;
	// zero: no sweep to keep informed).
	OverdueAfter time.Duration
	// Hold is the most records one invocation holds at once, its batch and
	// what its feed receives (OBSERVE_HOLD; default DefaultHold; see
	// feed.go). FeedMargin is how long before the deadline the feed stops
	// receiving, so that what it takes still gets a useful chain (default
	// DefaultFeedMargin). FeedWait is the longest one receive waits
	// (default and at most SQS's 20 s): an invocation that holds nothing
	// ends only after one comes back empty, so a local run, whose queue
	// costs nothing to poll, waits less at its end.
	Hold       int
	FeedMargin time.Duration
	FeedWait   time.Duration
}

// DefaultChain is the default Config.Chain: eight 30 s long polls, a
// minute below the sweep's default overdue threshold of 5 minutes.
const DefaultChain = 4 * time.Minute

// DefaultSpread is the default Config.Spread: chains hand over within
// the invocation's last minute. The feed still takes records in its
// first half (until DefaultFeedMargin is left), which keeps the queue
// fed when few invocations run; such a record is handed over after a
// look or two.
const DefaultSpread = time.Minute

// DefaultHandOverLead is the default Config.HandOverLead: SQS delays
// are whole seconds, and a pickup takes under a second at the 99th
// percentile (the observation benchmark's assumption).
const DefaultHandOverLead = 5 * time.Second

// DefaultLifeSpread is the default Config.LifeSpread: fed invocations
// live from 10 to 15 minutes.
const DefaultLifeSpread = 5 * time.Minute

// DefaultSpan is the default Config.Span: a minute below Lambda's
// longest timeout, 15 minutes.
const DefaultSpan = 14 * time.Minute

// DefaultOverlap is the default Config.Overlap. Genace answers a long
// poll when the job changes after the poll arrives, so a job that changes
// between one poll's window running out and the next poll arriving (a
// round trip, the processing and sometimes a write) would be seen only a
// whole window later. Sending the next poll this long before the window
// runs out keeps one waiting at Genace throughout. The next poll arrives
// after the last one's window ends only if its way there is longer than
// the last one's by more than Overlap: the one-way trips differ, not add
// (the window is timed from the sending of the poll before), so Overlap
// must exceed the jitter of the one-way latency. 200 ms is twice that
// jitter on the observation benchmark's round trips (200 ms, 400 ms at
// the 99th percentile: one way 100 ms, 200 ms); on them one poll in
// about 5,000 arrives late, by milliseconds, and a finish lands in such a
// gap about once in seven million renders (at 100 ms: once in 80,000; at
// 500 ms practically never). Each window then covers
// 29.8 s of a job's time, not 30 s, so a chain sends about Overlap/wait
// more GETs than the floor (0.7 %); at 500 ms (1.7 %) a render of exactly
// ten windows took an eleventh.
const DefaultOverlap = 200 * time.Millisecond

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
	c.Span = cmp.Or(c.Span, DefaultSpan)
	c.Spread = cmp.Or(c.Spread, DefaultSpread)
	c.LifeSpread = cmp.Or(c.LifeSpread, DefaultLifeSpread)
	c.HandOverLead = cmp.Or(c.HandOverLead, DefaultHandOverLead)
	c.Overlap = cmp.Or(c.Overlap, DefaultOverlap)
	c.Hold = cmp.Or(c.Hold, DefaultHold)
	c.FeedMargin = cmp.Or(c.FeedMargin, DefaultFeedMargin)
	c.FeedWait = min(cmp.Or(c.FeedWait, feedWait), feedWait)
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
	// Receiver, if set, is the observe queue itself: each invocation
	// receives more records from it while it runs (see feed.go).
	Receiver Receiver
}

// Handler handles observation batches.
type Handler struct {
	genace  Genace
	delays  Delays
	w       *worker.Worker
	clk     clock.Clock
	log     *slog.Logger
	metrics *metrics.Emitter
	feed    Receiver
	cfg     Config
}

// New wires a handler.
func New(d Deps, cfg Config) *Handler {
	cfg = cfg.Defaults()
	return &Handler{
		genace: d.Genace, delays: d.Delays, clk: d.Clock, log: d.Log, metrics: d.Metrics, feed: d.Receiver, cfg: cfg,
		w: worker.New(worker.Deps{Store: d.Store, Extender: d.Extender, Sender: d.Sender, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics},
			worker.Config{Action: message.ActionObserveGeneration, Name: "observe", Queue: "observe", QueueURL: cfg.QueueURL,
				Visibility: cfg.Visibility, Concurrency: cfg.Concurrency}),
	}
}

// Handle is the Lambda entry point for an SQS batch. With a Receiver and
// a deadline to stop by (Lambda always gives one), the invocation also
// takes more records from its queue while it runs (fed), and returns
// once every one of them is done too.
func (h *Handler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	// An empty batch holds nothing, and no mapping sends one: it does not
	// feed either.
	if dl, ok := ctx.Deadline(); ok && h.feed != nil && len(ev.Records) > 0 {
		if dl.Sub(h.clk.Now()) > h.cfg.LifeSpread+h.cfg.FeedMargin {
			// Ends the invocation earlier by a share of LifeSpread, so
			// that invocations started together do not stop feeding and
			// hand over together ever after.
			ctx = earlier{ctx, dl.Add(-stagger(ev.Records[0].MessageId, h.cfg.LifeSpread))}
		}
		return h.fed(ctx, ev), nil
	}
	return h.w.Handle(ctx, ev, h.decide), nil
}

func observable(rec *operation.Record) bool {
	if rec.Parked != nil {
		return false
	}
	return rec.Phase == operation.PhaseAccepted || (rec.Phase == operation.PhaseFailed && rec.Settlement == operation.SettlementUnresolved)
}

func (h *Handler) decide(ctx context.Context, t worker.Turn) worker.Decision {
	rec, env := t.Rec, t.Env
	if rec.RemoteJobID != env.ExpectedRemoteJobID {
		return worker.Obsolete{Why: worker.ReasonJobIDMismatch}
	}
	if rec.Revision != env.ExpectedRevision {
		if rec.LastAppliedMessageID == t.Msg.MessageId {
			// Our own write landed before a crash: the follow-up may not
			// have left. Send it (duplicates collapse downstream).
			return worker.Emit{Outcome: worker.OutcomeReemitted, Attempt: env.Attempt + 1}
		}
		return worker.Obsolete{Why: worker.ReasonStaleRevision}
	}
	if !observable(&rec) {
		return worker.Obsolete{Why: worker.ReasonPhase(rec.Phase)}
	}
	return h.chain(ctx, t)
}

// chain observes the job with long polls back to back, as long as the
// next look is due at once, a whole poll still fits the chain (its Span,
// and the function's deadline less Overhead and the room its linger
// needs) and the lease holds. Config.Overlap before a poll's window runs
// out, while the chain is set to go on, the next poll is sent, so that
// one is always waiting at Genace: a job that changes between two windows
// is seen at once, not a window late. Answers are taken in the order the
// polls were sent; a poll sent before a change and answered with it
// changes nothing more. An observation that changes nothing the record
// keeps for a reason (the job's state, its credits, the phase,
// settlement, parking) stays in memory, unless Config.Chain has passed
// since the chain's last write by the next look: then it is written all
// the same (a renewal), with the observations' counters, the time of the
// look (so a later message long-polls again) and a Schedule.Due of now
// for the sweep, and the chain goes on with the same message. Any other
// look is written at once, after the next poll has left, and the chain
// goes on from what it wrote. The last look is always written, with the
// follow-up it schedules. A crash mid-chain loses only unwritten looks:
// the message comes back (or the sweep re-arms it) and reads again; a
// write of its own that landed is found and its follow-up re-sent.
//
// A chain whose time runs out while the job is still young hands over to
// a fresh message, and lingers: its next poll, sent Overlap before the
// last window ran out as if it went on, is still held at Genace while
// the hand-over is written and its follow-up sent, and the handling waits
// for it (see linger). Without it a job that finished in the gap before
// the next message's first poll arrived (the write, the SQS hop, the
// Lambda start, the GET's trip) would be seen a whole window late. Polls
// still in flight when the handling ends are cancelled (a GET changes
// nothing) and waited for.
//
// The chain first keeps the sweep informed (worker.KeepDue): its first
// write lands at most Chain after its start (or at its end) plus
// Overhead, and each next one at most Chain plus Overhead after the one
// before. Chain + Overhead below OverdueAfter, which the function checks
// at start-up, makes that enough.
func (h *Handler) chain(ctx context.Context, t worker.Turn) worker.Decision {
	now := h.clk.Now()
	c := &chain{h: h, t: t, f: &flight{}, poll: h.delays.LongPoll(t.Rec.Model), end: now.Add(h.cfg.Span)}
	if dl, ok := ctx.Deadline(); ok {
		// The last look leaves room before the deadline for the linger's
		// window and its write.
		c.last = dl.Add(-h.cfg.Overhead)
		if end := c.last.Add(-c.poll - stagger(t.Msg.MessageId, h.cfg.Spread)); end.Before(c.end) {
			c.end = end
		}
	}
	// A clock that does not move with the polls must still end the chain,
	// and so must polls shorter than Genace's window: the chain holds as
	// many looks as full windows fit in Span, whatever each wait.
	c.maxPolls = 1
	if c.poll > 0 {
		c.maxPolls += int(h.cfg.Span / max(c.poll, genace.MaxWait))
	}
	// The first write: the first renewal, or the end, but never before
	// the first look, which is always taken (within the deadline).
	first := now.Add(h.cfg.Chain)
	if c.end.Before(first) {
		first = c.end
	}
	if look := now.Add(c.poll); first.Before(look) {
		first = look
		if !c.last.IsZero() && c.last.Before(first) {
			first = c.last
		}
	}
	return worker.KeepDue{Lands: first.Add(h.cfg.Overhead), OverdueAfter: h.cfg.OverdueAfter,
		Then: func(ctx context.Context, rec operation.Record) worker.Decision {
			c.wrote = h.clk.Now()
			return worker.Finally{Do: c.f.stop, Then: c.look(ctx, rec)}
		}}
}

// earlier is a context whose deadline, as handlers plan by it, comes
// before its parent's: the invocation ends sooner than Lambda would end
// it.
type earlier struct {
	context.Context
	deadline time.Time
}

func (e earlier) Deadline() (time.Time, bool) { return e.deadline, true }

// stagger is a share of spread drawn from a message id: the same for a
// redelivery, different across the messages of one invocation.
func stagger(messageID string, spread time.Duration) time.Duration {
	if spread <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(messageID))
	return time.Duration(h.Sum64() % uint64(spread))
}

// chain is one message's chain of looks.
type chain struct {
	h *Handler
	t worker.Turn
	f *flight
	// end is the latest a look may be taken and the chain go on; last the
	// latest a poll may be held (the deadline less Overhead; zero: none).
	end, last time.Time
	// wrote is when the chain last wrote (or started): the next write is
	// due Chain after it.
	wrote    time.Time
	poll     time.Duration
	maxPolls int
	looks    int
}

// young is whether the job, with r its last look, is still observed
// back to back at at: more's conditions in look that do not depend on
// the chain's end.
func (c *chain) young(r *operation.Record, at time.Time) bool {
	return r.Phase == operation.PhaseAccepted && r.Parked == nil && c.poll > 0 &&
		c.h.delays.Next(r, at) == 0 && !c.t.Lease.Lost()
}

// wants is whether the chain, with r its last look, sends another poll
// at sendAt, when the newest poll's window runs out at at: to go on (the
// conditions of more in look, foreseen), or, when it hands over then, as
// its linger, held its whole window before the deadline.
func (c *chain) wants(r *operation.Record, at, sendAt time.Time) bool {
	goesOn := c.f.sent < c.maxPolls && !at.Add(c.poll).After(c.end)
	return c.young(r, at) && (goesOn || c.fits(sendAt))
}

// fits is whether a poll sent at may be held its whole window before the
// deadline (less Overhead, the write of its answer).
func (c *chain) fits(at time.Time) bool { return c.last.IsZero() || !at.Add(c.poll).After(c.last) }

// send starts a poll, with r the last look; since is the last time the
// job is known to have held still (see window).
func (c *chain) send(ctx context.Context, r *operation.Record, since time.Time) {
	h := c.h
	wait := h.window(ctx, c.t.Lease, r, since)
	now := h.clk.Now()
	var overlap <-chan time.Time
	if h.cfg.Overlap > 0 && wait > h.cfg.Overlap && c.wants(r, now.Add(wait), now.Add(wait-h.cfg.Overlap)) {
		overlap = h.clk.After(wait - h.cfg.Overlap)
	}
	c.f.start(ctx, h.genace, h.clk, r.RemoteJobID, wait, wait+h.cfg.Overhead, overlap)
}

// look takes the chain's answers from rec on, until one is to be
// written: it returns that write, which goes on with the next look when
// the chain does, and with the linger when the chain hands over.
func (c *chain) look(ctx context.Context, rec operation.Record) worker.Decision {
	h, f := c.h, c.f
	for {
		c.looks++
		if len(f.polls) == 0 {
			c.send(ctx, &rec, lastLook(&rec))
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
				if fired.Before(windowEnd) && c.wants(&rec, windowEnd, fired) {
					// The newest poll still holds: the job has not changed
					// since it arrived.
					c.send(ctx, &rec, newest.sent)
				}
			}
		}
		f.polls = f.polls[1:]
		head.cancel()
		if head.err != nil {
			f.stop()
			return h.readFailed(ctx, c.t, rec, head.err)
		}
		now := h.clk.Now()
		next, follow, delay, ok := h.observe(rec, head.job, now)
		if !ok {
			f.stop() // before the acknowledgement, not after it
			return worker.Obsolete{Why: worker.ReasonNotApplicable}
		}
		more := follow == operation.FollowObserve && delay == 0 && c.poll > 0 && c.looks < c.maxPolls &&
			!now.Add(c.poll).After(c.end) && !c.t.Lease.Lost()
		change := changed(&rec, &next)
		if more && !change && !now.Add(c.poll).After(c.wrote.Add(h.cfg.Chain)) {
			rec = next // same revision: the look is kept in memory only
			continue
		}
		// A hand-over of a young job keeps the poll it sent to go on: it
		// is the linger.
		lingers := !more && follow == operation.FollowObserve && delay == 0 && !c.t.Lease.Lost()
		n := len(f.polls)
		if stale := n == 0 || f.polls[n-1].sent.Before(head.at); more && n == 0 ||
			change && stale && (more && f.sent < c.maxPolls || lingers && c.fits(now)) {
			// Every poll in flight left before this change reached us, so
			// may have arrived before it and come back at once with it.
			// The poll that waits for the next change leaves now, not
			// after the write; at a hand-over it is the linger, so that a
			// change just before the hand-over leaves no gap after it.
			// (Those in flight for a renewal, which changed nothing, still
			// hold.)
			c.send(ctx, &next, now)
		}
		linger := lingers && len(f.polls) > 0
		if !more && !linger {
			f.stop()
		}
		if linger {
			// The next message's chain starts HandOverLead before the
			// lingering poll's window runs out, not at once: its first
			// poll then takes over from the linger as a chain's next poll
			// takes over from the one before (the overlap), rather than
			// doubling a whole window's GET.
			last := f.polls[len(f.polls)-1]
			if due := last.sent.Add(last.wait - h.cfg.HandOverLead); due.After(now) {
				next.Schedule.Due = due
			}
		}
		// Written only while the record stands where this look read it:
		// another observer (or the user) that wrote first wins, and this
		// chain writes and schedules nothing more.
		return worker.Write{Next: next, What: "save snapshot", Then: func(ctx context.Context, saved operation.Record) worker.Decision {
			c.wrote = now
			h.saved(ctx, saved, head.job, follow, "polls", f.sent, "chained", more, "lingers", linger)
			if more {
				return c.look(ctx, saved)
			}
			emit := worker.Emit{Outcome: worker.OutcomeOfObservation(follow), Attempt: c.t.Env.Attempt + 1}
			if linger {
				emit.Then = c.linger
			}
			return emit
		}}
	}
}

// linger takes, after the hand-over (rec, as written and its follow-up
// sent), the answers of the polls the chain still has in flight, each
// until its window runs out. The first that changes what the record
// keeps is written, conditioned on the hand-over's revision, with the
// follow-up it schedules (a delivery, say): the next message's chain,
// which may see the same change, collapses on the revision check
// whichever writes first, and a linger that loses writes and sends
// nothing more. A linger that sees no change, or whose poll fails, ends
// quietly: the next message reads again.
func (c *chain) linger(ctx context.Context, rec operation.Record) worker.Decision {
	h, f := c.h, c.f
	for len(f.polls) > 0 {
		head := f.polls[0]
		<-head.done
		f.polls = f.polls[1:]
		head.cancel()
		if head.err != nil {
			h.log.InfoContext(ctx, "lingering poll failed; the next observation reads again", "operation_id", rec.OperationID, "error", head.err.Error())
			break
		}
		now := h.clk.Now()
		next, follow, _, ok := h.observe(rec, head.job, now)
		if !ok || !changed(&rec, &next) {
			continue
		}
		f.stop()
		return worker.Write{Next: next, What: "save the lingering look", Then: func(ctx context.Context, saved operation.Record) worker.Decision {
			h.saved(ctx, saved, head.job, follow, "lingered", true)
			return worker.Emit{Outcome: worker.OutcomeOfObservation(follow), Attempt: c.t.Env.Attempt + 1}
		}}
	}
	return worker.Done{Outcome: worker.OutcomeOfObservation(operation.FollowObserve)}
}

// observe applies the job, read at now, to rec: the record to write,
// with the next action its follow-up calls for and that action's delay;
// false when the observation no longer applies to the record.
func (h *Handler) observe(rec operation.Record, job *genace.Job, now time.Time) (operation.Record, operation.Follow, time.Duration, bool) {
	if !job.CreatedAt.IsZero() {
		h.metrics.Duration(metrics.RemoteRenderAge, now.Sub(job.CreatedAt), metrics.Dim{Name: "Model", Value: rec.Model})
	}
	next, follow, err := operation.Observe(rec, job.Snapshot(now), now, h.delays.BudgetsFor(rec.Model))
	if err != nil {
		return rec, follow, 0, false
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
	return next, follow, delay, true
}

// saved logs a written observation (attrs: how the chain went on) and,
// when it ends observing, counts the operation's observations.
func (h *Handler) saved(ctx context.Context, saved operation.Record, job *genace.Job, follow operation.Follow, attrs ...any) {
	h.log.InfoContext(ctx, "observation saved", append([]any{"operation_id", saved.OperationID, "revision", saved.Revision,
		"phase", string(saved.Phase), "remote_state", string(job.State), "follow", string(follow)}, attrs...)...)
	if follow != operation.FollowObserve {
		h.metrics.Count(metrics.ObservationsPerOp, float64(saved.Counters.Observations), metrics.Dim{Name: "Phase", Value: string(saved.Phase)})
	}
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

// readFailed hands a failed GET to the worker's failure policy
// (worker.Retry), with observe's budgets: a 429 is waited out for its
// Retry-After (Delays.Throttled); any other failure is retried after
// Delays.ReadRetry until its budget runs out (MaxReadFailures for a 5xx,
// a timeout or a broken connection; worker.SuspectAttempts for a 200
// that no longer decodes; at once for a 404), and then the operation is
// parked with one review naming the job, the failure's category and how
// many reads failed in a row. The review carries no error text: the
// category is a fixed word, while the log line has the detail.
func (h *Handler) readFailed(ctx context.Context, t worker.Turn, rec operation.Record, err error) worker.Decision {
	if ctx.Err() != nil {
		// The invocation is ending (its sandbox stops): neither the job's
		// fault nor Genace's. Nothing is recorded; the message comes back.
		return worker.Done{Outcome: worker.OutcomeReadError, Err: fmt.Errorf("observe %s: invocation ended during the read: %w", rec.OperationID, err)}
	}
	f := worker.Judge(err, "genace_read_failed")
	return worker.Retry{Err: err, Failure: f, Rec: &rec, Action: message.ActionObserveGeneration, Budget: h.cfg.MaxReadFailures,
		Throttled: h.delays.Throttled, Backoff: h.delays.ReadRetry,
		Park: func(failures int) string {
			return fmt.Sprintf("observation cannot continue: job %s: %s, %d failed read(s) in a row", rec.RemoteJobID, f.Category, failures)
		},
		Attempt: rec.Counters.Observations + 1, Failed: worker.OutcomeReadError, Retried: worker.OutcomeReadRetry}
}
