package triage_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/triage"
)

// A dispatch that dead-lettered because Genace kept refusing our key gets
// a review that names the configuration problem and recommends the
// dispatch a fixed key allows; the operation is not closed as settled.
func TestDeadLetteredDispatchOfARefusedKeyNamesTheProblem(t *testing.T) {
	t.Parallel()
	st := handlertest.OpenStore(t, "bolt")
	ctx := context.Background()
	rec := handlertest.Create(t, st, handlertest.Prepared("op-key"))
	claimed, err := operation.ClaimSubmission(rec, "submit", "m-key", handlertest.Start)
	if err != nil {
		t.Fatal(err)
	}
	if claimed, err = st.Update(ctx, claimed, rec.Revision); err != nil {
		t.Fatal(err)
	}
	released, err := claimed.Claim.Unauthorized(claimed, handlertest.Start)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Update(ctx, released, claimed.Revision); err != nil {
		t.Fatal(err)
	}
	b, _ := message.Envelope{Action: message.ActionSubmitGeneration, OperationID: "op-key", ExpectedRevision: rec.Revision}.Encode()
	h := triage.New(triage.Deps{Store: st, Clock: clock.NewManual(handlertest.Start), Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()}, triage.Config{})
	m := events.SQSMessage{MessageId: "m-key", Body: string(b), EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:genjobs-dispatch-dlq",
		Attributes: map[string]string{"ApproximateReceiveCount": "5"}}
	if resp, err := h.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v err %v", resp.BatchItemFailures, err)
	}
	r, err := st.GetReview(ctx, triage.ReviewID("m-key"))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Open || r.ErrorCategory != operation.LastErrorUnauthorized || r.Phase != operation.PhasePrepared || r.Recommended != operation.ActionDispatch {
		t.Fatalf("review open %t category %q phase %s recommended %s; want an open genace_unauthorized review recommending dispatch",
			r.Open, r.ErrorCategory, r.Phase, r.Recommended)
	}
}
