package worker_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/worker"
)

type records map[string]operation.Record

func (r records) Get(_ context.Context, id string) (operation.Record, error) {
	if rec, ok := r[id]; ok {
		return rec, nil
	}
	return operation.Record{}, store.ErrNotFound
}

func newConsumer(metricsOut, logOut *bytes.Buffer) *worker.Consumer {
	clk := clock.NewManual(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	return &worker.Consumer{
		Action: message.ActionObserveGeneration, Name: "observe", Queue: "observe",
		Store:    records{"op-1": {OperationID: "op-1", Revision: 3, Phase: operation.PhaseAccepted}},
		QueueURL: "q", Visibility: time.Minute, Clock: clk,
		Log:     slog.New(slog.NewJSONHandler(logOut, nil)),
		Metrics: metrics.New(metricsOut, "observe", clk),
	}
}

func body(t *testing.T, env message.Envelope) string {
	t.Helper()
	b, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRecordRefusesBeforeDeciding(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"malformed", "{", "observe message m-1: "},
		{"wrong queue", body(t, message.Envelope{Action: message.ActionDeliverArtifacts, OperationID: "op-1", ExpectedRevision: 3, ExpectedRemoteJobID: "j"}),
			"observe message m-1: action deliver_artifacts does not belong on the observe queue"},
		{"unknown operation", body(t, message.Envelope{Action: message.ActionObserveGeneration, OperationID: "op-2", ExpectedRevision: 3, ExpectedRemoteJobID: "j"}),
			"observe op-2: load: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mout, lout bytes.Buffer
			c := newConsumer(&mout, &lout)
			err := c.Record(func(context.Context, events.SQSMessage, message.Envelope, operation.Record, *worker.Lease) (worker.Outcome, error) {
				t.Fatal("decided")
				return "", nil
			})(context.Background(), events.SQSMessage{MessageId: "m-1", Body: tc.body})
			if err == nil || !strings.Contains(err.Error(), tc.want) || worker.Classify(err) != worker.ClassPermanent {
				t.Fatalf("err = %v (%s), want %q, permanent", err, worker.Classify(err), tc.want)
			}
			if strings.Contains(mout.String(), metrics.ActionDuration) {
				t.Fatalf("action duration recorded for a refused message:\n%s", mout.String())
			}
		})
	}
}

func TestRecordDecidesAndTimes(t *testing.T) {
	var mout, lout bytes.Buffer
	c := newConsumer(&mout, &lout)
	env := message.Envelope{Action: message.ActionObserveGeneration, OperationID: "op-1", ExpectedRevision: 2, ExpectedRemoteJobID: "j"}
	err := c.Record(func(ctx context.Context, m events.SQSMessage, got message.Envelope, rec operation.Record, l *worker.Lease) (worker.Outcome, error) {
		if got != env || rec.Revision != 3 || m.MessageId != "m-1" || l.Remaining() != time.Minute {
			t.Errorf("decide got %+v, r%d, %s, lease %s", got, rec.Revision, m.MessageId, l.Remaining())
		}
		return c.Obsolete(ctx, got, &rec, worker.ReasonStaleRevision)
	})(context.Background(), events.SQSMessage{MessageId: "m-1", Body: body(t, env)})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{metrics.ActionDuration, `"Outcome":"obsolete"`, `"Action":"observe_generation"`, metrics.Obsolete, `"Reason":"stale_revision"`} {
		if !strings.Contains(mout.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, mout.String())
		}
	}
	if !strings.Contains(lout.String(), `"msg":"acknowledged as obsolete"`) || !strings.Contains(lout.String(), `"reason":"stale_revision"`) {
		t.Errorf("log:\n%s", lout.String())
	}
}
