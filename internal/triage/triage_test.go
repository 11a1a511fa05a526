package triage_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/triage"
)

func dlqMessage(id, body string) events.SQSMessage {
	return events.SQSMessage{MessageId: id, Body: body, EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:genjobs-observe-dlq",
		Attributes: map[string]string{"ApproximateReceiveCount": "5"}}
}

func TestTriageWritesOneReviewPerMessageAndNeverActs(t *testing.T) {
	t.Parallel()
	for _, kind := range handlertest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			st := handlertest.OpenStore(t, kind)
			logs := &handlertest.Buffer{}
			h := triage.New(triage.Deps{Store: st, Clock: clock.NewManual(handlertest.Start), Log: slog.New(slog.NewJSONHandler(logs, nil)), Metrics: metrics.Discard()}, triage.Config{Concurrency: 4})
			ctx := context.Background()
			// A delivered operation whose old observe message died in the DLQ.
			done := handlertest.Prepared("op-done")
			done.Phase, done.RemoteJobID = operation.PhaseDelivered, "job_done"
			done.Remote = &operation.Snapshot{State: operation.RemoteSucceeded}
			done = handlertest.Create(t, st, done)
			// An accepted one whose observation dead-lettered.
			acc := handlertest.Prepared("op-acc")
			acc.Phase, acc.RemoteJobID = operation.PhaseAccepted, "job_acc"
			acc.Remote = &operation.Snapshot{State: operation.RemoteRunning}
			acc = handlertest.Create(t, st, acc)
			obs := func(id string, rev int64, job string) string {
				b, _ := message.Envelope{Action: message.ActionObserveGeneration, OperationID: id, ExpectedRevision: rev, ExpectedRemoteJobID: job}.Encode()
				return string(b)
			}
			ev := events.SQSEvent{Records: []events.SQSMessage{
				dlqMessage("m-stale", obs("op-done", 1, "job_done")),
				dlqMessage("m-acc", obs("op-acc", 1, "job_acc")),
				dlqMessage("m-bad", `{"action":"observe_generation","prompt":"a secret garden","url":"https://x/f?sig=abc"}`),
				dlqMessage("m-ghost", obs("op-ghost", 3, "job_ghost")),
			}}
			for range 2 { // the DLQ may deliver the batch twice
				resp, err := h.Handle(ctx, ev)
				if err != nil || len(resp.BatchItemFailures) != 0 {
					t.Fatalf("failures %v err %v", resp.BatchItemFailures, err)
				}
			}
			reviews, err := st.OpenReviews(ctx)
			if err != nil {
				t.Fatal(err)
			}
			byID := map[string]int{}
			for _, r := range reviews {
				byID[r.ID]++
			}
			// The delivered operation's review is on file, closed: nothing to ask.
			if len(reviews) != 3 || byID["dlq:m-stale"] != 0 || byID["dlq:m-acc"] != 1 || byID["dlq:m-bad"] != 1 || byID["dlq:m-ghost"] != 1 {
				t.Fatalf("open reviews %v: want exactly one per message whose operation is not settled", byID)
			}
			get := func(id string) map[string]any {
				r, err := st.GetReview(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				var m map[string]any
				b, _ := json.Marshal(r)
				_ = json.Unmarshal(b, &m)
				return m
			}
			if r := get("dlq:m-stale"); r["recommended_action"] != "acknowledge" || r["phase"] != "delivered" || r["remote_state"] != "succeeded" || r["queue"] != "genjobs-observe-dlq" || r["receive_count"] != 5.0 ||
				r["open"] != false || r["closed_by"] != "automation (triage)" || r["closed_reason"] != "resolved: operation delivered at revision 1" {
				t.Fatalf("stale review %v", r)
			}
			if r := get("dlq:m-acc"); r["recommended_action"] != "observe" || r["remote_job_id"] != "job_acc" || r["action_type"] != "observe_generation" || r["phase"] != "accepted" || r["remote_state"] != "running" {
				t.Fatalf("accepted review %v", r)
			}
			bad := get("dlq:m-bad")
			if bad["error_category"] != "malformed_message" || len(bad["body_digest"].(string)) != 64 {
				t.Fatalf("malformed review %v", bad)
			}
			if r := get("dlq:m-ghost"); r["error_category"] != "unknown_operation" || r["operation_id"] != "op-ghost" {
				t.Fatalf("unknown-operation review %v", r)
			}
			// Triage never acts: the records are as they were.
			if got := handlertest.Get(t, st, "op-done"); got.Revision != done.Revision {
				t.Fatal("triage wrote a terminal record")
			}
			if got := handlertest.Get(t, st, "op-acc"); got.Revision != acc.Revision {
				t.Fatal("triage wrote a record")
			}
			all, _ := json.Marshal(reviews)
			for _, leak := range []string{"secret garden", "sig=", "https://"} {
				if strings.Contains(string(all), leak) || strings.Contains(logs.String(), leak) {
					t.Fatalf("%q leaked into a review or log", leak)
				}
			}
		})
	}
}
