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
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/followup"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store"
)

// Store is what replay needs of persistence.
type Store interface {
	Get(ctx context.Context, operationID string) (operation.Record, error)
	UpdateWithAudit(ctx context.Context, rec operation.Record, expected int64, entry review.AuditEntry) (operation.Record, error)
	OpenReviews(ctx context.Context) ([]review.Record, error)
	CloseReview(ctx context.Context, id, by string, at time.Time) error
}

// Sender delivers the follow-up message a replay schedules.
type Sender interface {
	Send(ctx context.Context, env message.Envelope, delay time.Duration) (schedule.Route, error)
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
	// Checks are the preconditions for the action, each with its result.
	Checks []operation.Check `json:"checks"`
	// Ready says whether the action may run as the record stands.
	Ready bool `json:"ready"`
	// Needs says what the operator must add (reconciliation evidence).
	Needs string `json:"needs,omitempty"`
}

// PlanFor computes the plan for a record.
func PlanFor(rec *operation.Record) Plan {
	p := Plan{
		OperationID: rec.OperationID, Revision: rec.Revision, Phase: rec.Phase, RemoteJobID: rec.RemoteJobID,
		Settlement: rec.Settlement, Recommendation: operation.Recommend(rec),
	}
	if rec.Remote != nil {
		p.RemoteState = rec.Remote.State
	}
	check := func(name string, ok bool, detail string) {
		p.Checks = append(p.Checks, operation.Check{Name: name, OK: ok, Detail: detail})
	}
	switch p.Recommendation.Action {
	case operation.ActionDispatch:
		// The only action that can create (and pay for) work: the full
		// allowance review.
		p.Checks = operation.SubmitChecks(rec)
		check("never_submitted", rec.RemoteJobID == "" && rec.Claim == nil, fmt.Sprintf("job id %q, claim %v", rec.RemoteJobID, rec.Claim != nil))
	case operation.ActionObserve, operation.ActionInspectAccounting:
		check("job_id_known", rec.RemoteJobID != "", "job "+rec.RemoteJobID)
	case operation.ActionDeliver:
		check("job_id_known", rec.RemoteJobID != "", "job "+rec.RemoteJobID)
		want := 0
		if rec.Remote != nil {
			want = len(rec.Remote.Outputs)
		}
		check("outputs_described", want > 0, fmt.Sprintf("%d outputs, %d stored", want, len(rec.Deliveries)))
	case operation.ActionReconcile:
		check("uncertain", rec.Phase == operation.Uncertain,
			fmt.Sprintf("phase %s (a submitting claim may still be mid-POST: wait for the sweep to mark it uncertain)", rec.Phase))
		p.Needs = "--job-id ID (the job exists on Genace) or --confirmed-not-submitted (Genace has no job for this operation)"
	case operation.ActionAcknowledge:
		check("terminal", rec.Terminal(), string(rec.Phase))
	}
	p.Ready = true
	for _, c := range p.Checks {
		p.Ready = p.Ready && c.OK
	}
	return p
}

// Request is one operator decision.
type Request struct {
	OperationID string
	Action      operation.Action
	Operator    string
	// JobID attaches a job the operator found (reconcile only).
	JobID string
	// ConfirmedNotSubmitted says Genace has no job for it (reconcile only).
	ConfirmedNotSubmitted bool
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
)

// Replayer carries out replays.
type Replayer struct {
	Store  Store
	Sender Sender // nil: the follow-up stays scheduled on the record
	Clock  clock.Clock
}

// Replay runs one operator decision on one operation. It changes nothing
// unless every check passes, and its record update and audit entry are one
// transaction conditioned on the revision the plan was computed from.
func (r *Replayer) Replay(ctx context.Context, req Request) (Result, error) {
	if strings.TrimSpace(req.Operator) == "" {
		return Result{}, fmt.Errorf("%w: an operator name is required (--operator)", ErrBadRequest)
	}
	if !message.ValidOperationID(req.OperationID) {
		return Result{}, fmt.Errorf("%w: %q is not an operation id", ErrBadRequest, req.OperationID)
	}
	if req.Action == operation.ActionReconcile {
		if (req.JobID == "") == !req.ConfirmedNotSubmitted {
			return Result{}, fmt.Errorf("%w: reconcile needs exactly one of --job-id or --confirmed-not-submitted", ErrBadRequest)
		}
		if req.JobID != "" && !message.ValidJobID(req.JobID) {
			return Result{}, fmt.Errorf("%w: %q is not a job id", ErrBadRequest, req.JobID)
		}
	} else if req.JobID != "" || req.ConfirmedNotSubmitted {
		return Result{}, fmt.Errorf("%w: --job-id and --confirmed-not-submitted go with --action reconcile only", ErrBadRequest)
	}
	rec, err := r.Store.Get(ctx, req.OperationID)
	if err != nil {
		return Result{}, fmt.Errorf("replay %s: %w", req.OperationID, err)
	}
	plan := PlanFor(&rec)
	if plan.Recommendation.Action != req.Action {
		return Result{}, fmt.Errorf("%w: you asked for %s, the plan for %s at revision %d (phase %s) is %s: %s",
			ErrActionMismatch, req.Action, req.OperationID, rec.Revision, rec.Phase, plan.Recommendation.Action, plan.Recommendation.Reason)
	}
	for _, c := range plan.Checks {
		if !c.OK {
			return Result{}, fmt.Errorf("%w: %s: %s", ErrNotReady, c.Name, c.Detail)
		}
	}
	now := r.Clock.Now()
	res := Result{Before: rec}
	if req.Action == operation.ActionAcknowledge {
		// Nothing to change on a terminal record (it is never written
		// again); closing its reviews records who acknowledged it.
		res.After, res.Decision = rec, "acknowledged"
		res.Closed, err = r.closeReviews(ctx, rec.OperationID, req.Operator, now)
		return res, err
	}
	next, decision, err := apply(rec, req, now)
	if err != nil {
		return Result{}, fmt.Errorf("replay %s: %w", req.OperationID, err)
	}
	entry := review.AuditEntry{
		OperationID: rec.OperationID, Operator: req.Operator, Action: req.Action, Decision: decision,
		FromPhase: rec.Phase, ToPhase: next.Phase, FromRevision: rec.Revision, Revision: rec.Revision + 1, At: now,
	}
	next.LastAppliedMessageID = ""
	saved, err := r.Store.UpdateWithAudit(ctx, next, rec.Revision, entry)
	if errors.Is(err, store.ErrConflict) {
		return Result{}, fmt.Errorf("replay %s: the record moved since it was read (revision %d); run plan again: %w", req.OperationID, rec.Revision, err)
	}
	if err != nil {
		return Result{}, fmt.Errorf("replay %s: %w", req.OperationID, err)
	}
	res.After, res.Entry, res.Changed, res.Decision = saved, entry, true, decision
	if env, _, ok := followup.Of(&saved, 0, now); ok {
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
	res.Closed, err = r.closeReviews(ctx, rec.OperationID, req.Operator, now)
	return res, err
}

// apply computes the record an action produces.
func apply(rec operation.Record, req Request, now time.Time) (operation.Record, string, error) {
	schedule := func(r operation.Record, a message.Action) operation.Record {
		r.Schedule = &operation.NextAction{Action: string(a), Due: now}
		return r
	}
	switch req.Action {
	case operation.ActionDispatch:
		c := rec.Clone()
		c.Timestamps.Updated = now
		return schedule(c, message.SubmitGeneration), "dispatch", nil
	case operation.ActionObserve, operation.ActionInspectAccounting:
		c, err := operation.ResumeObservation(rec, now)
		if err != nil {
			return operation.Record{}, "", err
		}
		return schedule(c, message.ObserveGeneration), string(req.Action), nil
	case operation.ActionDeliver:
		c := rec.Clone()
		c.Timestamps.Updated = now
		c.Parked = nil
		c.Counters.ReadFailures = 0
		return schedule(c, message.DeliverArtifacts), "deliver", nil
	case operation.ActionReconcile:
		if req.ConfirmedNotSubmitted {
			c, err := operation.ConfirmNotSubmitted(rec, now)
			// Dispatch stays a separate decision that passes the allowance review.
			return c, "confirmed-not-submitted", err
		}
		c, err := operation.Accept(rec, req.JobID, nil, now)
		if err != nil {
			return operation.Record{}, "", err
		}
		return schedule(c, message.ObserveGeneration), "attach-job", nil
	}
	return operation.Record{}, "", fmt.Errorf("%w: action %s cannot be replayed", ErrBadRequest, req.Action)
}

func (r *Replayer) closeReviews(ctx context.Context, operationID, operator string, now time.Time) ([]string, error) {
	open, err := r.Store.OpenReviews(ctx)
	if err != nil {
		return nil, fmt.Errorf("list reviews: %w", err)
	}
	var closed []string
	for _, rv := range open {
		if rv.OperationID != operationID {
			continue
		}
		if err := r.Store.CloseReview(ctx, rv.ID, operator, now); err != nil {
			return closed, fmt.Errorf("close review %s: %w", rv.ID, err)
		}
		closed = append(closed, rv.ID)
	}
	return closed, nil
}
