package replay

import (
	"fmt"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
)

// step is everything replay does for one recovery action. steps holds one
// per operation.Actions entry, so that adding an action is one entry here
// (and its row of operation.Recommend and a fixture in testdata/recovery);
// TestEveryActionIsCovered fails on an action that lacks a part.
type step struct {
	// plan adds the action's checks to p, and what the operator must
	// add (Needs) and what the decision costs (Cost, Credits).
	plan func(p *Plan, rec *operation.Record, ev Evidence)
	// request refuses a request whose flags do not fit the action,
	// before anything is read.
	request func(req Request) error
	// apply computes what the replay writes.
	apply func(rec operation.Record, req Request, now time.Time) (change, error)
	// explain says what carrying the action out reads, copies or
	// submits, in the operator's terms (the console's effects).
	explain func(rec *operation.Record, p Plan, operator string) []string
	// auditOnly: the record is final and never written again; the audit
	// entry is appended at its revision, conditioned on the record still
	// standing there.
	auditOnly bool
}

// change is what an action's apply computes: the record to write, the
// audit entry's decision, and the credits the decision accounts for.
type change struct {
	next     operation.Record
	decision string
	credits  int64
}

// steps is the recovery table: one step per operation.Actions entry.
var steps = map[operation.Action]step{
	operation.ActionDispatch: {
		plan: func(p *Plan, rec *operation.Record, ev Evidence) {
			// The only action that can create (and pay for) work: the
			// full allowance review.
			p.Checks = operation.SubmitChecks(rec)
			accounted, posts := PostsAccounted(rec, ev.Audit)
			p.check("never_submitted", len(p.KnownJobs) == 0 && rec.Claim == nil && accounted,
				fmt.Sprintf("known jobs %v, claim %v; %s", jobIDs(p.KnownJobs), rec.Claim != nil, posts))
			p.Credits = rec.EstimatedCredits
			p.Cost = "dispatch " + dispatchCost(rec)
			if n := confirmations(ev.Audit); n > 0 {
				// The never_submitted check rests on the operator's word:
				// a wrong confirmation makes this the second paid job.
				p.ReasonRequired = true
				p.Cost += fmt.Sprintf("; it rests on %d operator confirmation(s) that a POST created nothing: if one was wrong, this is a second paid job", n)
				p.Needs = "--reason TEXT (why dispatching again is right; kept in the audit entry)"
			}
		},
		request: reasonAllowed,
		apply: func(rec operation.Record, _ Request, now time.Time) (change, error) {
			c := rec.Clone()
			c.Timestamps.Updated = now
			return change{scheduled(c, message.ActionSubmitGeneration, now), "dispatch", rec.EstimatedCredits}, nil
		},
		explain: func(rec *operation.Record, p Plan, _ string) []string {
			out := []string{fmt.Sprintf("Schedules submit_generation: one POST to Genace for model %s, which creates a job and charges up to %d credits (estimate; budget %d).",
				rec.Model, rec.EstimatedCredits, rec.BudgetCredits)}
			if p.ReasonRequired {
				// The line above says the charge; the cost adds what the
				// operator's confirmations risk.
				out = append(out, costLine(p)...)
			}
			return out
		},
	},
	operation.ActionObserve:           observing,
	operation.ActionInspectAccounting: observing,
	operation.ActionDeliver: {
		plan: func(p *Plan, rec *operation.Record, _ Evidence) {
			p.check("job_id_known", rec.RemoteJobID != "", "job "+rec.RemoteJobID)
			p.check("outputs_described", outputs(rec) > 0, fmt.Sprintf("%d outputs, %d stored", outputs(rec), len(rec.Deliveries)))
		},
		request: reasonRefused,
		apply: func(rec operation.Record, _ Request, now time.Time) (change, error) {
			c := rec.Clone()
			c.Timestamps.Updated = now
			c.Parked = nil
			c.Counters.ReadFailures = 0
			return change{next: scheduled(c, message.ActionDeliverArtifacts, now), decision: "deliver"}, nil
		},
		explain: func(rec *operation.Record, _ Plan, _ string) []string {
			return []string{fmt.Sprintf("Schedules deliver_artifacts: copies the %d outputs of job %s from Genace into storage (see Outputs), checking each sha256.", outputs(rec), rec.RemoteJobID)}
		},
	},
	operation.ActionReconcile: {
		plan: func(p *Plan, rec *operation.Record, _ Evidence) {
			p.check("uncertain", rec.Phase == operation.PhaseUncertain,
				fmt.Sprintf("phase %s (a submitting claim may still be mid-POST: wait for the sweep to mark it uncertain)", rec.Phase))
			p.Needs = "--job-id ID (the job exists on Genace) or --confirmed-not-submitted --reason TEXT (Genace has no job for this operation, and how you know)"
			p.Credits = rec.EstimatedCredits
			p.Cost = "--confirmed-not-submitted claims that none of the record's POSTs created a job on Genace (Genace cannot be searched: " +
				"say in --reason how you confirmed it); the dispatch that follows " + dispatchCost(rec)
			if len(p.KnownJobs) > 0 {
				p.Cost = ""
				p.Needs = fmt.Sprintf("--job-id ID: job %s is recorded for this operation (see known jobs); "+
					"--confirmed-not-submitted is refused while a job id is known", strings.Join(jobIDs(p.KnownJobs), ", "))
			}
		},
		request: checkReconcile,
		apply: func(rec operation.Record, req Request, now time.Time) (change, error) {
			if req.ConfirmedNotSubmitted {
				c, err := operation.ConfirmNotSubmitted(rec, now)
				// Dispatch stays a separate decision that passes the allowance review.
				return change{next: c, decision: DecisionConfirmedNotSubmitted}, err
			}
			c, err := operation.Accept(rec, req.JobID, nil, now)
			if err != nil {
				return change{}, err
			}
			return change{next: scheduled(c, message.ActionObserveGeneration, now), decision: DecisionAttachJob}, nil
		},
		explain: func(_ *operation.Record, p Plan, _ string) []string {
			return append([]string{
				"With a job id: looks the job up on Genace first (GET; it must exist and name this operation, and no other operation may hold it), then attaches it and schedules observe_generation.",
				"Confirmed not submitted: records that Genace has no job for this operation and puts it back to prepared. Nothing is sent to Genace; a dispatch stays a separate decision.",
			}, costLine(p)...)
		},
	},
	operation.ActionSettleOutside: {
		plan: func(p *Plan, rec *operation.Record, _ Evidence) {
			p.check("refund_unresolved", rec.Phase == operation.PhaseFailed && rec.Settlement != operation.SettlementSettled,
				fmt.Sprintf("phase %s, settlement %s", rec.Phase, rec.Settlement))
			p.Credits = rec.Outstanding()
			p.ReasonRequired = true
			p.Cost = fmt.Sprintf("claims that accounting settled the %d credits Genace did not refund, outside Genace; the record becomes failed and settled (final) and its reviews close", p.Credits)
			p.Needs = "--reason TEXT (how accounting settled it: a ticket or reference; kept in the audit entry)"
		},
		request: func(req Request) error {
			if err := noEvidence(req); err != nil {
				return err
			}
			if strings.TrimSpace(req.Reason) == "" {
				return fmt.Errorf("%w: settle_outside needs --reason saying how accounting settled it (a ticket or reference)", ErrBadRequest)
			}
			return checkReason(req.Reason)
		},
		apply: func(rec operation.Record, _ Request, now time.Time) (change, error) {
			c, err := operation.SettleOutside(rec, now)
			return change{c, DecisionSettledOutside, rec.Outstanding()}, err
		},
		explain: func(_ *operation.Record, p Plan, _ string) []string {
			return append([]string{"Records that accounting settled the refund outside Genace: the record becomes failed and settled (final) and its reviews close. Nothing is sent to Genace."},
				costLine(p)...)
		},
	},
	operation.ActionAcknowledge: {
		plan: func(p *Plan, rec *operation.Record, _ Evidence) {
			p.check("terminal", rec.Terminal(), string(rec.Phase))
		},
		request: reasonRefused,
		apply: func(rec operation.Record, _ Request, _ time.Time) (change, error) {
			return change{next: rec, decision: DecisionAcknowledged}, nil
		},
		explain: func(_ *operation.Record, _ Plan, operator string) []string {
			return []string{fmt.Sprintf("Changes nothing on the record (it is final); closes its open reviews under the name %s.", operator)}
		},
		auditOnly: true,
	},
}

// observing is the step of the actions that GET the known job.
var observing = step{
	plan: func(p *Plan, rec *operation.Record, _ Evidence) {
		p.check("job_id_known", rec.RemoteJobID != "", "job "+rec.RemoteJobID)
	},
	request: reasonRefused,
	apply: func(rec operation.Record, req Request, now time.Time) (change, error) {
		c, err := operation.ResumeObservation(rec, now)
		if err != nil {
			return change{}, err
		}
		return change{next: scheduled(c, message.ActionObserveGeneration, now), decision: string(req.Action)}, nil
	},
	explain: func(rec *operation.Record, _ Plan, _ string) []string {
		return []string{fmt.Sprintf("Schedules observe_generation: reads job %s on Genace (GET; no charge).", rec.RemoteJobID)}
	},
}

// scheduled sets the follow-up the record expects now.
func scheduled(r operation.Record, a message.Action, now time.Time) operation.Record {
	r.Schedule = &operation.NextAction{Action: string(a), Due: now}
	return r
}

// outputs is the number of outputs Genace described for the record.
func outputs(rec *operation.Record) int {
	if rec.Remote == nil {
		return 0
	}
	return len(rec.Remote.Outputs)
}

// costLine says what the operator's word costs, as the command line's
// plan does (none when the plan has no cost).
func costLine(p Plan) []string {
	if p.Cost == "" {
		return nil
	}
	return []string{"Cost: " + p.Cost + "."}
}

// Explain says what a replay of the plan's action reads, copies or
// submits, in the operator's terms; operator is who the replay is
// audited as.
func Explain(rec *operation.Record, p Plan, operator string) []string {
	s, ok := steps[p.Recommendation.Action]
	if !ok {
		return nil
	}
	return s.explain(rec, p, operator)
}

// WritesRecord says whether a replay of the plan writes the record (and
// then sends its follow-up); an action that does not only appends its
// audit entry.
func (p Plan) WritesRecord() bool {
	return !steps[p.Recommendation.Action].auditOnly
}

// noEvidence refuses the reconciliation's flags on another action.
func noEvidence(req Request) error {
	if req.JobID != "" || req.ConfirmedNotSubmitted || req.ForceUnverified {
		return fmt.Errorf("%w: --job-id, --confirmed-not-submitted and --force-unverified go with --action reconcile only", ErrBadRequest)
	}
	return nil
}

// reasonRefused is the request rule of an action that rests on nothing
// the operator says.
func reasonRefused(req Request) error {
	if err := noEvidence(req); err != nil {
		return err
	}
	if req.Reason != "" {
		return fmt.Errorf("%w: --reason does not go with %s: it rests on nothing the operator says", ErrBadRequest, req.Action)
	}
	return nil
}

// reasonAllowed is the request rule of an action that may rest on the
// operator's word (requireReason says when it must).
func reasonAllowed(req Request) error {
	if err := noEvidence(req); err != nil {
		return err
	}
	if req.Reason != "" {
		return checkReason(req.Reason)
	}
	return nil
}
