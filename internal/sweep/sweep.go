// Package sweep is the scheduled safety net: it reads only the records in
// the sparse index and re-arms those whose next action is overdue — a
// lost observation or delivery chain — moves submission claims older
// than the submit timeout to uncertain, for reconciliation, and sends the
// completion events still unsent after its horizon. It never POSTs.
package sweep

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/worker"
)

// Store is what the sweep needs of persistence.
type Store interface {
	Due(ctx context.Context, t time.Time, limit int) ([]operation.Record, error)
	Get(ctx context.Context, operationID string) (operation.Record, error)
	Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error)
	PutReview(ctx context.Context, r review.Record) (bool, error)
	OpenReviewsOf(ctx context.Context, operationID string) ([]review.Record, error)
	ResolveReview(ctx context.Context, id, by, reason string, at time.Time) error
}

// Config tunes the sweep.
type Config struct {
	// ClaimTimeout: a submitting claim older than this has no live worker
	// (it must exceed the submit function's timeout).
	ClaimTimeout time.Duration
	// OverdueAfter: a next action this late is taken as lost.
	OverdueAfter time.Duration
	// Limit bounds the records read per run.
	Limit int
	// Hold is observe's OBSERVE_HOLD and MaxConcurrency the template's
	// MaximumConcurrency of observe's mapping: Fit's bounds, when the
	// sweep has a Capacity.
	Hold           int
	MaxConcurrency int
}

// Defaults fills zero fields.
func (c Config) Defaults() Config {
	c.ClaimTimeout = cmp.Or(c.ClaimTimeout, 2*time.Minute)
	c.OverdueAfter = cmp.Or(c.OverdueAfter, 5*time.Minute)
	c.Limit = cmp.Or(c.Limit, 500)
	c.Hold = cmp.Or(c.Hold, 1)
	c.MaxConcurrency = cmp.Or(c.MaxConcurrency, MinConcurrency)
	return c
}

// Events sends completion events (notify.Publisher).
type Events interface {
	Send(ctx context.Context, rec operation.Record) (operation.Record, error)
	Defer(ctx context.Context, rec operation.Record, at time.Time) (operation.Record, error)
}

// EventRetry is how long the sweep leaves an event whose send failed
// before it tries again: the record sorts behind the sweep's due work
// meanwhile, so a sink that keeps refusing never crowds out a re-arm.
const EventRetry = 5 * time.Minute

// Deps is what the sweep works with.
type Deps struct {
	Store Store
	// Sender delivers the messages of re-armed chains.
	Sender worker.Sender
	// Events sends the unsent completion events it finds (nil: none are
	// sent, and such records stay in the index).
	Events Events
	// Capacity, if set, is observe's queue and mapping: each run fits
	// the mapping's concurrency to the queue's load (Fit).
	Capacity Capacity
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *metrics.Emitter
}

// Result counts what one run did.
type Result struct {
	Read          int `json:"read"`
	Rearmed       int `json:"rearmed"`
	ClaimsExpired int `json:"claims_expired"`
	Skipped       int `json:"skipped"`
	// DispatchesDropped counts prepared records whose overdue dispatch the
	// allowance no longer covers, taken out of the index with a review.
	DispatchesDropped int `json:"dispatches_dropped"`
	// EventsSent and EventsFailed count the unsent completion events the
	// run sent, and those whose send failed again (deferred EventRetry).
	EventsSent   int `json:"events_sent"`
	EventsFailed int `json:"events_failed"`
	// ObserveConcurrency is observe's mapping's concurrency as the run
	// left it (0: the sweep has no Capacity, or its read failed).
	ObserveConcurrency int `json:"observe_concurrency,omitempty"`
}

// did is what the sweep did with one record; its text is the "did" of the
// log line.
type did string

const (
	didSkip         did = "skipped"
	didRearm        did = "rearmed"
	didExpireClaim  did = "claim_expired"
	didDropDispatch did = "dispatch_dropped"
)

// Sweeper runs sweeps.
type Sweeper struct {
	store    Store
	events   Events
	capacity Capacity
	w        *worker.Worker
	clk      clock.Clock
	log      *slog.Logger
	metrics  *metrics.Emitter
	cfg      Config
}

// New wires a sweeper.
func New(d Deps, cfg Config) *Sweeper {
	return &Sweeper{store: d.Store, events: d.Events, capacity: d.Capacity, clk: d.Clock, log: d.Log, metrics: d.Metrics, cfg: cfg.Defaults(),
		// A write without a verdict is sent again once, at once: it may
		// have been applied, and sent again it is written or known as this
		// run's (store.Update), so a record that leaves the index with it
		// (uncertain) still gets its review from this sweep.
		w: worker.New(worker.Deps{Store: d.Store, Sender: d.Sender, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics},
			worker.Config{Name: "sweep", StaleWriteAction: "sweep", Resends: 1, Source: review.SourceSweep})}
}

// Handle is the Lambda entry point for the scheduled event (its content
// does not matter).
func (s *Sweeper) Handle(ctx context.Context, _ any) (Result, error) { return s.Sweep(ctx) }

// Sweep runs once. Errors on single records are logged and counted; the
// run goes on, and the next run retries them.
func (s *Sweeper) Sweep(ctx context.Context) (Result, error) {
	now := s.clk.Now()
	// This run is its writes' writer, so a write it sends again (below)
	// is known as its own.
	ctx = store.WithWriter(ctx, "sweep@"+now.UTC().Format(time.RFC3339Nano))
	horizon := now.Add(-min(s.cfg.ClaimTimeout, s.cfg.OverdueAfter))
	due, err := s.store.Due(ctx, horizon, s.cfg.Limit)
	if err != nil {
		// The fit needs no table: a throttled or failing one must not
		// freeze observe's concurrency.
		res := Result{}
		n, ferr := s.fit(ctx)
		res.ObserveConcurrency = n
		return res, errors.Join(fmt.Errorf("sweep: read due records: %w", err), ferr)
	}
	var res Result
	var errs []error
	for _, stale := range due {
		res.Read++
		// The index lags the table: decide on a fresh read.
		rec, err := s.store.Get(ctx, stale.OperationID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if rec, err = s.event(ctx, rec, horizon, now, &res); err != nil {
			errs = append(errs, err)
			continue
		}
		done, err := s.one(ctx, rec, now)
		switch {
		case err != nil:
			errs = append(errs, err)
		case done == didRearm:
			res.Rearmed++
		case done == didExpireClaim:
			res.ClaimsExpired++
		case done == didDropDispatch:
			res.DispatchesDropped++
		default:
			res.Skipped++
		}
	}
	n, err := s.fit(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	if res.ObserveConcurrency = n; n > 0 {
		s.metrics.Count("ObserveConcurrency", float64(n))
	}
	s.metrics.Count("SweepRearmed", float64(res.Rearmed))
	s.metrics.Count("SweepClaimsExpired", float64(res.ClaimsExpired))
	s.metrics.Count("SweepDispatchesDropped", float64(res.DispatchesDropped))
	s.log.InfoContext(ctx, "sweep done", "read", res.Read, "rearmed", res.Rearmed, "claims_expired", res.ClaimsExpired,
		"dispatches_dropped", res.DispatchesDropped, "events_sent", res.EventsSent, "events_failed", res.EventsFailed,
		"skipped", res.Skipped, "observe_concurrency", res.ObserveConcurrency, "errors", len(errs))
	if len(errs) > 0 {
		return res, fmt.Errorf("sweep: %d failed: %w", len(errs), errors.Join(errs...))
	}
	return res, nil
}

// event sends rec's completion event when it is still unsent at the
// horizon: its writer's send failed, or the writer died between the write
// and the send. One that fails again is deferred EventRetry. It returns
// the record as it stands, for the rest of the sweep's judgement.
func (s *Sweeper) event(ctx context.Context, rec operation.Record, horizon, now time.Time, res *Result) (operation.Record, error) {
	ev, unsent := rec.UnsentEvent()
	if s.events == nil || !unsent || ev.Due.After(horizon) {
		return rec, nil
	}
	sent, err := s.events.Send(ctx, rec)
	if err == nil {
		res.EventsSent++
		return sent, nil
	}
	res.EventsFailed++
	if deferred, derr := s.events.Defer(ctx, rec, now.Add(EventRetry)); derr == nil {
		return deferred, nil
	}
	// Not deferred: the next run tries again; the rest of the judgement
	// goes on from the record as read.
	return rec, nil
}

func (s *Sweeper) one(ctx context.Context, rec operation.Record, now time.Time) (did, error) {
	at, ok := rec.SweepDue()
	if !ok {
		return didSkip, nil
	}
	if rec.Phase == operation.PhaseSubmitting {
		if now.Sub(at) < s.cfg.ClaimTimeout {
			return didSkip, nil
		}
		next, err := operation.MarkUncertain(rec, "claim_timed_out", now)
		if err != nil {
			return "", err
		}
		// The review first: the uncertain record leaves the index, so a
		// sweep that died between the write and the review would leave
		// it with no one told. Written first, a crash leaves the claim
		// due, and the next run writes the record (the review once).
		// Should the claim settle first after all (it cannot while
		// ClaimTimeout exceeds submit's timeout), the handler's write
		// that carries the job id or ends the operation closes it.
		return s.commit(ctx, rec, didExpireClaim, worker.Write{Next: next, ReviewFirst: true})
	}
	if now.Sub(at) < s.cfg.OverdueAfter {
		return didSkip, nil
	}
	if rec.Phase == operation.PhasePrepared {
		if c, bad := operation.FailedCheck(operation.SubmitChecks(&rec)); bad {
			return s.dropDispatch(ctx, rec, c, now)
		}
	}
	// A fresh revision makes any late copy of the lost message stale, so
	// re-arming never forks the chain.
	next := rec.Clone()
	next.Schedule.Due = now
	next.Timestamps.Updated = now
	return s.commit(ctx, rec, didRearm, worker.Write{Next: next})
}

// dropDispatch takes a dispatch the allowance no longer covers (the user
// changed the request after a 429, the budget ran out) out of the index.
// Only the application can re-authorize it: re-arming it would only be
// acknowledged as obsolete again, and left in place its old due time
// would sort it first in every run, so that Limit of them would keep the
// sweep from ever reaching a lost chain again. An operator is told, by a
// review keyed by the revision judged. The review is written first: a
// crash before the record's write leaves the record due, and the next run
// writes both (the review once). If the record moved meanwhile, the review
// stays open until a handler's write gives the operation a job id or ends
// it (worker.Resolves), or an operator closes it.
func (s *Sweeper) dropDispatch(ctx context.Context, rec operation.Record, failed operation.Check, now time.Time) (did, error) {
	r := review.ForRecord(DroppedDispatchID(rec.OperationID, rec.Revision), review.SourceSweep, &rec, now)
	r.ErrorCategory = "precondition_" + failed.Name
	r.Reason = fmt.Sprintf("dispatch dropped by the sweep: precondition %s failed (%s); re-authorize the request, then dispatch", failed.Name, failed.Detail)
	next := rec.Clone()
	next.Schedule = nil // the dispatch it named is obsolete: out of the index
	next.Timestamps.Updated = now
	done, err := s.commit(ctx, rec, didDropDispatch, worker.File{Review: r, What: "review of the dropped dispatch",
		Then: worker.Write{Next: next, Once: true, What: "drop dispatch"}})
	if done == didDropDispatch {
		s.log.WarnContext(ctx, "sweep dropped a dispatch the allowance no longer covers", "operation_id", rec.OperationID,
			"precondition", failed.Name, "review_id", r.ID)
	}
	return done, err
}

// DroppedDispatchID is the review id for the dispatch the sweep dropped
// from an operation at a revision, so a retried run writes it once.
func DroppedDispatchID(operationID string, revision int64) string {
	return fmt.Sprintf("dispatch:%s:r%d", operationID, revision)
}

// commit has the worker carry out the sweep's decision on rec, as the
// sweep's message ("sweep" is the writes' LastAppliedMessageID). A record
// that moved on by itself meanwhile is skipped (a lost race): the next
// run judges what it is now.
func (s *Sweeper) commit(ctx context.Context, rec operation.Record, done did, d worker.Decision) (did, error) {
	outcome, err := s.w.Commit(ctx, worker.Turn{Msg: events.SQSMessage{MessageId: "sweep"}, Rec: rec}, d)
	if err != nil {
		return "", err
	}
	if outcome == worker.OutcomeLostRace {
		return didSkip, nil
	}
	s.log.WarnContext(ctx, "sweep acted", "operation_id", rec.OperationID, "did", string(done), "revision", rec.Revision+1)
	return done, nil
}
