package replay_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/replay"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/submit"
	"github.com/genjobs/genjobs/internal/sweep"
)

// acceptedUnwritable is the store failing every write of an accepted
// outcome, as a DynamoDB outage right after the 202 would: the submit
// handler then keeps the job id only in a review (keepJobID).
type acceptedUnwritable struct{ store.Store }

func (s acceptedUnwritable) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	if rec.Phase == operation.PhaseAccepted {
		return operation.Record{}, errors.New("injected: the table is unavailable")
	}
	return s.Store.Update(ctx, rec, expected)
}

// drive runs f while moving the manual clock to each timer it waits on
// (the handler's backoff between persist attempts).
func drive(clk *clock.Manual, f func()) {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	for {
		select {
		case <-done:
			return
		default:
		}
		if at, ok := clk.NextWaiter(); ok {
			clk.Set(at)
		} else {
			time.Sleep(time.Millisecond)
		}
	}
}

// Hole 4, end to end: the 202's job id lands only in review job:<id>;
// the sweep parks the claim as uncertain; the operator's reconciliation
// must not close that review or lead to a second POST.
func TestJobKeptOnlyInAReviewIsNeverPostedAgain(t *testing.T) {
	t.Parallel()
	for _, kind := range handlertest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewManual(handlertest.Start)
			st := handlertest.OpenStore(t, kind)
			sim, c := handlertest.Sim(t, clk, genacesim.Config{})
			out := &handlertest.Outbox{}
			log := slog.New(slog.DiscardHandler)
			ctx := context.Background()

			rec := handlertest.Create(t, st, handlertest.Prepared("op-kept"))
			broken := submit.New(submit.Deps{Store: acceptedUnwritable{st}, Genace: c, Extender: &handlertest.Extender{}, Sender: out, Clock: clk, Log: log, Metrics: metrics.Discard()}, submit.Config{})
			drive(clk, func() { _, _ = broken.Handle(ctx, handlertest.Event(t, clk.Now(), handlertest.Dispatch(rec))) })
			jobs := sim.JobsForOperation("op-kept")
			if len(jobs) != 1 {
				t.Fatalf("Genace jobs %v after the first dispatch, want 1", jobs)
			}
			job := jobs[0]
			kept, err := st.GetReview(ctx, "job:"+job)
			if err != nil || !kept.Open || kept.RemoteJobID != job {
				t.Fatalf("review job:%s = %+v, %v; the scenario needs keepJobID's review", job, kept, err)
			}
			if got := handlertest.Get(t, st, "op-kept"); got.RemoteJobID != "" || got.Phase != operation.PhaseSubmitting {
				t.Fatalf("record %s with job %q; the scenario needs the id missing from the record", got.Phase, got.RemoteJobID)
			}

			// The claim expires; the sweep leaves it for reconciliation.
			clk.Advance(3 * time.Minute)
			if _, err := sweep.New(sweep.Deps{Store: st, Sender: out, Clock: clk, Log: log, Metrics: metrics.Discard()}, sweep.Config{}).Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			if got := handlertest.Get(t, st, "op-kept"); got.Phase != operation.PhaseUncertain {
				t.Fatalf("after the sweep: %s, want uncertain", got.Phase)
			}

			r := &replay.Replayer{Store: st, Sender: out, Genace: c, Clock: clk}
			plan, err := r.Plan(ctx, "op-kept")
			if err != nil || len(plan.KnownJobs) != 1 || plan.KnownJobs[0].JobID != job {
				t.Errorf("plan's known jobs %+v (%v), want %s from its review", plan.KnownJobs, err, job)
			}
			_, err = r.Replay(ctx, replay.Request{OperationID: "op-kept", Action: operation.ActionReconcile, Operator: "eve", ConfirmedNotSubmitted: true})
			if !errors.Is(err, replay.ErrJobKnown) {
				t.Errorf("confirmed-not-submitted while review job:%s names the job: err %v, want ErrJobKnown", job, err)
				// What an operator does next: dispatch, as the plan says.
				if _, err := r.Replay(ctx, replay.Request{OperationID: "op-kept", Action: operation.ActionDispatch, Operator: "eve"}); err != nil {
					t.Logf("dispatch replay: %v", err)
				}
			}
			// The store recovered: the real handlers from here on.
			sub := submit.New(submit.Deps{Store: st, Genace: c, Extender: &handlertest.Extender{}, Sender: out, Clock: clk, Log: log, Metrics: metrics.Discard()}, submit.Config{})
			ps := schedule.DefaultPolicies()
			ps.Default = schedule.Policy{LongPoll: 0, Base: 5 * time.Second, Cap: time.Minute, Multiplier: 2}
			del := schedule.NewObservation(ps)
			obs := observe.New(observe.Deps{Store: st, Genace: c, Delays: del, Extender: &handlertest.Extender{}, Sender: out, Clock: clk, Log: log, Metrics: metrics.Discard()}, observe.Config{})
			deliverAll(t, clk, out, sub, obs)
			if n := sim.PostCount("op-kept"); n != 1 {
				t.Fatalf("%d POSTs reached Genace for op-kept, want the original 1", n)
			}
			if got, err := st.GetReview(ctx, "job:"+job); err != nil || !got.Open {
				t.Fatalf("review job:%s open=%v (%v): the only record of the job was closed", job, got.Open, err)
			}

			// The way out the plan names: attach the job Genace confirms;
			// that resolves the job's review.
			res, err := r.Replay(ctx, replay.Request{OperationID: "op-kept", Action: operation.ActionReconcile, Operator: "eve", JobID: job})
			if err != nil {
				t.Fatalf("attach %s: %v", job, err)
			}
			if !slices.Contains(res.Closed, "job:"+job) || res.Entry.Verification != replay.Verified || res.Entry.RemoteJobID != job {
				t.Errorf("attach: closed %v, audit %+v", res.Closed, res.Entry)
			}
			deliverAll(t, clk, out, sub, obs)
			if got := handlertest.Get(t, st, "op-kept"); got.RemoteJobID != job || got.Phase != operation.PhaseSucceeded {
				t.Errorf("after attaching: %s with job %q, want the job observed to succeeded", got.Phase, got.RemoteJobID)
			}
			if n := sim.PostCount("op-kept"); n != 1 {
				t.Fatalf("%d POSTs reached Genace for op-kept, want the original 1", n)
			}
		})
	}
}

// deliverAll delivers recorded messages to their handlers until none is
// left.
func deliverAll(t *testing.T, clk *clock.Manual, out *handlertest.Outbox, sub *submit.Handler, obs *observe.Handler) {
	t.Helper()
	for range 50 {
		sent := out.Take()
		if len(sent) == 0 {
			return
		}
		for _, s := range sent {
			clk.Advance(s.Delay)
			ev := handlertest.Event(t, clk.Now(), s)
			switch s.Env.Action {
			case message.ActionSubmitGeneration:
				_, _ = sub.Handle(context.Background(), ev)
			case message.ActionObserveGeneration:
				_, _ = obs.Handle(context.Background(), ev)
			}
		}
	}
}

// Hole 4: a dispatch replay is a new POST; it is ready only when every
// POST the record counts is known to have created nothing (a 429, a
// 401/403 refusing our key, or an operator's audited confirmation).
func TestDispatchAccountsForEveryPost(t *testing.T) {
	t.Parallel()
	prepared := func(id string, posts, rateLimited int) operation.Record {
		r := handlertest.Prepared(id)
		r.Posts, r.Counters.RateLimited = posts, rateLimited
		return r
	}
	tests := []struct {
		name    string
		rec     operation.Record
		confirm bool // reach prepared through the operator's confirmation
		ready   bool
	}{
		{"never posted", prepared("op-never", 0, 0), false, true},
		{"posted once, answered 429", prepared("op-429", 1, 1), false, true},
		{"posted twice, our key refused both", func() operation.Record {
			r := prepared("op-401", 2, 0)
			r.Counters.Unauthorized, r.LastError = 2, operation.LastErrorUnauthorized
			return r
		}(), false, true},
		{"posted twice, key refused once, the other unsettled", func() operation.Record {
			r := prepared("op-401-unsettled", 2, 0)
			r.Counters.Unauthorized = 1
			return r
		}(), false, false},
		{"posted once, outcome never settled", prepared("op-unsettled", 1, 0), false, false},
		{"uncertain, confirmed not submitted", func() operation.Record {
			r := prepared("op-confirmed", 1, 0)
			r.Phase, r.Parked = operation.PhaseUncertain, &operation.ParkedState{Reason: "post_outcome_unknown", At: handlertest.Start}
			return r
		}(), true, true},
		{"429, then uncertain, confirmed", func() operation.Record {
			r := prepared("op-429-confirmed", 2, 1)
			r.Phase = operation.PhaseUncertain
			return r
		}(), true, true},
	}
	for _, kind := range handlertest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, kind)
			ctx := context.Background()
			for _, tt := range tests {
				handlertest.Create(t, e.store, tt.rec)
				if tt.confirm {
					if _, err := e.r.Replay(ctx, replay.Request{OperationID: tt.rec.OperationID, Action: operation.ActionReconcile, Operator: "carol", ConfirmedNotSubmitted: true, Reason: "support ticket: Genace has no job"}); err != nil {
						t.Fatalf("%s: confirm: %v", tt.name, err)
					}
				}
				before := handlertest.Get(t, e.store, tt.rec.OperationID)
				_, err := e.r.Replay(ctx, replay.Request{OperationID: tt.rec.OperationID, Action: operation.ActionDispatch, Operator: "carol", Reason: "allowance reviewed after the confirmation"})
				sent := e.out.Take()
				if tt.ready {
					if err != nil || len(sent) != 1 {
						t.Errorf("%s: dispatch: %v, %d sent; want one dispatch", tt.name, err, len(sent))
					}
					continue
				}
				if !errors.Is(err, replay.ErrNotReady) || len(sent) != 0 {
					t.Errorf("%s: dispatch: err %v, %d sent; want ErrNotReady and nothing sent", tt.name, err, len(sent))
				}
				if after := handlertest.Get(t, e.store, tt.rec.OperationID); after.Revision != before.Revision {
					t.Errorf("%s: refused dispatch wrote r%d", tt.name, after.Revision)
				}
			}
		})
	}
}

// Hole 4: replay closes the reviews its action resolves, and only those:
// a review naming a job the record does not hold, or about a later
// revision than the one replay wrote, stays open.
func TestReplayClosesOnlyWhatItResolves(t *testing.T) {
	t.Parallel()
	for _, kind := range handlertest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, kind)
			ctx := context.Background()
			stalled := handlertest.Prepared("op-stalled")
			stalled.Phase, stalled.RemoteJobID, stalled.Posts = operation.PhaseStalled, "job_on_record", 1
			stalled.Parked = &operation.ParkedState{Reason: "polling_budget_exhausted", At: handlertest.Start}
			stalled = handlertest.Create(t, e.store, stalled)
			delivered := handlertest.Prepared("op-delivered")
			delivered.Phase, delivered.RemoteJobID, delivered.Posts = operation.PhaseDelivered, "job_delivered", 1
			delivered = handlertest.Create(t, e.store, delivered)

			parked := review.ForRecord(review.ParkedID(stalled.OperationID, stalled.Revision), review.SourceHandler, &stalled, handlertest.Start)
			other := review.ForRecord("job:job_elsewhere", review.SourceHandler, &stalled, handlertest.Start)
			other.RemoteJobID = "job_elsewhere"
			later := review.ForRecord(review.ParkedID(stalled.OperationID, 9), review.SourceHandler, &stalled, handlertest.Start.Add(time.Hour))
			later.Revision = 9
			second := review.ForRecord("job:job_second", review.SourceHandler, &delivered, handlertest.Start)
			second.RemoteJobID = "job_second"
			done := review.ForRecord(review.ParkedID(delivered.OperationID, 1), review.SourceDLQ, &delivered, handlertest.Start)
			for _, rv := range []review.Record{parked, other, later, second, done} {
				if _, err := e.store.PutReview(ctx, rv); err != nil {
					t.Fatal(err)
				}
			}
			for _, tc := range []struct {
				op           string
				action       operation.Action
				closed, open []string
			}{
				{"op-stalled", operation.ActionObserve, []string{parked.ID}, []string{other.ID, later.ID}},
				{"op-delivered", operation.ActionAcknowledge, []string{done.ID}, []string{second.ID}},
			} {
				res, err := e.r.Replay(ctx, replay.Request{OperationID: tc.op, Action: tc.action, Operator: "frank"})
				if err != nil {
					t.Fatalf("%s: %v", tc.op, err)
				}
				if !slices.Equal(res.Closed, tc.closed) {
					t.Errorf("%s: closed %v, want %v", tc.op, res.Closed, tc.closed)
				}
				for _, id := range tc.open {
					if rv, err := e.store.GetReview(ctx, id); err != nil || !rv.Open {
						t.Errorf("%s: review %s open=%v (%v), want it left open", tc.op, id, rv.Open, err)
					}
				}
			}
		})
	}
}
