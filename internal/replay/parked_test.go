package replay_test

import (
	"context"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/replay"
	"github.com/genjobs/genjobs/internal/worker"
)

// An operation observe or deliver parked after a persistent failure
// (worker.Park, at its failure budget) is resumed by the plan's action
// once the failure clears: observe for an accepted one, deliver for a
// succeeded one, with a fresh failure budget, the follow-up sent and the
// park's review closed.
func TestReplayResumesAFailureParkedOperation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		phase    operation.Phase
		category string
		want     operation.Action
		msg      message.Action
	}{
		{"observation after 80 failed reads", operation.PhaseAccepted, "genace_read_failed", operation.ActionObserve, message.ActionObserveGeneration},
		{"delivery of a copy that never verified", operation.PhaseSucceeded, "artifact_verify_failed", operation.ActionDeliver, message.ActionDeliverArtifacts},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "bolt")
			id := "op-parked"
			rec := handlertest.Prepared(id)
			rec.Phase, rec.RemoteJobID, rec.Posts = c.phase, e.jobOnGenace(t, id), 1
			accepted := handlertest.Start
			rec.Timestamps.Accepted = &accepted
			rec.Remote = &operation.Snapshot{State: operation.RemoteRunning, ObservedAt: handlertest.Start}
			if c.phase == operation.PhaseSucceeded {
				rec.Remote = &operation.Snapshot{State: operation.RemoteSucceeded, ObservedAt: handlertest.Start,
					Outputs: []operation.OutputDescriptor{{ContentType: "image/png", SizeBytes: 3, SHA256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}}}
			}
			rec.Counters.ReadFailures = 79
			rec.LastError = c.category
			rec = handlertest.Create(t, e.store, rec)
			w := worker.New(worker.Deps{Store: e.store, Sender: e.out, Clock: e.clk, Metrics: metrics.Discard()}, worker.Config{Name: "test"})
			outcome, err := w.Commit(context.Background(), worker.Turn{Msg: events.SQSMessage{MessageId: "m-1"}, Rec: rec},
				worker.Park{Reason: "job " + rec.RemoteJobID + ": " + c.category + ", 80 failed attempt(s) in a row", Category: c.category, Attempt: 1})
			if err != nil || outcome != worker.OutcomeParked {
				t.Fatalf("park: %s %v", outcome, err)
			}
			parked := handlertest.Get(t, e.store, id)
			plan, err := e.r.Plan(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if plan.Recommendation.Action != c.want || !plan.Ready {
				t.Fatalf("plan %+v; want %s, ready", plan, c.want)
			}
			res, err := e.r.Replay(context.Background(), replay.Request{OperationID: id, Action: c.want, Operator: "alice"})
			if err != nil {
				t.Fatal(err)
			}
			after := handlertest.Get(t, e.store, id)
			sent := e.out.Take()
			if after.Parked != nil || after.Counters.ReadFailures != 0 || !after.Active() || after.Phase != c.phase || after.Revision != parked.Revision+1 {
				t.Fatalf("after the replay: %s r%d parked %+v, %d failures, active %t", after.Phase, after.Revision, after.Parked, after.Counters.ReadFailures, after.Active())
			}
			if len(sent) != 1 || sent[0].Env.Action != c.msg || sent[0].Env.ExpectedRevision != after.Revision {
				t.Fatalf("sent %+v; want one %s at r%d", sent, c.msg, after.Revision)
			}
			open, err := e.store.OpenReviewsOf(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if len(open) != 0 || len(res.Kept) != 0 {
				t.Fatalf("open reviews %+v, kept %+v; want the park's closed", open, res.Kept)
			}
		})
	}
}
