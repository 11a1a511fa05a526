package invoke

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/genjobs/genjobs/internal/queue"
)

// Messenger is what PassThrough needs of SQS; *queue.SQS has it.
type Messenger interface {
	Send(ctx context.Context, queueURL string, body []byte, delay time.Duration) (string, error)
	Receive(ctx context.Context, queueURL string, maxMessages int, wait, visibility time.Duration) ([]queue.Message, error)
	ChangeVisibility(ctx context.Context, queueURL, receiptHandle string, timeout time.Duration) error
}

// Received is one record PassThrough took from its queue: still in flight
// there until the caller deletes it.
type Received struct {
	QueueURL      string
	ReceiptHandle string
}

// PassThrough gives an SQS event's records receipt handles a queue issued,
// as the event source mapping does (submit renews its message's visibility
// before it POSTs, which a sample's made-up handle fails). Each record
// whose eventSourceARN queueOf maps to a queue URL is sent there and
// received back; only its handle changes. It returns the rewritten event
// and the receives, which the caller deletes after the invocation.
func PassThrough(ctx context.Context, q Messenger, payload []byte, queueOf func(eventSourceARN string) (string, bool)) ([]byte, []Received, error) {
	var doc map[string]any
	if err := json.Unmarshal(payload, &doc); err != nil {
		return nil, nil, fmt.Errorf("pass the event through its queues: %w", err)
	}
	records, _ := doc["Records"].([]any)
	var got []Received
	for _, r := range records {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		arn, _ := m["eventSourceARN"].(string)
		body, hasBody := m["body"].(string)
		url, known := queueOf(arn)
		if !hasBody || !known {
			continue
		}
		id, err := q.Send(ctx, url, []byte(body), 0)
		if err != nil {
			return nil, got, fmt.Errorf("pass record %v through %s: %w", m["messageId"], url, err)
		}
		handle, err := receiveOne(ctx, q, url, id)
		if err != nil {
			return nil, got, fmt.Errorf("pass record %v through %s: %w", m["messageId"], url, err)
		}
		m["receiptHandle"] = handle
		got = append(got, Received{QueueURL: url, ReceiptHandle: handle})
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, got, err
	}
	return out, got, nil
}

// receiveOne receives the message id from url and returns its receipt
// handle; any other message received meanwhile is made visible again.
func receiveOne(ctx context.Context, q Messenger, url, id string) (string, error) {
	for range 10 {
		msgs, err := q.Receive(ctx, url, queue.MaxReceive, time.Second, 0)
		if err != nil {
			return "", err
		}
		handle := ""
		for _, m := range msgs {
			if m.ID == id {
				handle = m.ReceiptHandle
				continue
			}
			if err := q.ChangeVisibility(ctx, url, m.ReceiptHandle, 0); err != nil {
				return "", fmt.Errorf("put back message %s: %w", m.ID, err)
			}
		}
		if handle != "" {
			return handle, nil
		}
	}
	return "", fmt.Errorf("message %s never came back", id)
}
