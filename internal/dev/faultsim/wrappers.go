package faultsim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/dev/eventsource"
	"github.com/genjobs/genjobs/internal/dev/localpack"
	"github.com/genjobs/genjobs/internal/dev/localqueue"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/stack"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/worker"
)

// The wrappers in this file sit at the boundaries the handlers cross
// (store, Genace, queue sends, lease renewals, artifact store), behind the
// handlers' own interfaces, and inject the faults there.

type ctxKey int

const (
	invKey ctxKey = iota
	depthKey
	writerKey
)

// invocation is one handler invocation (or one sweep run) in progress:
// what its faults need to know, and whether it has crashed.
type invocation struct {
	fn         string
	queueURL   string
	m          *eventsource.Mapping
	records    []events.SQSMessage
	ops        []string           // each record's operation id ("" when undecodable)
	envs       []message.Envelope // each record's envelope (zero when undecodable)
	firstWrite map[string]bool    // messages whose first write was checked (CheckFirstWrite)
	// wrote is the last revision the invocation wrote, per operation
	// (guarded by the recorder's mutex); nil for the sweep's.
	wrote    map[string]int64
	depth    int       // 0 for the driver's own polls, 1 for a second worker
	deadline time.Time // when Lambda kills the invocation (zero: never)
	// crashed is set when a fault killed the invocation: every later call
	// through a wrapper panics again, and the invocation fails as a whole.
	crashed bool
}

func invOf(ctx context.Context) *invocation {
	inv, _ := ctx.Value(invKey).(*invocation)
	return inv
}

func depthOf(ctx context.Context) int {
	d, _ := ctx.Value(depthKey).(int)
	return d
}

// withWriter names who writes outside an invocation (the application, the
// user, a concurrent writer), for the write history.
func withWriter(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, writerKey, who)
}

func writerOf(ctx context.Context) string {
	if who, ok := ctx.Value(writerKey).(string); ok {
		return who
	}
	if inv := invOf(ctx); inv != nil {
		return inv.fn + depthMark(inv.depth)
	}
	return "?"
}

// crashPanic unwinds a crashed worker; the batch runner recovers it per
// record, and the crashed flag then fails the whole invocation.
type crashPanic struct{ fault Fault }

// errCrashed fails a crashed invocation: its whole batch is redelivered.
var errCrashed = errors.New("faultsim: injected crash")

// alive panics if the invocation behind ctx has crashed.
func (w *world) alive(ctx context.Context) {
	if inv := invOf(ctx); inv != nil && inv.crashed {
		panic(crashPanic{})
	}
}

// maybeCrash kills the invocation behind ctx if fault f strikes. Outside
// an invocation (the application's own writes) nothing crashes. A worker
// that dies holding op's submission claim (claim), before its POST's
// outcome was written, leaves nothing that tells whether the POST left:
// the submission's outcome is genuinely unknown.
func (w *world) maybeCrash(ctx context.Context, f Fault, op string, claim bool) {
	inv := invOf(ctx)
	if inv == nil || !w.inj.hit(f) {
		return
	}
	if claim {
		w.unknownSubmission(op)
	}
	w.crash(inv, f, op, writerOf(ctx)+" worker dies")
}

// crash kills inv's worker by fault f, tracing what happened to op.
func (w *world) crash(inv *invocation, f Fault, op, what string) {
	inv.crashed = true
	w.tracef(op, "FAULT %s: %s", f, what)
	panic(crashPanic{fault: f})
}

// wrapHandler puts the invocation on the context, injects DupReceive and
// turns a crash into a failed invocation.
func (w *world) wrapHandler(fn string, m *eventsource.Mapping, h eventsource.Handler) eventsource.Handler {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		inv := &invocation{fn: fn, queueURL: m.Queue, m: m, records: ev.Records, depth: depthOf(ctx),
			ops: make([]string, len(ev.Records)), envs: make([]message.Envelope, len(ev.Records)), firstWrite: map[string]bool{}, wrote: map[string]int64{}}
		for i, r := range ev.Records {
			w.nestedSeen(r.MessageId)
			w.granted(m.Queue, r.MessageId, r.ReceiptHandle)
			env, err := message.Decode([]byte(r.Body))
			if err != nil {
				continue
			}
			inv.ops[i], inv.envs[i] = env.OperationID, env
			if w.traced(env.OperationID) {
				w.tracef(env.OperationID, "%s%s receives %s r%d job=%q attempt %d (message %s, receive %s)", fn, depthMark(inv.depth), env.Action,
					env.ExpectedRevision, env.ExpectedRemoteJobID, env.Attempt, shortID(r.MessageId), r.Attributes["ApproximateReceiveCount"])
			}
		}
		ctx = context.WithValue(ctx, invKey, inv)
		w.receiveGap(inv)
		ctx = w.timeUsed(ctx, inv)
		inv.deadline, _ = ctx.Deadline()
		if w.cfg.WrapContext != nil {
			ctx = w.cfg.WrapContext(ctx)
		}
		if fn == "triage" {
			// A dead-lettered message ended its chain; the sweep re-arms
			// the operation if it is still active.
			for _, op := range inv.ops {
				w.chainStop(op)
			}
		}
		if inv.depth == 0 {
			for i := range ev.Records {
				if w.inj.roll(DupReceive) {
					if w.secondWorker(inv, i) {
						w.inj.note(DupReceive)
						w.tracef(inv.ops[i], "FAULT %s: a second %s worker took message %s first", DupReceive, fn, shortID(ev.Records[i].MessageId))
					}
					break
				}
			}
		}
		resp, err := h(ctx, ev)
		if !inv.crashed && err == nil && inv.depth == 0 {
			w.staleDelete(inv, resp)
		}
		if inv.crashed {
			for i := range ev.Records {
				w.died(inv, i)
			}
			return events.SQSEventResponse{}, errCrashed
		}
		failed := failedIDs(resp)
		if inv.depth == 0 {
			w.scale.invocation(fn, len(ev.Records), err == nil && len(failed) < len(ev.Records), w.since())
		}
		for i, r := range ev.Records {
			if failed[r.MessageId] || err != nil {
				w.mu.Lock()
				l := w.leases[r.MessageId]
				w.mu.Unlock()
				if w.stays(inv, i, l, "reports message %s failed: it stays") {
					w.mu.Lock()
					w.failStops[inv.ops[i]]++
					w.mu.Unlock()
				}
			} else {
				w.acknowledged(r.MessageId, r.ReceiptHandle)
				w.tracef(inv.ops[i], "%s%s acknowledges message %s", fn, depthMark(inv.depth), shortID(r.MessageId))
			}
		}
		return resp, err
	}
}

// died notes the death of inv's worker for record i: its message stays
// for redelivery, unless another worker took and acknowledged it, which
// may end the chain (DeadWorkerEndsChain).
func (w *world) died(inv *invocation, i int) {
	op, msg := inv.ops[i], inv.records[i].MessageId
	w.mu.Lock()
	l, queued := w.leases[msg]
	w.mu.Unlock()
	if queued {
		w.stays(inv, i, l, "died: message %s stays")
		return
	}
	w.rec.mu.Lock()
	last, known := w.rec.last[op]
	rev, wrote := inv.wrote[op]
	w.rec.mu.Unlock()
	ends := known && DeadWorkerEndsChain(wrote && rev == last.Revision, true, last.Terminal())
	w.tracef(op, "%s%s died: message %s was acknowledged by another worker, nothing redelivers it (chain ends: %t)", inv.fn, depthMark(inv.depth), shortID(msg), ends)
	if ends {
		w.chainStop(op)
	}
}

// stays traces that record i of inv stays queued under lease l (how:
// what its worker did, with a %s for the message), and ends its chain,
// reporting so, when the sweep may re-arm the operation first.
func (w *world) stays(inv *invocation, i int, l leaseTruth, how string) bool {
	in := l.until.Sub(w.clk.Now())
	sweepFirst := SweepBeforeRedelivery(in, topology.Stack.Sweep.OverdueAfter)
	w.tracef(inv.ops[i], "%s%s "+how+" for redelivery in %s (the sweep may re-arm first: %t)", inv.fn, depthMark(inv.depth), shortID(inv.records[i].MessageId), in, sweepFirst)
	if sweepFirst {
		w.chainStop(inv.ops[i])
	}
	return sweepFirst
}

// failedIDs are the message ids a batch response reports failed.
func failedIDs(resp events.SQSEventResponse) map[string]bool {
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	return failed
}

// staleDelete injects StaleDelete into a finished invocation: one record
// it acknowledged outlived its visibility before the delete, and another
// worker handles it now, to the end. The stale delete keeps the message,
// as SQS's does (the mapping ignores the embedded queue's
// ErrStaleReceipt, as Lambda's would SQS's success).
func (w *world) staleDelete(inv *invocation, resp events.SQSEventResponse) {
	failed := failedIDs(resp)
	for i, r := range inv.records {
		if failed[r.MessageId] || !w.inj.roll(StaleDelete) {
			continue
		}
		if w.secondWorker(inv, i) {
			w.inj.note(StaleDelete)
			w.tracef(inv.ops[i], "FAULT %s: message %s outlived its visibility before %s's delete; another worker handled it again, the stale delete leaves it", StaleDelete, shortID(r.MessageId), inv.fn)
		}
		return
	}
}

func depthMark(depth int) string {
	if depth > 0 {
		return "#2"
	}
	return ""
}

func shortID(id string) string {
	if i := strings.LastIndexByte(id, '-'); i >= 0 {
		return strings.TrimLeft(id[i+1:], "0")
	}
	return id
}

// nestedSeen notes that a handler received message id (see handleNow).
func (w *world) nestedSeen(id string) {
	if w.waitingFor == id {
		w.waitingFor = ""
	}
}

// secondWorker makes record i of inv visible again (its visibility ran
// out) and has another worker take it and handle it to the end before
// the first resumes. It reports whether the second worker got it.
func (w *world) secondWorker(inv *invocation, i int) bool {
	if inv.depth > 0 || inv.m == nil {
		return false
	}
	r := inv.records[i]
	err := w.changeVisibility(inv.queueURL, r.MessageId, r.ReceiptHandle, 0)
	if err != nil && !errors.Is(err, localqueue.ErrNotInFlight) {
		return false // received again or deleted already: nothing to take
	}
	return w.handleNow(inv, r.MessageId)
}

// handleNow polls inv's mapping until another worker has taken the
// visible message msgID and handled it, and reports whether one did.
func (w *world) handleNow(inv *invocation, msgID string) bool {
	w.waitingFor = msgID
	ctx := context.WithValue(context.Background(), depthKey, inv.depth+1)
	// Older visible messages come first: poll until the freed one is taken.
	for range 1000 {
		n, err := inv.m.PollOnce(ctx)
		if w.waitingFor == "" || n == 0 || (err != nil && !errors.Is(err, eventsource.ErrInvocation)) {
			break
		}
	}
	taken := w.waitingFor == ""
	w.waitingFor = ""
	return taken
}

// handling finds the record of inv whose message the worker acts on for
// op: the one the operation's last write names (a batch can hold two
// messages of one operation), else the first of op.
func (w *world) handling(inv *invocation, op string) int {
	if inv == nil {
		return -1
	}
	w.rec.mu.Lock()
	last := w.rec.last[op].LastApplied
	w.rec.mu.Unlock()
	for i, r := range inv.records {
		if r.MessageId == last && inv.ops[i] == op {
			return i
		}
	}
	return inv.opRecord(op)
}

// opRecord finds the record of inv that concerns operation op.
func (inv *invocation) opRecord(op string) int {
	if inv == nil || op == "" {
		return -1
	}
	return slices.Index(inv.ops, op)
}

// midCall injects VisibilityExpiry while a worker is inside a Genace call
// about operation op.
func (w *world) midCall(ctx context.Context, op, call string) {
	inv := invOf(ctx)
	i := w.handling(inv, op)
	if i < 0 || inv.depth > 0 || !w.inj.roll(VisibilityExpiry) {
		return
	}
	if w.secondWorker(inv, i) {
		w.inj.note(VisibilityExpiry)
		w.tracef(op, "FAULT %s: %s paused inside %s; a second worker took message %s meanwhile", VisibilityExpiry, inv.fn, call, shortID(inv.records[i].MessageId))
	}
}

// faultStore is the store the handlers and the sweep see, above the
// recorder: it injects StoreConflict, CrashAfterWrite and CrashAfterClaim.
type faultStore struct {
	*recorder
	w *world
}

// Get reads through, unless the worker is dead.
func (s *faultStore) Get(ctx context.Context, id string) (operation.Record, error) {
	s.w.alive(ctx)
	return s.recorder.Get(ctx, id)
}

// Due reads through, unless the worker is dead.
func (s *faultStore) Due(ctx context.Context, t time.Time, limit int) ([]operation.Record, error) {
	s.w.alive(ctx)
	return s.recorder.Due(ctx, t, limit)
}

// Update injects StoreConflict before the write, IntakeChangeRace
// around a claim's, and CrashAfterWrite after it.
func (s *faultStore) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	s.w.alive(ctx)
	if invOf(ctx) != nil && s.w.inj.roll(StoreConflict) {
		// The application raises the budget, which no handler owns: a
		// loser that writes its older view puts the old budget back.
		cur, err := s.recorder.Get(ctx, rec.OperationID)
		if err == nil && !cur.Terminal() {
			cur.BudgetCredits++
			if _, err := s.recorder.Update(withWriter(ctx, "concurrent-writer"), cur, cur.Revision); err == nil {
				s.w.inj.note(StoreConflict)
				s.w.chainStop(rec.OperationID)
			}
		}
	}
	saved, err := s.w.claimRace(ctx, rec, func() (operation.Record, error) { return s.recorder.Update(ctx, rec, expected) })
	if err == nil {
		if saved.Terminal() && invOf(ctx) != nil && s.w.inj.roll(StoreConflict) {
			s.lateWrite(ctx, saved)
		}
		s.w.crashAfterClaim(ctx, saved)
		s.w.maybeCrash(ctx, CrashAfterWrite, rec.OperationID, saved.Phase == operation.PhaseSubmitting)
	}
	return saved, err
}

// lateWrite is StoreConflict's writer meeting a record that has just
// ended: the store's terminal guard must refuse its write.
func (s *faultStore) lateWrite(ctx context.Context, saved operation.Record) {
	late := saved.Clone()
	late.BudgetCredits++
	_, err := s.recorder.Update(withWriter(ctx, "concurrent-writer"), late, saved.Revision)
	s.w.inj.note(StoreConflict)
	s.w.tracef(saved.OperationID, "FAULT %s: the application raises the budget of r%d, which just ended %s: %v", StoreConflict, saved.Revision, saved.Phase, err)
}

// crashAfterClaim injects CrashAfterClaim after a submit worker's claim
// write: the worker dies before its POST, its message hidden as long as
// the deployed queue would, so the sweep finds the stale claim first.
func (w *world) crashAfterClaim(ctx context.Context, saved operation.Record) {
	inv := invOf(ctx)
	if inv == nil || inv.fn != "submit" || saved.Phase != operation.PhaseSubmitting || saved.Claim == nil {
		return
	}
	i := w.handling(inv, saved.OperationID)
	if i < 0 || !w.inj.roll(CrashAfterClaim) {
		return
	}
	if err := w.changeVisibility(inv.queueURL, inv.records[i].MessageId, inv.records[i].ReceiptHandle, w.vis[inv.queueURL]); err != nil {
		return // the message is no longer this worker's to hide
	}
	w.inj.note(CrashAfterClaim)
	// Nothing can tell this claim from one whose POST is in flight.
	w.unknownSubmission(saved.OperationID)
	w.crash(inv, CrashAfterClaim, saved.OperationID, fmt.Sprintf("%s worker dies after its claim, before the POST; message %s stays hidden %s", writerOf(ctx), shortID(inv.records[i].MessageId), w.vis[inv.queueURL]))
}

// SetEvent injects EventMarkLost into a mark of a sent event: the mark
// is not written and the caller hears an error.
func (s *faultStore) SetEvent(ctx context.Context, rec operation.Record) (operation.Record, error) {
	s.w.alive(ctx)
	if rec.Event != nil && rec.Event.Sent && s.w.inj.hit(EventMarkLost) {
		s.w.tracef(rec.OperationID, "FAULT %s: marking event r%d sent fails", EventMarkLost, rec.Event.Revision)
		return rec, errors.New("faultsim: marking the event sent failed")
	}
	return s.recorder.SetEvent(ctx, rec)
}

// PutReview injects CrashAfterWrite after a successful review write.
func (s *faultStore) PutReview(ctx context.Context, r review.Record) (bool, error) {
	s.w.alive(ctx)
	wrote, err := s.recorder.PutReview(ctx, r)
	if err == nil {
		if wrote {
			s.w.tracef(r.OperationID, "review %s by %s: %s (%s)", r.ID, writerOf(ctx), r.Recommended, r.ErrorCategory)
		}
		s.w.maybeCrash(ctx, CrashAfterWrite, r.OperationID, false)
	}
	return wrote, err
}

// recorder sits right above the real store (or a planted bug) and checks
// every successful write against the ones before it: the store is only
// written through it, so its memory is the store's truth.
type recorder struct {
	store.Store
	w      *world
	mu     sync.Mutex
	last   map[string]State
	prev   map[string]State // the state before last, while the operation is active
	hist   map[string]*revisions
	writes int64
	// claimOf is the claiming message of each operation's open uncertain
	// episode, closedFirst that of one an operator closed before the
	// claim's evidence came, answered the last message whose POST's
	// definite answer reached its live handler (EvidenceAfterOperator).
	claimOf, closedFirst, answered map[string]string
	settles                        map[string][]time.Time // per operation, for LivenessOf
	resumed                        map[string]time.Time   // per operation, an operator's last hand-back to automation
	audited                        map[string][]int64     // per operation, the revisions of its audited writes
	claimed                        map[string]bool        // operations a submission claim was written for
	creates                        map[string]int         // records created, per operation id
}

// revisions remembers which message wrote each of an operation's recent
// revisions, for CheckFirstWrite.
type revisions struct {
	rev [8]int64
	msg [8]string
	n   int
}

func (h *revisions) add(rev int64, msg string) {
	i := h.n % len(h.rev)
	h.rev[i], h.msg[i] = rev, msg
	h.n++
}

func (h *revisions) by(rev int64) string {
	for i := range h.rev {
		if h.rev[i] == rev && (h.n > i) {
			return h.msg[i]
		}
	}
	return ""
}

// Create records the new record as the operation's first state.
func (r *recorder) Create(ctx context.Context, rec operation.Record) (operation.Record, error) {
	saved, err := r.Store.Create(ctx, rec)
	if err == nil {
		r.mu.Lock()
		r.creates[rec.OperationID]++
		r.mu.Unlock()
		r.observe(ctx, 0, saved)
	}
	return saved, err
}

// Update checks a handler's first write attempt for its message, and a
// successful write against the state it replaced; it injects LostAck.
func (r *recorder) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	r.checkAttempt(ctx, rec, expected)
	return r.write(ctx, rec, expected, func() (operation.Record, error) { return r.Store.Update(ctx, rec, expected) })
}

// UpdateWithAudit is Update for an operator's audited write.
func (r *recorder) UpdateWithAudit(ctx context.Context, rec operation.Record, expected int64, e review.AuditEntry) (operation.Record, error) {
	saved, err := r.write(ctx, rec, expected, func() (operation.Record, error) { return r.Store.UpdateWithAudit(ctx, rec, expected, e) })
	if err == nil {
		r.mu.Lock()
		if !slices.Contains(r.audited[rec.OperationID], saved.Revision) {
			r.audited[rec.OperationID] = append(r.audited[rec.OperationID], saved.Revision)
		}
		r.mu.Unlock()
	}
	return saved, err
}

// errAckLost is a lost answer's timeout: it says nothing of the write.
var errAckLost = fmt.Errorf("faultsim: the store's answer was lost: %w", context.DeadlineExceeded)

// write sends a conditional write to the store and records it. LostAck
// strikes after the store applied it: the answer is lost, and either the
// store's client resends the write, as the SDK's retryer does, or the
// caller gets a timeout. Only workers meet it, and the timeout only those
// that retry without waiting (submit backs off on the virtual clock,
// which no worker may wait on).
func (r *recorder) write(ctx context.Context, rec operation.Record, expected int64, send func() (operation.Record, error)) (operation.Record, error) {
	saved, err := send()
	if err != nil {
		return saved, err
	}
	if !r.fresh(saved) {
		// The store recognised a resend of its own write.
		r.w.tracef(rec.OperationID, "the store recognised r%d, resent by %s, as the write it already applied", saved.Revision, writerOf(ctx))
		return saved, nil
	}
	r.observe(ctx, expected, saved)
	inv := invOf(ctx)
	if _, other := ctx.Value(writerKey).(string); inv == nil || other || !r.w.inj.roll(LostAck) {
		return saved, nil
	}
	r.w.inj.note(LostAck)
	if inv.fn != "submit" && r.w.inj.intn(LostAck, 2) == 1 {
		r.w.tracef(rec.OperationID, "FAULT %s: r%d was written, %s gets a timeout", LostAck, saved.Revision, writerOf(ctx))
		return operation.Record{}, errAckLost
	}
	again, err := send()
	switch {
	case err == nil && r.fresh(again):
		r.observe(ctx, expected, again) // the store wrote it twice
	case err == nil:
		r.w.tracef(rec.OperationID, "FAULT %s: r%d was written, its answer lost; the resend is recognised as the same write", LostAck, saved.Revision)
	default:
		r.w.tracef(rec.OperationID, "FAULT %s: r%d was written, its answer lost; the resend answers %v", LostAck, saved.Revision, err)
	}
	return again, err
}

// checkAttempt applies CheckFirstWrite to the first write a queue
// handler attempts for a message.
func (r *recorder) checkAttempt(ctx context.Context, rec operation.Record, expected int64) {
	inv := invOf(ctx)
	if inv == nil || inv.records == nil {
		return // the application, the user, the sweep, an operator
	}
	if _, other := ctx.Value(writerKey).(string); other {
		return // a concurrent writer injected inside the invocation
	}
	msg := rec.LastAppliedMessageID
	i := -1
	for k, m := range inv.records {
		if m.MessageId == msg && inv.ops[k] == rec.OperationID {
			i = k
		}
	}
	if i < 0 || inv.firstWrite[msg] {
		return
	}
	inv.firstWrite[msg] = true
	r.mu.Lock()
	by := ""
	if h := r.hist[rec.OperationID]; h != nil {
		by = h.by(expected)
	}
	done := r.last[rec.OperationID].Terminal()
	r.mu.Unlock()
	if done {
		return // the store refuses any write now: nothing can fork
	}
	// An observation acts on the revision its message names or not at
	// all: a redelivery whose own write landed only re-emits.
	if p := CheckFirstWrite(msg, inv.envs[i].ExpectedRevision, expected, by, inv.fn != "observe"); p != "" {
		r.w.tracef(rec.OperationID, "VIOLATION %s: %s", InvChain, p)
		r.w.violate(InvChain, rec.OperationID, fmt.Sprintf("%s%s: %s", inv.fn, depthMark(inv.depth), p))
	}
}

// answer notes that msg's POST for op got a definite answer that reached
// its live handler: evidence for an uncertain episode about msg's claim.
func (r *recorder) answer(op, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answered[op] = msg
	if claim, ok := r.closedFirst[op]; ok && EvidenceAfterOperator(claim, msg) {
		r.w.resolvedUncertain++
		r.w.leftUncertain[op]--
		delete(r.closedFirst, op)
	}
}

// fresh reports whether saved is a new revision, not one the recorder
// has seen already.
func (r *recorder) fresh(saved operation.Record) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.last[saved.OperationID]
	return !ok || saved.Revision > last.Revision
}

// observe checks one successful write (expected 0: a create).
func (r *recorder) observe(ctx context.Context, expected int64, saved operation.Record) {
	next := StateOf(saved)
	id := saved.OperationID
	r.mu.Lock()
	old, had := r.last[id]
	before, hadBefore := r.prev[id]
	r.last[id] = next
	r.w.scale.write(writerOf(ctx), id, old, had, next, r.w.since())
	if had {
		r.prev[id] = old
	}
	h := r.hist[id]
	if h == nil {
		h = &revisions{}
		r.hist[id] = h
	}
	h.add(saved.Revision, saved.LastAppliedMessageID)
	settled := next.Terminal() || worker.NeedsReview(&saved)
	if settled != (len(r.settles[id])%2 == 1) {
		r.settles[id] = append(r.settles[id], r.w.clk.Now())
	}
	if !settled && writerOf(ctx) == "operator" {
		r.resumed[id] = r.w.clk.Now()
	}
	if inv := invOf(ctx); inv != nil && inv.wrote != nil {
		if _, other := ctx.Value(writerKey).(string); !other {
			inv.wrote[id] = saved.Revision
		}
	}
	if next.Terminal() {
		// Never written again: only the last state stays.
		delete(r.prev, id)
		delete(r.hist, id)
	}
	r.writes++
	if next.Phase == operation.PhaseSubmitting {
		r.claimed[id] = true
	}
	switch byOperator := writerOf(ctx) == "operator"; {
	case next.Phase == operation.PhaseUncertain && (!had || old.Phase != operation.PhaseUncertain):
		r.w.madeUncertain++ // an operator is asked to reconcile
		r.w.leftUncertain[id]++
		delete(r.closedFirst, id)
		r.claimOf[id] = ""
		if saved.Claim != nil {
			r.claimOf[id] = saved.Claim.MessageID
		}
	case had && old.Phase == operation.PhaseUncertain && next.Phase != operation.PhaseUncertain && !byOperator:
		r.w.resolvedUncertain++ // late evidence answered before any operator had to
		r.w.leftUncertain[id]--
		delete(r.claimOf, id)
	case had && old.Phase == operation.PhaseUncertain && next.Phase != operation.PhaseUncertain:
		if EvidenceAfterOperator(r.claimOf[id], r.answered[id]) {
			// The claimant held its answer; the operator wrote first.
			r.w.resolvedUncertain++
			r.w.leftUncertain[id]--
		} else {
			r.closedFirst[id] = r.claimOf[id] // the answer may still come
		}
		delete(r.claimOf, id)
	}
	if next.Terminal() {
		delete(r.claimOf, id)
		delete(r.closedFirst, id)
		delete(r.answered, id)
	}
	if writerOf(ctx) == "sweep" {
		if next.Phase == operation.PhaseUncertain {
			r.w.sweepClaims++
		} else {
			r.w.sweepRearmed++
		}
	}
	r.mu.Unlock()
	r.w.events.owe(saved)
	var prev, prior *State
	if had {
		prev = &old
	}
	if hadBefore {
		prior = &before
	}
	w := r.w
	if w.traced(id) {
		from := "-"
		if prev != nil {
			from = fmt.Sprintf("r%d %s", prev.Revision, prev.Phase)
		}
		sched := "-"
		if saved.Schedule != nil {
			sched = fmt.Sprintf("%s@%s", saved.Schedule.Action, w.at(saved.Schedule.Due))
		}
		w.tracef(id, "write by %s (expected r%d): %s → r%d %s job=%q settlement=%q deliveries=%d next=%s msg=%s",
			writerOf(ctx), expected, from, saved.Revision, saved.Phase, saved.RemoteJobID, saved.Settlement, len(saved.Deliveries), sched, shortID(saved.LastAppliedMessageID))
	}
	for _, p := range CheckWrite(expected, prior, prev, next) {
		w.tracef(id, "VIOLATION %s: %s", InvWrites, p)
		w.violate(InvWrites, id, fmt.Sprintf("write by %s: %s", writerOf(ctx), p))
	}
}

// sender is the queue the dispatcher sends through.
type sender struct{ w *world }

// Send injects CrashBeforeSend before the send and DupSend after it.
func (s *sender) Send(ctx context.Context, queueURL string, body []byte, delay time.Duration) (string, error) {
	w := s.w
	w.alive(ctx)
	env, _ := message.Decode(body)
	w.maybeCrash(ctx, CrashBeforeSend, env.OperationID, false)
	id, err := w.broker.Send(ctx, queueURL, body, delay)
	if err != nil {
		return id, err
	}
	w.scale.count(func(s *Scale) *int64 { return &s.SQSSend }, secSQS, w.since())
	if writerOf(ctx) == "sweep" {
		w.mu.Lock()
		w.rearms[env.OperationID]++
		w.mu.Unlock()
	}
	if w.traced(env.OperationID) {
		w.tracef(env.OperationID, "%s sends %s r%d job=%q delay %s (message %s)", writerOf(ctx), env.Action, env.ExpectedRevision, env.ExpectedRemoteJobID, delay, shortID(id))
	}
	if w.inj.hit(DupSend) {
		extra := time.Duration(w.inj.intn(DupSend, 4)) * time.Second
		dup, derr := w.broker.Send(ctx, queueURL, body, delay+extra)
		if derr == nil {
			w.tracef(env.OperationID, "FAULT %s: %s sent again as message %s, %s later", DupSend, env.Action, shortID(dup), extra)
		}
	}
	return id, nil
}

// extender renews leases through the broker, or fails to.
type extender struct{ w *world }

// ChangeVisibility renews a lease, or fails (LeaseRenewalFailure).
func (e *extender) ChangeVisibility(ctx context.Context, queueURL, receiptHandle string, timeout time.Duration) error {
	e.w.alive(ctx)
	if e.w.inj.hit(LeaseRenewalFailure) {
		if inv := invOf(ctx); inv != nil {
			for i, r := range inv.records {
				if r.ReceiptHandle == receiptHandle {
					e.w.tracef(inv.ops[i], "FAULT %s: %s cannot renew its lease", LeaseRenewalFailure, inv.fn)
				}
			}
		}
		return errors.New("faultsim: injected ChangeMessageVisibility failure")
	}
	err := e.w.broker.ChangeVisibility(ctx, queueURL, receiptHandle, timeout)
	e.w.scale.count(func(s *Scale) *int64 { return &s.SQSChangeVisibility }, secSQS, e.w.since())
	if inv := invOf(ctx); err == nil && inv != nil {
		for _, r := range inv.records {
			if r.ReceiptHandle == receiptHandle {
				e.w.hidden(r.MessageId, receiptHandle, timeout)
			}
		}
	}
	return err
}

// genaceClient is the Genace client the handlers see: the real one, plus
// the faults only a client can meet.
type genaceClient struct {
	w *world
	c Genace
}

// Genace is what the handlers use of the Genace client; Config.WrapGenace
// receives and returns it.
type Genace = stack.Genace

// Submit POSTs through the real client, tallies the outcome, and injects
// the faults that strike before the answer reaches the handler.
func (g *genaceClient) Submit(ctx context.Context, req genace.SubmitRequest, timeout time.Duration) genace.SubmitResult {
	w := g.w
	w.alive(ctx)
	dup := w.inj.roll(ClaimDuplicate)
	early := dup && w.inj.intn(ClaimDuplicate, 2) == 0
	if early {
		w.claimDuplicate(ctx, req.OperationID, "before its POST")
	}
	if inv := invOf(ctx); inv != nil {
		if i := w.handling(inv, req.OperationID); i >= 0 {
			if p := w.authorityAt(inv, i, timeout+persistBudget); p != "" {
				w.tracef(req.OperationID, "VIOLATION %s: %s (message %s)", InvAuthority, p, shortID(inv.records[i].MessageId))
				w.violate(InvAuthority, req.OperationID, fmt.Sprintf("%s%s: %s", inv.fn, depthMark(inv.depth), p))
			}
		}
	}
	sent := w.wire.count(req.OperationID)
	w.posting(req.OperationID, true)
	defer w.posting(req.OperationID, false)
	w.scale.count(func(s *Scale) *int64 { return &s.Posts }, secPosts, w.since())
	res := g.c.Submit(ctx, req, timeout)
	// Counted as the panic unwinds, if the worker dies first.
	posts := w.wire.since(req.OperationID, sent)
	reached := false
	defer func() {
		if len(posts) > 0 && (!reached || !answerKnown(posts)) {
			w.unknownSubmission(req.OperationID)
		}
	}()
	w.tracef(req.OperationID, "POST by %s → %s status %d job=%q sent=%t", writerOf(ctx), res.Outcome, res.StatusCode, res.JobID, res.RequestSent)
	t := w.tally(req.OperationID)
	if res.Outcome == genace.OutcomeRateLimited {
		t.rateLimited++
	}
	w.maybeCrash(ctx, CrashAfterPost, req.OperationID, false)
	// The worker lives to see the answer: invariant b holds it to every
	// job id the wire carried, and to the one its client handed back.
	for _, p := range w.wire.since(req.OperationID, sent) {
		if !p.lost && p.jobID != "" {
			t.handedOut = append(t.handedOut, p.jobID)
		}
	}
	if !w.secondJob(ctx, req.OperationID, res) {
		w.midCall(ctx, req.OperationID, "its POST")
		w.operatorRace(ctx, req.OperationID, "its POST")
	}
	if dup && !early {
		w.claimDuplicate(ctx, req.OperationID, "after its POST, before the answer reached it")
	}
	if res.JobID != "" {
		t.returned = append(t.returned, res.JobID)
	}
	reached = true
	if inv := invOf(ctx); inv != nil && answerKnown(posts) {
		for i, r := range inv.records {
			if inv.ops[i] == req.OperationID {
				w.rec.answer(req.OperationID, r.MessageId)
			}
		}
	}
	return res
}

// answerKnown says whether the last answer a POST got (after any re-send
// by the transport) tells the outcome, by the contract: it reached the
// client and is a 4xx but 408 (a proxy may send one after the server
// acted), or a 2xx or 5xx naming the job by an id automation can follow.
func answerKnown(posts []wirePost) bool {
	p := posts[len(posts)-1]
	switch {
	case p.lost, p.status == http.StatusRequestTimeout:
		return false
	case p.status >= 400 && p.status < 500:
		return true
	case p.status >= 200 && p.status < 300, p.status >= 500:
		return message.ValidJobID(p.jobID)
	}
	return false
}

// claimDuplicate injects ClaimDuplicate into a submit worker that holds
// the claim of op: its own message, sent again, reaches another worker,
// which handles it to the end before this one goes on.
func (w *world) claimDuplicate(ctx context.Context, op, when string) {
	inv := invOf(ctx)
	i := w.handling(inv, op)
	if i < 0 || inv.depth > 0 || inv.fn != "submit" {
		return
	}
	id, err := w.broker.Send(context.Background(), inv.queueURL, []byte(inv.records[i].Body), 0)
	if err != nil {
		return
	}
	w.tracef(op, "FAULT %s: a second dispatch (message %s) reaches another worker while %s holds the claim, %s", ClaimDuplicate, shortID(id), writerOf(ctx), when)
	if w.handleNow(inv, id) {
		w.inj.note(ClaimDuplicate)
	}
}

// MessageOf returns the queue message the worker behind ctx handles for
// the operation, if any, for planted bugs (Config.WrapRecords).
func MessageOf(ctx context.Context, operationID string) (events.SQSMessage, bool) {
	inv := invOf(ctx)
	if i := inv.opRecord(operationID); i >= 0 {
		return inv.records[i], true
	}
	return events.SQSMessage{}, false
}

// Get injects GetTimeout, or reads through and injects VisibilityExpiry.
func (g *genaceClient) Get(ctx context.Context, jobID string, wait, timeout time.Duration) (*genace.Job, error) {
	w := g.w
	w.alive(ctx)
	op := w.opOfJob(jobID)
	if w.inj.hit(GetTimeout) {
		// The request reaches Genace, and the client's own timeout error
		// follows at once: one worker's wait must not stall the world.
		_, _ = g.c.Get(ctx, jobID, wait, timeout)
		expired, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
		defer cancel()
		_, err := g.c.Get(expired, jobID, wait, timeout)
		w.tracef(op, "FAULT %s: GET %s by %s timed out: %v", GetTimeout, jobID, writerOf(ctx), err)
		return nil, err
	}
	w.scale.count(func(s *Scale) *int64 { return &s.Gets }, secGets, w.since())
	job, err := g.c.Get(ctx, jobID, wait, timeout)
	if w.traced(op) {
		if err != nil {
			w.tracef(op, "GET %s by %s → %v", jobID, writerOf(ctx), err)
		} else {
			w.tracef(op, "GET %s by %s → %s refund=%s charged=%d outputs=%d", jobID, writerOf(ctx), job.State, job.Credits.RefundState, job.Credits.Charged, len(job.Outputs))
		}
	}
	w.midCall(ctx, op, "its GET")
	w.operatorRace(ctx, op, "its GET")
	return job, err
}

// Download injects URLExpired and VisibilityExpiry around the real download.
func (g *genaceClient) Download(ctx context.Context, u genace.SignedURL, timeout time.Duration) (io.ReadCloser, int64, error) {
	w := g.w
	w.alive(ctx)
	jobID := jobOfURL(u)
	op := w.opOfJob(jobID)
	if w.inj.hit(URLExpired) {
		// Only Genace's clock jumps, for this one request, so the pause
		// stalls nobody else.
		w.simClock.skew(urlTTL + time.Second)
		defer w.simClock.skew(0)
		w.tracef(op, "FAULT %s: %s downloads %s after the URL expired", URLExpired, writerOf(ctx), urlTTL+time.Second)
	}
	body, n, err := g.c.Download(ctx, u, timeout)
	w.tracef(op, "download of %s by %s → err=%v", jobID, writerOf(ctx), err)
	w.midCall(ctx, op, "its download")
	w.operatorRace(ctx, op, "its download")
	return body, n, err
}

// jobOfURL reads the job id out of a simulator output URL
// (/files/{job}/{index}); the URL itself is never printed.
func jobOfURL(u genace.SignedURL) string {
	p, err := url.Parse(u.Reveal())
	if err != nil {
		return ""
	}
	parts := strings.Split(strings.Trim(p.Path, "/"), "/")
	if len(parts) == 3 && parts[0] == "files" {
		return parts[1]
	}
	return ""
}

// artifacts is the artifact store deliver sees: localpack.Dir with
// faults, counting what is stored per key.
type artifacts struct {
	w       *world
	d       *localpack.Dir
	mu      sync.Mutex
	puts    map[string]int  // successful Puts
	created map[string]int  // Puts that found the key empty and filled it
	armed   map[string]bool // keys a foreign object is put under right before the next Put
}

// Stat injects ForeignObject, then reads through.
func (a *artifacts) Stat(ctx context.Context, key string) (artifact.Object, bool, error) {
	a.w.alive(ctx)
	a.foreignObject(ctx, key)
	return a.d.Stat(ctx, key)
}

// foreignObject injects ForeignObject into a delivery's Stat of an empty
// key: now, or armed for the delivery's Put.
func (a *artifacts) foreignObject(ctx context.Context, key string) {
	if inv := invOf(ctx); inv == nil || inv.fn != "deliver" || !a.w.inj.roll(ForeignObject) {
		return
	}
	if _, ok, err := a.d.Stat(ctx, key); err != nil || ok {
		return // taken already: nothing to put there
	}
	if a.w.inj.intn(ForeignObject, 2) == 0 {
		a.plant(key, "before the delivery's Stat")
		return
	}
	a.mu.Lock()
	a.armed[key] = true
	a.mu.Unlock()
}

// plant puts a foreign object under key: as many bytes as Genace's output
// for the key has, none of them its content.
func (a *artifacts) plant(key, when string) {
	parts := strings.Split(key, "/")
	if len(parts) != 4 {
		return
	}
	job, ok := a.w.sim.Job(parts[2])
	index, err := strconv.Atoi(strings.TrimSuffix(parts[3], path.Ext(parts[3])))
	if !ok || err != nil || index < 0 || index >= len(job.Outputs) {
		return
	}
	body := bytes.Repeat([]byte{'x'}, int(job.Outputs[index].SizeBytes))
	sum := sha256.Sum256(body)
	if _, err := a.d.Put(context.Background(), key, bytes.NewReader(body), int64(len(body)), hex.EncodeToString(sum[:]), "application/octet-stream"); err != nil {
		return
	}
	a.w.inj.note(ForeignObject)
	a.w.tracef(opOfKey(key), "FAULT %s: another writer put %d bytes of other content under %s, %s", ForeignObject, len(body), key, when)
}

// Put lands an armed foreign object first, injects the persistent and
// mid-stream failures, or stores through and counts what it stored.
func (a *artifacts) Put(ctx context.Context, key string, r io.Reader, size int64, sum, contentType string) (artifact.Object, error) {
	a.w.alive(ctx)
	a.mu.Lock()
	armed := a.armed[key]
	delete(a.armed, key)
	a.mu.Unlock()
	if armed {
		a.plant(key, "between the delivery's Stat and its Put")
	}
	if op := opOfKey(key); a.w.persistentOf(op) == ArtifactStoreDown {
		a.w.struck(op, ArtifactStoreDown, "the artifact store refuses "+key+", as it will every time")
		return artifact.Object{}, fmt.Errorf("faultsim: injected persistent artifact store failure: access denied to %s", key)
	}
	if a.w.inj.hit(ArtifactPutFailure) {
		n, _ := io.CopyN(io.Discard, r, size/2)
		a.w.tracef(opOfKey(key), "FAULT %s: the store failed after %d of %d bytes of %s", ArtifactPutFailure, n, size, key)
		return artifact.Object{}, fmt.Errorf("faultsim: injected artifact store failure after %d of %d bytes", n, size)
	}
	_, existed, err := a.d.Stat(ctx, key)
	if err != nil {
		return artifact.Object{}, err
	}
	obj, err := a.d.Put(ctx, key, r, size, sum, contentType)
	if err == nil {
		a.mu.Lock()
		a.puts[key]++
		if !existed {
			a.created[key]++
		}
		a.mu.Unlock()
		a.w.tracef(opOfKey(key), "stored %s (existed before: %t)", key, existed)
	}
	return obj, err
}

// opOfKey reads the operation id out of an artifact key
// (ops/<operation>/<job>/<index><ext>); ids here need no unescaping.
func opOfKey(key string) string {
	parts := strings.Split(key, "/")
	if len(parts) >= 2 {
		return parts[1]
	}
	return ""
}
