// Package replay is the operator's recovery path for one reviewed
// operation: plan recomputes the next action from the current record (never
// from a dead-lettered message), and replay carries out exactly that action
// when the operator confirms it, writing the audit entry in the same
// transaction as the record update. There is no bulk redrive.
package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/worker"
)

// Store is what replay needs of persistence.
type Store interface {
	Get(ctx context.Context, operationID string) (operation.Record, error)
	UpdateWithAudit(ctx context.Context, rec operation.Record, expected int64, entry review.AuditEntry) (operation.Record, error)
	Audit(ctx context.Context, operationID string) ([]review.AuditEntry, error)
	OperationReviews(ctx context.Context, operationID string) ([]review.Record, error)
	JobRefs(ctx context.Context, jobID string) ([]store.JobRef, error)
	CloseReview(ctx context.Context, id, by string, at time.Time) error
	// AppendAudit keeps the audit entry of a decision that writes no
	// record (store.Store.AppendAudit).
	AppendAudit(ctx context.Context, entry review.AuditEntry) error
}

// JobSearcher lists the jobs Genace holds for an operation. Genace itself
// cannot be searched; a local run's saved simulator can, so on a local
// run a confirmation that nothing was submitted is checked against it.
type JobSearcher interface {
	JobsForOperation(operationID string) []string
}

// JobReader looks a job up on Genace (*genace.Client is one).
type JobReader interface {
	Get(ctx context.Context, jobID string, wait, timeout time.Duration) (*genace.Job, error)
}

// lookupTimeout bounds the GET that verifies an operator's job id.
const lookupTimeout = 15 * time.Second

// Decisions an audit entry records for a reconciliation.
const (
	DecisionAttachJob             = "attach-job"
	DecisionConfirmedNotSubmitted = "confirmed-not-submitted"
	// DecisionAcknowledged: a terminal record acknowledged (nothing
	// written to it; the entry is appended at its revision).
	DecisionAcknowledged = "acknowledged"
	// DecisionSettledOutside: accounting settled the refund outside
	// Genace.
	DecisionSettledOutside = "settled-outside-genace"
)

// Verified is the audit entry's Verification when Genace confirmed that
// the attached job exists and names this operation.
const Verified = "verified"

// Sender delivers the follow-up message a replay schedules.
type Sender interface {
	Send(ctx context.Context, env message.Envelope, delay time.Duration) (schedule.Route, error)
}

// Evidence is what the store holds about an operation besides its
// record: a job id may survive only there (a review kept it when the
// record could not be written, or a replay closed that review).
type Evidence struct {
	// Reviews are the operation's reviews, open and closed.
	Reviews []review.Record
	// Audit is the operation's audit trail.
	Audit []review.AuditEntry
}

// KnownJob is a job id recorded for the operation, and where.
type KnownJob struct {
	JobID string `json:"job_id"`
	// Sources name each place it was found ("record", "review job:X
	// (open)", "audit r5").
	Sources []string `json:"sources"`
}

// KnownJobs lists every job id the record and the evidence name for the
// operation, record first, then in the order found.
func KnownJobs(rec *operation.Record, ev Evidence) []KnownJob {
	var out []KnownJob
	add := func(jobID, source string) {
		if jobID == "" {
			return
		}
		i := slices.IndexFunc(out, func(k KnownJob) bool { return k.JobID == jobID })
		if i < 0 {
			out = append(out, KnownJob{JobID: jobID})
			i = len(out) - 1
		}
		out[i].Sources = append(out[i].Sources, source)
	}
	add(rec.RemoteJobID, "record")
	for _, rv := range ev.Reviews {
		state := "closed"
		if rv.Open {
			state = "open"
		}
		add(rv.RemoteJobID, fmt.Sprintf("review %s (%s)", rv.ID, state))
	}
	for _, e := range ev.Audit {
		add(e.RemoteJobID, fmt.Sprintf("audit r%d (%s by %s)", e.Revision, e.Decision, e.Operator))
	}
	return out
}

func jobIDs(known []KnownJob) []string {
	out := make([]string, len(known))
	for i, k := range known {
		out[i] = k.JobID
	}
	return out
}

// Plan is what replay would do now, and why.
type Plan struct {
	OperationID    string                   `json:"operation_id"`
	Revision       int64                    `json:"revision"`
	Phase          operation.Phase          `json:"phase"`
	RemoteState    operation.RemoteState    `json:"remote_state,omitempty"`
	RemoteJobID    string                   `json:"remote_job_id,omitempty"`
	Settlement     operation.Settlement     `json:"settlement,omitempty"`
	Recommendation operation.Recommendation `json:"recommendation"`
	// KnownJobs are the job ids recorded anywhere for the operation: on
	// the record, in its reviews (open or closed), in its audit trail.
	KnownJobs []KnownJob `json:"known_jobs,omitempty"`
	// Checks are the preconditions for the action, each with its result.
	Checks []operation.Check `json:"checks"`
	// Ready says whether the action may run as the record stands.
	Ready bool `json:"ready"`
	// Needs says what the operator must add (reconciliation evidence).
	Needs string `json:"needs,omitempty"`
	// Cost says, before a decision that leads to a charge (confirming
	// nothing was submitted, the dispatch after it, a settlement
	// outside Genace), what the operator claims and what it costs.
	Cost string `json:"cost,omitempty"`
	// Credits is the figure in Cost: the estimate a dispatch charges, or
	// what a settlement outside Genace accounts for.
	Credits int64 `json:"credits,omitempty"`
	// ReasonRequired says that the decision needs --reason: how the
	// operator knows (requireReason).
	ReasonRequired bool `json:"reason_required,omitempty"`
}

// confirmations counts the operator's confirmations that a POST created
// nothing.
func confirmations(audit []review.AuditEntry) int {
	n := 0
	for _, e := range audit {
		if e.Decision == DecisionConfirmedNotSubmitted {
			n++
		}
	}
	return n
}

// dispatchCost is what a dispatch of rec charges, in the plan's words.
func dispatchCost(rec *operation.Record) string {
	return fmt.Sprintf("creates a new job on Genace and charges about %d credits (the estimate for model %s; budget %d)",
		rec.EstimatedCredits, rec.Model, rec.BudgetCredits)
}

// PostsAccounted says whether every POST the record counts is known to
// have created nothing: answered 429, refused our key (401 or 403), or
// confirmed not submitted by an operator (each confirmation settles the
// one uncertain POST that led to it). The detail says how the count adds
// up.
func PostsAccounted(rec *operation.Record, audit []review.AuditEntry) (bool, string) {
	confirmed := confirmations(audit)
	open := rec.Posts - rec.Counters.RateLimited - rec.Counters.Unauthorized - confirmed
	return open <= 0, fmt.Sprintf("%d POSTs: %d answered 429, %d refused our key, %d confirmed not submitted, %d with an unsettled outcome",
		rec.Posts, rec.Counters.RateLimited, rec.Counters.Unauthorized, confirmed, max(open, 0))
}

// PlanFor computes the plan for a record and the evidence stored beside
// it (Replayer.Plan reads both).
func PlanFor(rec *operation.Record, ev Evidence) Plan {
	p := Plan{
		OperationID: rec.OperationID, Revision: rec.Revision, Phase: rec.Phase, RemoteJobID: rec.RemoteJobID,
		Settlement: rec.Settlement, Recommendation: operation.Recommend(rec), KnownJobs: KnownJobs(rec, ev),
	}
	if rec.Remote != nil {
		p.RemoteState = rec.Remote.State
	}
	if s, ok := steps[p.Recommendation.Action]; ok {
		s.plan(&p, rec, ev)
	} else {
		p.check("replayable", false, "replay has no step for action "+string(p.Recommendation.Action))
	}
	p.Ready = true
	for _, c := range p.Checks {
		p.Ready = p.Ready && c.OK
	}
	return p
}

// check adds a precondition and its result.
func (p *Plan) check(name string, ok bool, detail string) {
	p.Checks = append(p.Checks, operation.Check{Name: name, OK: ok, Detail: detail})
}

// Request is one operator decision.
type Request struct {
	OperationID string
	Action      operation.Action
	Operator    string
	// JobID attaches a job the operator found (reconcile only). It is
	// looked up on Genace first.
	JobID string
	// ConfirmedNotSubmitted says Genace has no job for it (reconcile only).
	ConfirmedNotSubmitted bool
	// ForceUnverified attaches JobID although Genace did not confirm that
	// it names this operation (not found, another operation's, no
	// metadata, lookup failed). It never attaches a job another
	// operation holds. Reason is then required.
	ForceUnverified bool
	// Reason is how the operator knows, for a decision that rests on
	// their word: an override, a confirmation that nothing was
	// submitted, a dispatch, a settlement outside Genace (required for
	// the first and the last; requireReason says when for the others).
	// It goes into the audit entry.
	Reason string
}

// KeptReview is an open review a replay left open, and why.
type KeptReview struct {
	ID  string `json:"id"`
	Why string `json:"why"`
}

// Result is what a replay did.
type Result struct {
	Before   operation.Record  `json:"-"`
	After    operation.Record  `json:"-"`
	Entry    review.AuditEntry `json:"audit"`
	Sent     *message.Envelope `json:"sent,omitempty"`
	Route    schedule.Route    `json:"route,omitempty"`
	SendErr  string            `json:"send_error,omitempty"`
	Closed   []string          `json:"closed_reviews,omitempty"`
	Kept     []KeptReview      `json:"kept_reviews,omitempty"`
	Changed  bool              `json:"changed"`
	Decision string            `json:"decision"`
}

// Errors callers branch on.
var (
	// ErrBadRequest: the request itself is incomplete or contradictory.
	ErrBadRequest = errors.New("bad replay request")
	// ErrActionMismatch: the requested action is not what the plan
	// computes now (the state may have moved since review).
	ErrActionMismatch = errors.New("action does not match the plan")
	// ErrNotReady: a precondition failed.
	ErrNotReady = errors.New("precondition failed")
	// ErrJobKnown: --confirmed-not-submitted while a job id is recorded
	// for the operation.
	ErrJobKnown = errors.New("a job id is known for this operation")
	// ErrUnverified: Genace did not confirm the job the operator named.
	ErrUnverified = errors.New("job not verified on Genace")
	// ErrJobHeld: another operation already holds or claims the job.
	ErrJobHeld = errors.New("job held by another operation")
)

// maxReasonLen bounds an override's reason.
const maxReasonLen = 500

// Replayer carries out replays.
type Replayer struct {
	Store  Store
	Sender Sender // nil: the follow-up stays scheduled on the record
	// Genace verifies an operator's --job-id; nil: no job can be
	// verified, so attaching one needs ForceUnverified.
	Genace JobReader
	// Search, when set (a local run's simulator), refuses a
	// confirmation that nothing was submitted while Genace holds a job
	// for the operation; nil in production, where Genace cannot be
	// searched.
	Search JobSearcher
	Clock  clock.Clock
}

// evidence reads what the store holds about the operation beside its
// record.
func (r *Replayer) evidence(ctx context.Context, operationID string) (Evidence, error) {
	rs, err := r.Store.OperationReviews(ctx, operationID)
	if err != nil {
		return Evidence{}, fmt.Errorf("reviews of %s: %w", operationID, err)
	}
	audit, err := r.Store.Audit(ctx, operationID)
	if err != nil {
		return Evidence{}, fmt.Errorf("audit of %s: %w", operationID, err)
	}
	return Evidence{Reviews: rs, Audit: audit}, nil
}

// Plan reads the operation's record and evidence and computes its plan.
func (r *Replayer) Plan(ctx context.Context, operationID string) (Plan, error) {
	rec, err := r.Store.Get(ctx, operationID)
	if err != nil {
		return Plan{}, fmt.Errorf("operation %s: %w", operationID, err)
	}
	ev, err := r.evidence(ctx, operationID)
	if err != nil {
		return Plan{}, err
	}
	return PlanFor(&rec, ev), nil
}

// maxOperatorLen bounds an operator's name.
const maxOperatorLen = 64

// CheckOperator is the one rule for the name an audit entry gives as its
// operator (the command line's --operator, the console's launch flag): a
// short name of letters, digits and . _ - @ + (a login or an e-mail
// address), so that a URL, a pasted secret or a second line never
// reaches the audit trail under that heading.
func CheckOperator(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: an operator name is required (--operator): every replay is audited", ErrBadRequest)
	case len(name) > maxOperatorLen:
		return fmt.Errorf("%w: operator name is %d bytes, at most %d", ErrBadRequest, len(name), maxOperatorLen)
	case strings.Contains(name, "://"):
		// Not echoed: a URL may carry a signature.
		return fmt.Errorf("%w: the operator name is a URL; give a name (letters, digits, . _ - @ +)", ErrBadRequest)
	}
	if i := strings.IndexFunc(name, func(c rune) bool {
		return !unicode.IsLetter(c) && !unicode.IsDigit(c) && !strings.ContainsRune("._-@+", c)
	}); i >= 0 {
		return fmt.Errorf("%w: operator name may hold only letters, digits and . _ - @ + (found %q at byte %d)", ErrBadRequest, []rune(name[i:])[0], i)
	}
	return nil
}

// requireReason refuses a request whose decision rests on the
// operator's word and comes without a --reason saying how they know: a
// confirmation that nothing was submitted (Genace cannot be searched,
// and the dispatch that follows charges again), and a dispatch that
// rests on such a confirmation (p.ReasonRequired). Replay applies it,
// so the command line and the console refuse alike.
func requireReason(req Request, p Plan) error {
	if err := jobKnown(req, p); err != nil {
		return err // the stronger refusal: no reason can override it
	}
	if strings.TrimSpace(req.Reason) != "" {
		return nil
	}
	switch {
	case req.ConfirmedNotSubmitted:
		return fmt.Errorf("%w: --confirmed-not-submitted needs --reason saying how you confirmed that Genace has no job for %s "+
			"(Genace cannot be searched); the dispatch that follows creates a new job and charges about %d credits",
			ErrBadRequest, req.OperationID, p.Credits)
	case req.Action == operation.ActionDispatch && p.ReasonRequired:
		return fmt.Errorf("%w: this dispatch needs --reason: it %s", ErrBadRequest, strings.TrimPrefix(p.Cost, "dispatch "))
	}
	return nil
}

// jobKnown refuses a confirmation that nothing was submitted while a job
// id is recorded for the operation.
func jobKnown(req Request, p Plan) error {
	if !req.ConfirmedNotSubmitted || len(p.KnownJobs) == 0 {
		return nil
	}
	k := p.KnownJobs[0]
	return fmt.Errorf("%w: job %s is recorded for %s (%s); look it up on Genace and attach it with --job-id %s",
		ErrJobKnown, k.JobID, req.OperationID, strings.Join(k.Sources, "; "), k.JobID)
}

// checkRequest refuses a request that is incomplete or contradictory
// before anything is read.
func checkRequest(req Request) error {
	if err := CheckOperator(req.Operator); err != nil {
		return err
	}
	if !message.ValidOperationID(req.OperationID) {
		return fmt.Errorf("%w: %q is not an operation id", ErrBadRequest, req.OperationID)
	}
	s, ok := steps[req.Action]
	if !ok {
		return fmt.Errorf("%w: action %s cannot be replayed", ErrBadRequest, req.Action)
	}
	return s.request(req)
}

// checkReconcile is the request rule of a reconciliation: exactly one
// piece of evidence, and a reason where it rests on the operator's word.
func checkReconcile(req Request) error {
	if (req.JobID == "") == !req.ConfirmedNotSubmitted {
		return fmt.Errorf("%w: reconcile needs exactly one of --job-id or --confirmed-not-submitted", ErrBadRequest)
	}
	if req.JobID != "" && !message.ValidJobID(req.JobID) {
		return fmt.Errorf("%w: %q is not a job id", ErrBadRequest, req.JobID)
	}
	if req.ForceUnverified && req.JobID == "" {
		return fmt.Errorf("%w: --force-unverified goes with --job-id only", ErrBadRequest)
	}
	if req.JobID != "" && req.Reason != "" && !req.ForceUnverified {
		return fmt.Errorf("%w: with --job-id, --reason explains an override; it goes with --force-unverified", ErrBadRequest)
	}
	if req.ForceUnverified && strings.TrimSpace(req.Reason) == "" {
		return fmt.Errorf("%w: --force-unverified needs --reason saying why the job is this operation's", ErrBadRequest)
	}
	if req.Reason != "" {
		return checkReason(req.Reason)
	}
	return nil
}

// checkReason keeps a reason fit for the audit trail: said, bounded, one
// printable line, and no URL (a signed URL is a secret).
func checkReason(reason string) error {
	switch {
	case strings.TrimSpace(reason) == "":
		return fmt.Errorf("%w: --reason is blank", ErrBadRequest)
	case len(reason) > maxReasonLen:
		return fmt.Errorf("%w: --reason is %d bytes, at most %d", ErrBadRequest, len(reason), maxReasonLen)
	case strings.Contains(reason, "://"):
		return fmt.Errorf("%w: --reason must not contain a URL (it may carry a signature); cite a ticket instead", ErrBadRequest)
	case strings.IndexFunc(reason, func(c rune) bool { return !unicode.IsPrint(c) }) >= 0:
		return fmt.Errorf("%w: --reason must be one line of printable text", ErrBadRequest)
	}
	return nil
}

// Replay runs one operator decision on one operation. It changes nothing
// unless every check passes, and its record update and audit entry are one
// transaction conditioned on the revision the plan was computed from.
func (r *Replayer) Replay(ctx context.Context, req Request) (Result, error) {
	if err := checkRequest(req); err != nil {
		return Result{}, err
	}
	rec, err := r.Store.Get(ctx, req.OperationID)
	if err != nil {
		return Result{}, fmt.Errorf("replay %s: %w", req.OperationID, err)
	}
	ev, err := r.evidence(ctx, req.OperationID)
	if err != nil {
		return Result{}, fmt.Errorf("replay %s: %w", req.OperationID, err)
	}
	plan := PlanFor(&rec, ev)
	if plan.Recommendation.Action != req.Action {
		return Result{}, fmt.Errorf("%w: you asked for %s, the plan for %s at revision %d (phase %s) is %s: %s",
			ErrActionMismatch, req.Action, req.OperationID, rec.Revision, rec.Phase, plan.Recommendation.Action, plan.Recommendation.Reason)
	}
	for _, c := range plan.Checks {
		if !c.OK {
			return Result{}, fmt.Errorf("%w: %s: %s", ErrNotReady, c.Name, c.Detail)
		}
	}
	if err := requireReason(req, plan); err != nil {
		return Result{}, err
	}
	if req.ConfirmedNotSubmitted && r.Search != nil {
		if jobs := r.Search.JobsForOperation(req.OperationID); len(jobs) > 0 {
			return Result{}, fmt.Errorf("%w: Genace holds job %s for %s (found on this run's saved simulator); attach it with --job-id %s",
				ErrJobKnown, strings.Join(jobs, ", "), req.OperationID, jobs[0])
		}
	}
	var verification string
	if req.JobID != "" {
		if verification, err = r.verifyJob(ctx, req); err != nil {
			return Result{}, fmt.Errorf("replay %s: %w", req.OperationID, err)
		}
	}
	now := r.Clock.Now()
	res := Result{Before: rec}
	s := steps[req.Action] // checkRequest refused an action without one
	ch, err := s.apply(rec, req, now)
	if err != nil {
		return Result{}, fmt.Errorf("replay %s: %w", req.OperationID, err)
	}
	next := ch.next
	entry := review.AuditEntry{
		OperationID: rec.OperationID, Operator: req.Operator, Action: req.Action, Decision: ch.decision,
		FromPhase: rec.Phase, ToPhase: next.Phase, FromRevision: rec.Revision, Revision: rec.Revision + 1, At: now,
		RemoteJobID: req.JobID, Verification: verification, Reason: req.Reason, Credits: ch.credits,
	}
	if s.auditOnly {
		// Nothing to change on a terminal record (it is never written
		// again): the entry is appended at its revision, conditioned on
		// the record still standing there.
		entry.Revision = rec.Revision
		if err := r.Store.AppendAudit(ctx, entry); err != nil {
			return Result{}, fmt.Errorf("replay %s: audit the acknowledgement: %w", req.OperationID, err)
		}
		res.After, res.Entry, res.Decision = rec, entry, ch.decision
		res.Closed, res.Kept, err = r.closeResolved(ctx, ev.Reviews, rec, req.Operator, now)
		return res, err
	}
	next.LastAppliedMessageID = ""
	saved, err := r.Store.UpdateWithAudit(ctx, next, rec.Revision, entry)
	if errors.Is(err, store.ErrConflict) {
		return Result{}, fmt.Errorf("replay %s: the record moved since it was read (revision %d); run plan again: %w", req.OperationID, rec.Revision, err)
	}
	if err != nil {
		return Result{}, fmt.Errorf("replay %s: %w", req.OperationID, err)
	}
	res.After, res.Entry, res.Changed, res.Decision = saved, entry, true, ch.decision
	if env, _, ok := worker.FollowUpOf(&saved, 0, now); ok {
		res.Sent = &env
		if r.Sender != nil {
			route, err := r.Sender.Send(ctx, env, 0)
			if err != nil {
				// The record keeps the follow-up scheduled; the sweep re-arms it.
				res.SendErr = err.Error()
			}
			res.Route = route
		}
	}
	res.Closed, res.Kept, err = r.closeResolved(ctx, ev.Reviews, saved, req.Operator, now)
	return res, err
}

// verifyJob checks an operator's job id before it is written: no other
// operation may hold or claim it (never overridable: two operations must
// not share one job), and Genace must show the job naming this
// operation, unless the request forces it. It returns the audit entry's
// Verification.
func (r *Replayer) verifyJob(ctx context.Context, req Request) (string, error) {
	refs, err := r.Store.JobRefs(ctx, req.JobID)
	if err != nil {
		return "", fmt.Errorf("look up holders of job %s: %w", req.JobID, err)
	}
	for _, ref := range refs {
		if ref.OperationID != req.OperationID {
			where := string(ref.Kind)
			if ref.Key != "" {
				where += " " + ref.Key
			}
			return "", fmt.Errorf("%w: job %s is already held by operation %s (%s)", ErrJobHeld, req.JobID, ref.OperationID, where)
		}
	}
	verification, refusal := r.lookUp(ctx, req.OperationID, req.JobID)
	if refusal != nil && !req.ForceUnverified {
		return "", fmt.Errorf("%w: %w (--force-unverified --reason ... overrides this, audited)", ErrUnverified, refusal)
	}
	return verification, nil
}

// lookUp GETs the job on Genace. It returns what the audit entry says of
// the job, and why it does not count as verified (nil if it does).
func (r *Replayer) lookUp(ctx context.Context, operationID, jobID string) (string, error) {
	if r.Genace == nil {
		return "unverified: no Genace client configured", errors.New("no Genace configured to look the job up (--genace-url and --genace-key, or GENACE_BASE_URL and GENACE_API_KEY)")
	}
	job, err := r.Genace.Get(ctx, jobID, 0, lookupTimeout)
	if errors.Is(err, genace.ErrNotFound) {
		return "unverified: no such job on Genace", fmt.Errorf("no such job on Genace: %s", jobID)
	}
	if err != nil {
		// The client's errors carry no URL or key; the audit gets only a
		// category.
		return "unverified: the Genace lookup failed", fmt.Errorf("the Genace lookup of %s failed: %w", jobID, err)
	}
	switch named := job.Metadata["operation_id"]; named {
	case operationID:
		return Verified, nil
	case "":
		return "unverified: the job has no metadata.operation_id", fmt.Errorf("job %s has no metadata.operation_id on Genace", jobID)
	default:
		return "unverified: the job names operation " + named, fmt.Errorf("job %s names operation %s on Genace, not %s", jobID, named, operationID)
	}
}

// unresolved says why a replay that left the record as after does not
// resolve an open review ("" if it does): the review names a job the
// record does not hold (it may be the only trace of that job), or it is
// about a revision after the one this replay read and wrote.
func unresolved(rv review.Record, after operation.Record) string {
	switch {
	case rv.RemoteJobID != "" && rv.RemoteJobID != after.RemoteJobID:
		return "names job " + rv.RemoteJobID + ", which the record does not hold"
	case rv.Revision > after.Revision:
		return "about revision " + strconv.FormatInt(rv.Revision, 10) + ", later than this replay's"
	}
	return ""
}

// closeResolved closes the open reviews (as read for the plan) that the
// replay resolved, and reports the others. A review written since was
// not read, so it stays open.
func (r *Replayer) closeResolved(ctx context.Context, reviews []review.Record, after operation.Record, operator string, now time.Time) ([]string, []KeptReview, error) {
	var closed []string
	var kept []KeptReview
	for _, rv := range reviews {
		if !rv.Open {
			continue
		}
		if why := unresolved(rv, after); why != "" {
			kept = append(kept, KeptReview{ID: rv.ID, Why: why})
			continue
		}
		if err := r.Store.CloseReview(ctx, rv.ID, operator, now); err != nil {
			return closed, kept, fmt.Errorf("close review %s: %w", rv.ID, err)
		}
		closed = append(closed, rv.ID)
	}
	return closed, kept, nil
}
