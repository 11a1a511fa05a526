//go:build integration

package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/genjobs/genjobs/internal/queue"
	"github.com/genjobs/genjobs/internal/queue/queuetest"
)

// TestSQSIntegrationConformance runs the queue conformance suite on the
// SQS adapter against moto, in real time, with no declared differences:
// the adapter passes SQS's limits through (its own argument checks reject
// what SQS rejects) and moto behaves as SQS is documented to on every
// point the suite checks.
func TestSQSIntegrationConformance(t *testing.T) {
	t.Parallel()
	c := newIntegrationClient(t)
	queuetest.Run(t, func(*testing.T) queuetest.Backend {
		return &sqsBackend{SQS: queue.NewSQS(c), c: c}
	}, queuetest.Features{})
}

// sqsBackend adapts the SQS adapter to the suite.
type sqsBackend struct {
	*queue.SQS
	c *sqs.Client
}

func (b *sqsBackend) NewQueue(t *testing.T, cfg queuetest.QueueConfig) (string, string) {
	t.Helper()
	attrs := map[string]string{"VisibilityTimeout": fmt.Sprint(int(cfg.Visibility / time.Second))}
	var dlq string
	if cfg.MaxReceiveCount > 0 {
		var dlqARN string
		dlq, dlqARN = createQueue(t, b.c, queueName(t, "-dlq"), nil)
		attrs["RedrivePolicy"] = fmt.Sprintf(`{"maxReceiveCount":"%d","deadLetterTargetArn":%q}`, cfg.MaxReceiveCount, dlqARN)
	}
	url, _ := createQueue(t, b.c, queueName(t, ""), attrs)
	return url, dlq
}

// Receive does not wait: moto answers from one process, so what is
// visible is returned (real SQS's short poll samples servers and would
// need a long poll here).
func (b *sqsBackend) Receive(ctx context.Context, url string, max int, visibility time.Duration) ([]queuetest.Message, error) {
	msgs, err := b.SQS.Receive(ctx, url, max, 0, visibility)
	out := make([]queuetest.Message, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, queuetest.Message{
			ID:              m.ID,
			Body:            m.Body,
			ReceiptHandle:   m.ReceiptHandle,
			ReceiveCount:    m.Attributes.ApproximateReceiveCount,
			SentAt:          m.Attributes.SentTimestamp,
			FirstReceivedAt: m.Attributes.ApproximateFirstReceiveTimestamp,
		})
	}
	return out, err
}

func (b *sqsBackend) Sleep(d time.Duration) { time.Sleep(d) }

func (b *sqsBackend) Now() time.Time { return time.Now() }
