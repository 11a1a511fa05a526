package eventsource

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/localqueue"
)

// Feed is a function's own receive from the local queue that feeds it
// (observe's feed, internal/observe), as queue.Feed is deployed: records
// built as Event builds the mapping's, under the queue's own visibility
// timeout. The queue does not long-poll, so Receive polls it every
// BatchingPoll on Clock until the wait has passed.
type Feed struct {
	Broker *localqueue.Broker
	// Queue is the queue's URL.
	Queue string
	// Clock is the queue's clock (nil: the wall clock).
	Clock clock.Clock

	received atomic.Int64
}

// Receive returns up to max messages, waiting up to wait for the first.
func (f *Feed) Receive(ctx context.Context, max int, wait time.Duration) ([]events.SQSMessage, error) {
	info, err := f.Broker.Info(f.Queue)
	if err != nil {
		return nil, fmt.Errorf("feed: %w", err)
	}
	clk := cmp.Or[clock.Clock](f.Clock, clock.Real{})
	end := clk.Now().Add(wait)
	for {
		msgs, err := f.Broker.Receive(ctx, f.Queue, max, 0)
		if err != nil {
			return nil, fmt.Errorf("feed %s: %w", info.Name, err)
		}
		if len(msgs) > 0 {
			f.received.Add(int64(len(msgs)))
			return Event(msgs, info.ARN, localqueue.Region).Records, nil
		}
		left := end.Sub(clk.Now())
		if left <= 0 {
			return nil, nil
		}
		select {
		case <-clk.After(min(left, BatchingPoll)):
		case <-ctx.Done():
			return nil, fmt.Errorf("feed %s: %w", info.Name, ctx.Err())
		}
	}
}

// Delete acknowledges a message Receive returned.
func (f *Feed) Delete(ctx context.Context, receiptHandle string) error {
	return f.Broker.Delete(ctx, f.Queue, receiptHandle)
}

// Received counts the messages Receive returned.
func (f *Feed) Received() int64 { return f.received.Load() }
