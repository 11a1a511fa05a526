package faultsim

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/worker"
)

// State is what the write checks need of a record: small, so the run can
// remember the last two of every operation.
type State struct {
	Revision    int64
	Phase       operation.Phase
	Settlement  operation.Settlement
	RemoteJobID string
	// LastApplied is the queue message whose action wrote this revision
	// (operation.Record.LastAppliedMessageID).
	LastApplied string
	// Facts are what no later write may undo.
	Facts Facts
}

// Facts are the parts of a record that only move forward: once a write
// has changed one, a later write that puts the old value back was computed
// from a record older than the one it replaced (a stale view), whatever
// revision it was conditioned on.
type Facts struct {
	// SpecRevision, AuthorizedSpecRevision and BudgetCredits are the
	// application's: the user changes the request, the application
	// re-authorizes it or raises the budget while handlers work on it.
	SpecRevision, AuthorizedSpecRevision, BudgetCredits int64
	// Observations, RateLimited and Deliveries count what happened: an
	// observation saved, a 429 taken, an output stored.
	Observations, RateLimited, Deliveries int
	// Accepted and RemoteFailed are when the job was accepted or failed
	// (zero: not yet); ObservedAt is when the snapshot on the record was
	// read from Genace.
	Accepted, RemoteFailed, ObservedAt time.Time
}

// StateOf extracts a record's State.
func StateOf(r operation.Record) State {
	f := Facts{
		SpecRevision: r.SpecRevision, AuthorizedSpecRevision: r.AuthorizedSpecRevision, BudgetCredits: r.BudgetCredits,
		Observations: r.Counters.Observations, RateLimited: r.Counters.RateLimited, Deliveries: len(r.Deliveries),
	}
	if r.Timestamps.Accepted != nil {
		f.Accepted = *r.Timestamps.Accepted
	}
	if r.Timestamps.RemoteFailed != nil {
		f.RemoteFailed = *r.Timestamps.RemoteFailed
	}
	if r.Remote != nil {
		f.ObservedAt = r.Remote.ObservedAt
	}
	return State{Revision: r.Revision, Phase: r.Phase, Settlement: r.Settlement, RemoteJobID: r.RemoteJobID, LastApplied: r.LastAppliedMessageID, Facts: f}
}

// Terminal is operation.Record.Terminal for the state.
func (s State) Terminal() bool {
	r := operation.Record{Phase: s.Phase, Settlement: s.Settlement}
	return r.Terminal()
}

// fact is one comparable fact of a State, for the stale-view check.
type fact struct {
	name string
	get  func(Facts) string
	// counts only grow: a smaller value is stale whatever came before.
	counts bool
	n      func(Facts) int64
}

var facts = []fact{
	{name: "spec revision", get: func(f Facts) string { return fmt.Sprint(f.SpecRevision) }, counts: true, n: func(f Facts) int64 { return f.SpecRevision }},
	{name: "authorized spec revision", get: func(f Facts) string { return fmt.Sprint(f.AuthorizedSpecRevision) }},
	{name: "budget", get: func(f Facts) string { return fmt.Sprint(f.BudgetCredits) }},
	{name: "observations", get: func(f Facts) string { return fmt.Sprint(f.Observations) }, counts: true, n: func(f Facts) int64 { return int64(f.Observations) }},
	{name: "429s taken", get: func(f Facts) string { return fmt.Sprint(f.RateLimited) }, counts: true, n: func(f Facts) int64 { return int64(f.RateLimited) }},
	{name: "deliveries", get: func(f Facts) string { return fmt.Sprint(f.Deliveries) }, counts: true, n: func(f Facts) int64 { return int64(f.Deliveries) }},
	{name: "accepted at", get: func(f Facts) string { return stamp(f.Accepted) }},
	{name: "remote failure at", get: func(f Facts) string { return stamp(f.RemoteFailed) }},
	{name: "snapshot read at", get: func(f Facts) string { return stamp(f.ObservedAt) }},
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.UTC().Format("15:04:05.000")
}

// CheckWrite checks one successful write (invariant c): the writer
// expected the revision the store held, which moved by one; the record
// left was not terminal; the phase moved along a legal edge; a known job
// id stayed; and no count went back nor was a fact the write before
// changed (prev → old) put back: no stale view. old is nil for a create,
// prev nil if unknown. It returns the problems.
func CheckWrite(expected int64, prev, old *State, next State) []string {
	var out []string
	if old == nil {
		if next.Revision != 1 {
			out = append(out, fmt.Sprintf("created at revision %d, not 1", next.Revision))
		}
		return out
	}
	if expected != old.Revision {
		out = append(out, fmt.Sprintf("stale overwrite: the writer expected r%d but the store held r%d (%s), now r%d %s",
			expected, old.Revision, old.Phase, next.Revision, next.Phase))
	}
	if next.Revision != old.Revision+1 {
		out = append(out, fmt.Sprintf("revision moved from r%d to r%d, not by one", old.Revision, next.Revision))
	}
	if old.Terminal() {
		out = append(out, fmt.Sprintf("terminal record (r%d %s %s) written again as r%d %s", old.Revision, old.Phase, old.Settlement, next.Revision, next.Phase))
	} else if old.Phase != next.Phase && !operation.CanTransition(old.Phase, next.Phase) {
		out = append(out, fmt.Sprintf("illegal transition %s → %s (r%d → r%d)", old.Phase, next.Phase, old.Revision, next.Revision))
	}
	if old.RemoteJobID != "" && next.RemoteJobID != old.RemoteJobID {
		out = append(out, fmt.Sprintf("job id %s replaced by %q at r%d", old.RemoteJobID, next.RemoteJobID, next.Revision))
	}
	for _, f := range facts {
		o, n := f.get(old.Facts), f.get(next.Facts)
		switch {
		case f.counts && f.n(next.Facts) < f.n(old.Facts):
			out = append(out, fmt.Sprintf("write from a stale view: %s went back from %s (r%d) to %s (r%d)", f.name, o, old.Revision, n, next.Revision))
		case prev != nil && prev.Revision == old.Revision-1 && f.get(prev.Facts) != o && n == f.get(prev.Facts):
			out = append(out, fmt.Sprintf("write from a stale view: r%d put %s back to %s, undoing r%d's change to %s", next.Revision, f.name, n, old.Revision, o))
		}
	}
	return out
}

// CheckFirstWrite checks the first write a handler attempts for one
// message (invariant g): it must be conditioned on the revision the
// message names, or, with ownProgress (a delivery storing one output per
// write, a redelivered claimant parking its own claim), on one the same
// message wrote (appliedBy, "" when unknown); otherwise two messages
// drive the operation at once. It returns the problem, or "".
func CheckFirstWrite(msgID string, msgRevision, expected int64, appliedBy string, ownProgress bool) string {
	if expected == msgRevision || (ownProgress && appliedBy != "" && appliedBy == msgID) {
		return ""
	}
	by := appliedBy
	switch {
	case by == "":
		by = "an unknown writer"
	case by == msgID:
		by = "this message, which must not act again"
	}
	return fmt.Sprintf("forked chain: message %s was sent for r%d but its first write is conditioned on r%d (written by %s)", msgID, msgRevision, expected, by)
}

// CheckAuthority checks a POST (invariant h): current says the worker's
// receipt handle is still the message's, remaining how long the message
// stays hidden, left how long until Lambda kills the function, need what
// the POST and the write of its outcome take. It returns the problem, or "".
func CheckAuthority(current bool, remaining, left, need time.Duration) string {
	switch {
	case !current:
		return "POST without authority: another worker received the message since"
	case remaining <= 0:
		return "POST without authority: the message's visibility has run out, any worker may receive it"
	case remaining < need:
		return fmt.Sprintf("POST without authority: the message stays hidden only %s more, the POST and its persist need %s", remaining.Round(time.Second), need)
	case left < need:
		return fmt.Sprintf("POST too close to the function's deadline: %s left, the POST and its persist need %s; killed between them, the worker loses the answer's job id", left.Round(time.Second), need)
	}
	return ""
}

// SweepBound is how often the sweep may re-arm one operation's chain:
// once for every fault that ends a chain by design on it (a concurrent
// write that wins a handler's race, a message dead-lettered, a worker
// dead with no message left to redeliver, see DeadWorkerEndsChain). A
// healthy chain carries itself, so there is no slack: a chain that dies
// by itself even once exceeds it.
func SweepBound(stops int) int { return stops }

// DeadWorkerEndsChain says whether a worker that died mid-invocation
// ended its operation's chain by design. Its message's redelivery
// normally re-emits the follow-up, but not when another worker took and
// acknowledged the message meanwhile (messageGone). The chain then ends
// with the dead worker's write, if that write is the record's latest
// (another writer's follow-up would carry it) and the record is active.
func DeadWorkerEndsChain(wroteLatest, messageGone, terminal bool) bool {
	return wroteLatest && messageGone && !terminal
}

// SweepBeforeRedelivery says whether a message hidden for hiddenFor more
// comes back only after the sweep re-armed its operation (a next action
// overdue by overdue): the deployed visibilities outlast the threshold,
// and the stale redelivery is then acknowledged as obsolete.
func SweepBeforeRedelivery(hiddenFor, overdue time.Duration) bool {
	return hiddenFor > overdue
}

// DispatchDropped says whether rec is a prepared request that waits for
// the application's re-authorization: a precondition of the submission
// fails and no dispatch is pending. The sweep takes such a record out of
// its index with a review, lest it starve every run (see sweep.Limit).
func DispatchDropped(rec *operation.Record) bool {
	_, bad := operation.FailedCheck(operation.SubmitChecks(rec))
	return rec.Phase == operation.PhasePrepared && rec.Schedule == nil && bad
}

// Output is Genace's truth about one output of a job.
type Output struct {
	ContentType string
	SizeBytes   int64
	SHA256      string
}

// Final is everything the end-of-run checks know about one operation: its
// record and reviews, Genace's ground truth, what the client was handed,
// and what the artifact store holds.
type Final struct {
	Record operation.Record
	// Audit counts operator decisions on the operation (audit entries).
	Audit int
	// AuditedWrites are the revisions the operator's audited writes
	// produced, by the recorder, and AuditRevisions those the store's
	// audit entries say they wrote (Revision above FromRevision).
	AuditedWrites, AuditRevisions []int64
	// SettledOutside is the revision the operator's "settled outside
	// Genace" decision wrote (0: none).
	SettledOutside int64
	// Confirmed counts the operator's "confirmed not submitted" decisions
	// that were true when made (no job on Genace, no POST in flight):
	// each allows one more POST.
	Confirmed int
	// ReviewJobIDs are the job ids the open reviews carry, ReviewReasons
	// what they say (quoting a job id outside the definition), Reviews
	// how many there are.
	ReviewJobIDs  []string
	ReviewReasons []string
	Reviews       int
	// Jobs are the jobs Genace created for the operation.
	Jobs []genacesim.JobTruth
	// RecordJobOperation is the operation Genace created the record's job
	// for ("" when the record has none or Genace does not know it).
	RecordJobOperation string
	// Posts counts POSTs that reached Genace for the operation;
	// RateLimited those answered 429 (nothing created, may be retried).
	Posts, RateLimited int
	// Returned are the job ids the client handed back to a live handler.
	Returned []string
	// HandedOut are the job ids Genace's answers carried on the wire to a
	// worker that lived to see the answer, understood or not.
	HandedOut []string
	// SweepRearms counts the sweep's re-arms of the chain; SweepBound is
	// how many the run allows.
	SweepRearms, SweepBound int
	// Outputs are Genace's outputs of a delivered record's job.
	Outputs []Output
	// Stored maps each delivery's key to the sha256 stored under it.
	Stored map[string]string
	// Created counts, per key, the Puts that stored a new object.
	Created map[string]int
}

// CheckFinal checks one operation at the end of a run: invariants a, b and
// d–f (c is checked on every write).
func CheckFinal(f Final) []Violation {
	rec := &f.Record
	id := rec.OperationID
	var out []Violation
	add := func(inv Invariant, format string, args ...any) {
		out = append(out, Violation{Invariant: inv, OperationID: id, Detail: fmt.Sprintf(format, args...)})
	}
	review := worker.NeedsReview(rec)

	// (a) One job and one POST (429s aside) per operation; each informed
	// operator confirmation and each duplicate of Genace's own allows one
	// more.
	dups := 0
	for _, j := range f.Jobs {
		if j.DuplicateOf != "" {
			dups++
		}
	}
	if len(f.Jobs) > 1+f.Confirmed+dups {
		ids := make([]string, len(f.Jobs))
		for i, j := range f.Jobs {
			ids[i] = j.ID
		}
		add(InvPosts, "%d jobs created on Genace for one operation (%s): charged %d times (%d informed operator confirmations, %d duplicates Genace made itself)", len(f.Jobs), strings.Join(ids, ", "), len(f.Jobs), f.Confirmed, dups)
	}
	if f.Posts > 1+f.RateLimited+f.Confirmed {
		add(InvPosts, "%d POSTs reached Genace but only %d of them were answered 429: at most %d were allowed", f.Posts, f.RateLimited, 1+f.RateLimited+f.Confirmed)
	}

	// (b) Every job id Genace handed out is kept (an id outside the
	// definition by an open review quoting it); a job whose id never came
	// back leaves the operation for review.
	kept := func(j string) bool {
		if rec.RemoteJobID == j || slices.Contains(f.ReviewJobIDs, j) {
			return true
		}
		return !message.ValidJobID(j) && slices.ContainsFunc(f.ReviewReasons, func(r string) bool { return strings.Contains(r, j[:min(len(j), 100)]) })
	}
	told := append(slices.Clone(f.HandedOut), f.Returned...)
	slices.Sort(told)
	for _, j := range slices.Compact(told) {
		if kept(j) {
			continue
		}
		switch {
		case slices.Contains(f.Returned, j):
			add(InvJobID, "Genace returned job %s but the record holds %q and no review carries it", j, rec.RemoteJobID)
		default:
			add(InvJobID, "Genace's answer named job %s to a live worker, but the record holds %q and no review carries it (the client lost an id it was given)", j, rec.RemoteJobID)
		}
	}
	for _, j := range f.Jobs {
		if kept(j.ID) || slices.Contains(told, j.ID) {
			continue
		}
		if j.DuplicateOf != "" {
			// Genace's gateway made it and named it to nobody (the
			// operator's attach of it failed): nothing could know of it.
			continue
		}
		if !review {
			add(InvJobID, "job %s (%s) exists on Genace, its id never came back, yet the operation is %s without review", j.ID, j.State, rec.Phase)
		}
	}
	if rec.RemoteJobID != "" && !message.ValidJobID(rec.RemoteJobID) {
		// Every follow-up names the job: none can be sent, so the job is
		// never observed, delivered or settled.
		add(InvJobID, "the record holds job id %q, outside the job id definition: no follow-up message can carry it, so the job is never observed", rec.RemoteJobID)
	}
	if rec.RemoteJobID != "" && f.RecordJobOperation != id {
		owner := f.RecordJobOperation
		if owner == "" {
			owner = "no operation (Genace does not know the job)"
		}
		add(InvJobID, "the record holds job %s, which Genace created for %s", rec.RemoteJobID, owner)
	}

	// (c) An audited write and its audit entry are one transaction.
	for _, r := range f.AuditedWrites {
		if !slices.Contains(f.AuditRevisions, r) {
			add(InvWrites, "the operator's audited write of r%d is in the store without its audit entry (entries for %v)", r, f.AuditRevisions)
		}
	}
	for _, r := range f.AuditRevisions {
		if !slices.Contains(f.AuditedWrites, r) {
			add(InvWrites, "an audit entry records a write of r%d that no audited write made (audited writes %v)", r, f.AuditedWrites)
		}
	}

	// (d) Terminal or waiting for review (DispatchDropped waits for the
	// application, with a review): nothing lost, nothing stuck.
	if DispatchDropped(rec) {
		review = true
	}
	if !rec.Terminal() && !review {
		next := "no next action"
		if rec.Schedule != nil {
			next = fmt.Sprintf("next %s due %s", rec.Schedule.Action, rec.Schedule.Due.Format("15:04:05"))
		}
		add(InvSettled, "stuck in %s at r%d (%s, %d reviews, last error %q)", rec.Phase, rec.Revision, next, f.Reviews, rec.LastError)
	}
	if review && !rec.Terminal() && f.Reviews == 0 {
		// Waiting for an operator whom nothing tells: the sweep reads only
		// active records, so nobody ever looks at it again.
		add(InvSettled, "waits for review in %s at r%d (last error %q) but no open review tells an operator", rec.Phase, rec.Revision, rec.LastError)
	}

	// (g) No chain kept alive only by the sweep.
	if f.SweepRearms > f.SweepBound {
		add(InvChain, "the sweep re-armed the chain %d times (bound %d): its own messages keep dying", f.SweepRearms, f.SweepBound)
	}

	var job *genacesim.JobTruth
	for i := range f.Jobs {
		if f.Jobs[i].ID == rec.RemoteJobID {
			job = &f.Jobs[i]
		}
	}

	// (e) Delivered: every output stored, with Genace's checksum, once; a
	// succeeded render never ends otherwise terminal.
	if rec.Phase == operation.PhaseDelivered {
		switch {
		case job == nil:
			add(InvDelivery, "delivered, but Genace has no job %q for the operation", rec.RemoteJobID)
		case job.State != genacesim.StateSucceeded:
			add(InvDelivery, "delivered, but job %s is %s on Genace", job.ID, job.State)
		default:
			if len(rec.Deliveries) != len(f.Outputs) {
				add(InvDelivery, "%d deliveries recorded for %d outputs of job %s", len(rec.Deliveries), len(f.Outputs), job.ID)
			}
			for i, o := range f.Outputs {
				d, ok := rec.Delivered(i)
				if !ok {
					add(InvDelivery, "output %d of job %s is not recorded as delivered", i, job.ID)
					continue
				}
				if want := artifact.Key(id, job.ID, i, o.ContentType); d.Key != want {
					add(InvDelivery, "output %d stored under %s, not its deterministic key %s", i, d.Key, want)
				}
				if d.SHA256 != o.SHA256 || d.SizeBytes != o.SizeBytes {
					add(InvDelivery, "output %d recorded with sha256 %s (%d bytes); Genace's is %s (%d bytes)", i, d.SHA256, d.SizeBytes, o.SHA256, o.SizeBytes)
				}
				switch got := f.Stored[d.Key]; got {
				case o.SHA256:
				case "":
					add(InvDelivery, "output %d: nothing stored under %s", i, d.Key)
				default:
					add(InvDelivery, "output %d: %s holds sha256 %s, Genace's is %s", i, d.Key, got, o.SHA256)
				}
			}
		}
	}
	for key, n := range f.Created {
		if n > 1 {
			add(InvDelivery, "%s stored %d times", key, n)
		}
	}
	if job != nil && rec.Terminal() {
		switch {
		case job.State == genacesim.StateSucceeded && rec.Phase != operation.PhaseDelivered && rec.Phase != operation.PhaseSuperseded:
			add(InvDelivery, "job %s succeeded but the operation ended %s", job.ID, rec.Phase)
		case (job.State == genacesim.StateFailed || job.State == genacesim.StateCanceled) && rec.Phase != operation.PhaseFailed && rec.Phase != operation.PhaseSuperseded:
			add(InvRefund, "job %s %s but the operation ended %s", job.ID, job.State, rec.Phase)
		}
	}

	// (f) A failed operation is settled only on Genace's word, or by the
	// operator's audited settlement outside Genace that ended it.
	if rec.Phase == operation.PhaseFailed && rec.Settlement == operation.SettlementSettled && f.SettledOutside != rec.Revision {
		switch {
		case job == nil:
			add(InvRefund, "failed and settled, but Genace has no job %q for it", rec.RemoteJobID)
		case job.Credits.RefundState != genacesim.RefundSettled && job.Credits.Charged != 0:
			add(InvRefund, "settled, but Genace shows job %s refund_state %s with %d charged, %d refunded", job.ID, job.Credits.RefundState, job.Credits.Charged, job.Credits.Refunded)
		}
	}
	return out
}

// The intake's invariants (issue 22), checked against what the
// application sent and was answered (Caller) and what Genace received.
const (
	// InvOneCreate: one record per operation id, and every create of it
	// (raced, retried after a lost answer) answered with that one
	// operation, exactly one of them as its creator.
	InvOneCreate Invariant = "j:one-create"
	// InvSpecPosts: a POST only at a spec revision the caller authorized,
	// and at most one per revision, 429s (which created nothing) and
	// informed operator confirmations aside.
	InvSpecPosts Invariant = "k:one-post-per-spec"
	// InvSpecInEffect: a POST carries the model and input in effect by the
	// caller's answers: never a spec it changed away from or cancelled
	// before the claim.
	InvSpecInEffect Invariant = "l:post-spec-in-effect"
	// InvRefusal: a change or cancel is refused as no longer possible
	// (409) only once the submission was claimed (or the operation ended
	// or waits for an operator).
	InvRefusal Invariant = "m:409-after-claim"
	// InvEvents: every operation whose record calls for a completion
	// event has its current one sent (its phase, and a delivery's output
	// keys) and marked sent, within EventBound of the write that recorded
	// it; every event sent was recorded by a write that called for it,
	// and none carries the input.
	InvEvents Invariant = "n:event-sent"
)

// CreateAnswer is one answer the intake gave a create, whether or not
// it reached the caller.
type CreateAnswer struct {
	// Identity names the operation answered (its id and creation time).
	Identity string
	// Created is a 201: this request created the operation.
	Created bool
	// Err is the error or refusal, "" for none.
	Err string
}

// Caller is the application's side of one operation: what it sent and
// the answers it got.
type Caller struct {
	Creates []CreateAnswer
	// Specs are the spec revisions the caller authorized, each with its
	// SpecDigest; Current is the one in effect by its answers.
	Specs   map[int64]string
	Current int64
	// Cancelled: a cancel was answered as done.
	Cancelled bool
}

// SpecDigest identifies a spec by its model and input, the input in
// one encoding whatever its key order or spacing.
func SpecDigest(model string, input []byte) string {
	var v any
	_ = json.Unmarshal(input, &v)
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(append([]byte(model+"\n"), b...))
	return hex.EncodeToString(sum[:8])
}

// CheckCreates checks an operation's creates (invariant j): records is
// how many the store created.
func CheckCreates(id string, records int, answers []CreateAnswer) []Violation {
	var out []Violation
	add := func(format string, args ...any) {
		out = append(out, Violation{Invariant: InvOneCreate, OperationID: id, Detail: fmt.Sprintf(format, args...)})
	}
	if records != 1 {
		add("the store created %d records for one operation id", records)
	}
	created := 0
	for _, a := range answers {
		switch {
		case a.Err != "":
			add("a create of the same request was answered %s", a.Err)
		case a.Identity != answers[0].Identity:
			add("creates of one request answered two operations: %s and %s", answers[0].Identity, a.Identity)
		}
		if a.Created {
			created++
		}
	}
	if created != 1 {
		add("%d of %d creates answered as the operation's creator (201), not one", created, len(answers))
	}
	return out
}

// CheckPost checks one POST as Genace received it (invariants k and l):
// spec is the record's spec revision at the POST, got the SpecDigest of
// the POST's model and input.
func CheckPost(id string, c Caller, spec int64, got string) []Violation {
	var out []Violation
	add := func(inv Invariant, format string, args ...any) {
		out = append(out, Violation{Invariant: inv, OperationID: id, Detail: fmt.Sprintf(format, args...)})
	}
	if _, ok := c.Specs[spec]; !ok {
		add(InvSpecPosts, "POST at spec r%d, which the caller never authorized (authorized %d revisions)", spec, len(c.Specs))
	}
	switch {
	case c.Cancelled:
		add(InvSpecInEffect, "POST after the caller's cancel was answered as done")
	case got != c.Specs[c.Current]:
		add(InvSpecInEffect, "POST of spec %s (record at spec r%d), but the spec in effect is r%d's %s", got, spec, c.Current, c.Specs[c.Current])
	}
	return out
}

// CheckPostsPerSpec checks an operation's POSTs per spec revision
// (invariant k): posts counts those not answered 429, confirmed the
// informed operator confirmations, each allowing one more.
func CheckPostsPerSpec(id string, posts map[int64]int, confirmed int) []Violation {
	var out []Violation
	for _, spec := range slices.Sorted(maps.Keys(posts)) {
		if n := posts[spec]; n > 1+confirmed {
			out = append(out, Violation{Invariant: InvSpecPosts, OperationID: id, Detail: fmt.Sprintf("%d POSTs not answered 429 at spec r%d (%d informed operator confirmations)", n, spec, confirmed)})
		}
	}
	return out
}

// CheckRefusal checks a change or cancel answered 409 (invariant m),
// given whether a claim had been written and the record as it stood.
func CheckRefusal(what string, claimed bool, rec *operation.Record) string {
	if claimed || rec.Terminal() || rec.Parked != nil {
		return ""
	}
	return fmt.Sprintf("%s answered 409 at r%d %s, but no submission claim was ever written", what, rec.Revision, rec.Phase)
}
