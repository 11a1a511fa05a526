package localqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/localqueue"
	"github.com/genjobs/genjobs/internal/queue/queuetest"
)

// TestConformance runs the queue conformance suite on the embedded queue,
// each test on its own broker and manual clock, with the embedded queue's
// deliberate differences from SQS (see the package doc) declared.
func TestConformance(t *testing.T) {
	t.Parallel()
	queuetest.Run(t, func(*testing.T) queuetest.Backend {
		clk := clock.NewManual(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
		return &backend{Broker: localqueue.New(clk), clk: clk}
	}, features)
}

// features are the embedded queue's declared differences from SQS.
var features = queuetest.Features{
	DelaysBeyondMax:    true,
	ReceiveBeyondTen:   true,
	ExactlyOnceInOrder: true,
	StaleDeleteFails:   true,
}

// backend adapts a Broker to the suite.
type backend struct {
	*localqueue.Broker
	clk *clock.Manual
}

func (b *backend) NewQueue(t *testing.T, cfg queuetest.QueueConfig) (string, string) {
	t.Helper()
	var dlq string
	qc := localqueue.Config{Visibility: cfg.Visibility}
	if cfg.MaxReceiveCount > 0 {
		var err error
		if dlq, err = b.Create("conformance-dlq", localqueue.Config{}); err != nil {
			t.Fatal(err)
		}
		qc.MaxReceiveCount, qc.DeadLetter = cfg.MaxReceiveCount, "conformance-dlq"
	}
	url, err := b.Create("conformance", qc)
	if err != nil {
		t.Fatal(err)
	}
	return url, dlq
}

func (b *backend) Receive(ctx context.Context, url string, max int, visibility time.Duration) ([]queuetest.Message, error) {
	msgs, err := b.Broker.Receive(ctx, url, max, visibility)
	out := make([]queuetest.Message, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, queuetest.Message{
			ID:              m.ID,
			Body:            m.Body,
			ReceiptHandle:   m.ReceiptHandle,
			ReceiveCount:    m.ReceiveCount,
			SentAt:          m.SentAt,
			FirstReceivedAt: m.FirstReceivedAt,
		})
	}
	return out, err
}

func (b *backend) Sleep(d time.Duration) { b.clk.Advance(d) }

func (b *backend) Now() time.Time { return b.clk.Now() }
