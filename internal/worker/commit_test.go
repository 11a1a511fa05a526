package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/worker"
)

// commitEnv is one worker on a real store, with what it sent and counted.
type commitEnv struct {
	st  store.Store
	out *handlertest.Outbox
	clk *clock.Manual
	m   *bytes.Buffer
	w   *worker.Worker
}

func newCommitEnv(t *testing.T, kind string) *commitEnv {
	e := &commitEnv{st: handlertest.OpenStore(t, kind), out: &handlertest.Outbox{}, clk: clock.NewManual(handlertest.Start), m: &bytes.Buffer{}}
	e.w = worker.New(worker.Deps{Store: e.st, Sender: e.out, Clock: e.clk, Metrics: metrics.New(e.m, "test", e.clk)}, worker.Config{Name: "test"})
	return e
}

func (e *commitEnv) turn(rec operation.Record) worker.Turn {
	return worker.Turn{Msg: events.SQSMessage{MessageId: "m-1"}, Rec: rec}
}

func (e *commitEnv) counted(name string) int { return strings.Count(e.m.String(), `"`+name+`":1`) }

// TestWriteOnceLostGoesNoFurther: a write that holds only at its revision
// (a claim) finds that another writer moved the record. The lost race is
// what follows, never the rest of the decision (the POST after a claim).
func TestWriteOnceLostGoesNoFurther(t *testing.T) {
	t.Parallel()
	for _, kind := range handlertest.StoreKinds() {
		for _, once := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/once=%t", kind, once), func(t *testing.T) {
				t.Parallel()
				e := newCommitEnv(t, kind)
				rec := handlertest.Create(t, e.st, handlertest.Prepared("op-claim"))
				moved := rec.Clone()
				moved.Model = "other"
				if _, err := e.st.Update(context.Background(), moved, rec.Revision); err != nil {
					t.Fatal(err)
				}
				next := rec.Clone()
				next.Phase = operation.PhaseSubmitting
				went := false
				outcome, err := e.w.Commit(context.Background(), e.turn(rec), worker.Write{Next: next, Once: once,
					Lost: worker.Obsolete{Why: worker.ReasonClaimConflict},
					Then: func(context.Context, operation.Record) worker.Decision { went = true; return worker.Done{} }})
				if err != nil || outcome != worker.OutcomeObsolete || went {
					t.Fatalf("outcome %s, %v, went on %t: want obsolete and no further", outcome, err, went)
				}
				if got := handlertest.Get(t, e.st, "op-claim"); got.Phase != operation.PhasePrepared || got.Model != "other" {
					t.Fatalf("record %s %q: the other writer's state must stand", got.Phase, got.Model)
				}
			})
		}
	}
}

// TestRetryCarriesTheVerdictOut: observe's and deliver's failed steps go
// through one policy: a key refused fails the message and records
// nothing, a 429 waits, a transient failure is counted and retried, and a
// failure past its budget (at once for a job Genace does not know) parks
// the operation with one review, counted in OperationsParked, never
// towards the DLQ.
func TestRetryCarriesTheVerdictOut(t *testing.T) {
	t.Parallel()
	reset := errors.New("connection reset")
	cases := []struct {
		name        string
		err         error
		failures    int
		wantOutcome worker.Outcome
		wantErr     bool
		wantParked  bool
		wantFails   int
		wantDelay   time.Duration
	}{
		{"key refused", genace.ErrUnauthorized, 0, "failed", true, false, 0, 0},
		{"rate limited", &genace.APIError{Op: "get", StatusCode: 429, RetryAfter: 7 * time.Second}, 0, "retried", false, false, 0, 7 * time.Second},
		{"transient", reset, 0, "retried", false, false, 1, time.Minute},
		{"transient at its budget", reset, 2, worker.OutcomeParked, false, true, 2, 0},
		{"job unknown to Genace", genace.ErrNotFound, 0, worker.OutcomeParked, false, true, 0, 0},
	}
	for _, action := range []message.Action{message.ActionObserveGeneration, message.ActionDeliverArtifacts} {
		for _, tc := range cases {
			t.Run(string(action)+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				e := newCommitEnv(t, "bolt")
				rec := handlertest.Prepared("op-fail")
				rec.Phase, rec.RemoteJobID, rec.Posts = operation.PhaseAccepted, "job_fail", 1
				rec.Remote = &operation.Snapshot{State: operation.RemoteRunning, ObservedAt: handlertest.Start}
				rec.Counters.ReadFailures, rec.LastError = tc.failures, "transient"
				rec = handlertest.Create(t, e.st, rec)
				f := worker.Judge(tc.err, "transient")
				outcome, err := e.w.Commit(context.Background(), e.turn(rec), worker.Retry{Err: tc.err, Failure: f, Action: action, Budget: 3,
					Throttled: func(d time.Duration) time.Duration { return d },
					Backoff:   func(n int) time.Duration { return time.Duration(n) * time.Minute },
					Park:      func(n int) string { return "cannot go on" },
					Attempt:   2, Failed: "failed", Retried: "retried"})
				if outcome != tc.wantOutcome || (err != nil) != tc.wantErr || worker.Classify(err) == worker.ClassPermanent {
					t.Fatalf("outcome %s, %v; want %s, error %t, never permanent", outcome, err, tc.wantOutcome, tc.wantErr)
				}
				got := handlertest.Get(t, e.st, "op-fail")
				sent := e.out.Take()
				switch {
				case tc.wantErr:
					if got.Revision != rec.Revision || len(sent) != 0 {
						t.Fatalf("record r%d, sent %+v: a refused key records and sends nothing", got.Revision, sent)
					}
				case tc.wantParked:
					if got.Parked == nil || got.Parked.Reason != "cannot go on" || got.Schedule != nil || got.LastError != f.Category {
						t.Fatalf("record parked %+v, schedule %+v, last error %q: want parked as %s", got.Parked, got.Schedule, got.LastError, f.Category)
					}
					if n := e.counted(metrics.Parked); n != 1 {
						t.Fatalf("%d parks counted, want 1:\n%s", n, e.m)
					}
					open, err := e.st.OpenReviewsOf(context.Background(), "op-fail")
					if err != nil || len(open) != 1 {
						t.Fatalf("open reviews %+v, %v: want the park's one", open, err)
					}
				default:
					if got.Counters.ReadFailures != tc.wantFails || got.Schedule == nil || got.Schedule.Action != string(action) ||
						!got.Schedule.Due.Equal(e.clk.Now().Add(tc.wantDelay)) {
						t.Fatalf("record %d failures, schedule %+v: want %d and %s in %s", got.Counters.ReadFailures, got.Schedule, tc.wantFails, action, tc.wantDelay)
					}
					if len(sent) != 1 || sent[0].Env.Action != action || sent[0].Env.ExpectedRevision != got.Revision || sent[0].Env.Attempt != 2 {
						t.Fatalf("sent %+v: want one %s at r%d", sent, action, got.Revision)
					}
				}
			})
		}
	}
}

// TestReviewFirstNeedsNext: ReviewFirst builds its review from Next at the
// next revision, so with a mutation (no Next) it would file a review of an
// empty record. The worker refuses the decision and writes nothing.
func TestReviewFirstNeedsNext(t *testing.T) {
	t.Parallel()
	e := newCommitEnv(t, "bolt")
	rec := handlertest.Create(t, e.st, handlertest.Prepared("op-review-first"))
	mutate := func(r operation.Record) (operation.Record, error) { r.Model = "other"; return r, nil }
	_, err := e.w.Commit(context.Background(), e.turn(rec), worker.Write{Mutate: mutate, ReviewFirst: true})
	if err == nil || !strings.Contains(err.Error(), "ReviewFirst needs Next") {
		t.Fatalf("err = %v, want the ReviewFirst refusal", err)
	}
	got, err := e.st.Get(context.Background(), rec.OperationID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Revision != rec.Revision || got.Model != rec.Model {
		t.Errorf("record written (revision %d → %d, model %q): want nothing written", rec.Revision, got.Revision, got.Model)
	}
}

// failingReviews is a real store whose review writes fail.
type failingReviews struct{ store.Store }

func (failingReviews) PutReview(context.Context, review.Record) (bool, error) {
	return false, errors.New("review table unavailable")
}

// TestFileFailedGoesOnAsTold: a review that cannot be written ends the
// handling with the error, or goes where the decision's Failed says (submit
// parks an operation with an unusable job id all the same, its evidence
// in a log line); a written one goes on with Then.
func TestFileFailedGoesOnAsTold(t *testing.T) {
	t.Parallel()
	e := newCommitEnv(t, "bolt")
	rec := handlertest.Create(t, e.st, handlertest.Prepared("op-file"))
	rv := review.ForRecord("evidence:op-file", review.SourceHandler, &rec, e.clk.Now())
	w := worker.New(worker.Deps{Store: failingReviews{e.st}, Sender: e.out, Clock: e.clk, Metrics: metrics.New(e.m, "test", e.clk)}, worker.Config{Name: "test"})
	var told error
	for _, tc := range []struct {
		name    string
		w       *worker.Worker
		failed  func(error) worker.Decision
		outcome worker.Outcome
		err     bool
	}{
		{"written", e.w, nil, worker.OutcomeDelivered, false},
		{"failed", w, nil, worker.OutcomeError, true},
		{"failed, told", w, func(err error) worker.Decision { told = err; return worker.Done{Outcome: worker.OutcomeObsolete} }, worker.OutcomeObsolete, false},
	} {
		outcome, err := tc.w.Commit(context.Background(), e.turn(rec), worker.File{Review: rv, Then: worker.Done{Outcome: worker.OutcomeDelivered}, Failed: tc.failed})
		if outcome != tc.outcome || (err != nil) != tc.err {
			t.Errorf("%s: outcome %s, %v; want %s, error %t", tc.name, outcome, err, tc.outcome, tc.err)
		}
	}
	if told == nil {
		t.Error("Failed was not given the review's error")
	}
}

// TestEmitThenGoesOnOnlyAfterTheSend: an Emit with Then (observe's
// linger after a hand-over) goes on from the record once its follow-up
// is sent; a failed send ends the handling with the error, Then never
// run, so the message comes back and re-emits.
func TestEmitThenGoesOnOnlyAfterTheSend(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fail    bool
		outcome worker.Outcome
		went    bool
	}{
		{"sent", false, worker.OutcomeDelivered, true},
		{"send failed", true, "observe", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newCommitEnv(t, "bolt")
			rec := handlertest.Prepared("op-emit")
			rec.Phase, rec.RemoteJobID = operation.PhaseAccepted, "job_emit"
			rec.Schedule = &operation.NextAction{Action: string(message.ActionObserveGeneration), Due: e.clk.Now()}
			rec = handlertest.Create(t, e.st, rec)
			if tc.fail {
				e.out.FailNext(1)
			}
			var from operation.Record
			went := false
			outcome, err := e.w.Commit(context.Background(), e.turn(rec), worker.Emit{Outcome: "observe", Attempt: 2,
				Then: func(_ context.Context, r operation.Record) worker.Decision {
					went, from = true, r
					return worker.Done{Outcome: worker.OutcomeDelivered}
				}})
			if outcome != tc.outcome || (err != nil) != tc.fail || went != tc.went {
				t.Fatalf("outcome %s, %v, went on %t; want %s, error %t, went on %t", outcome, err, went, tc.outcome, tc.fail, tc.went)
			}
			if sent := e.out.Take(); len(sent) != map[bool]int{true: 0, false: 1}[tc.fail] {
				t.Fatalf("sent %+v", sent)
			}
			if went && from.Revision != rec.Revision {
				t.Fatalf("Then went on from r%d; want the record as it stands, r%d", from.Revision, rec.Revision)
			}
		})
	}
}
