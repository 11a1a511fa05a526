package queue

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Feed is a function's own receive from the queue that feeds it (observe's
// feed, internal/observe): the messages as Lambda's event source mapping
// would hand them over, under the queue's own visibility timeout, so they
// take the same path as the event's records.
type Feed struct {
	s        *SQS
	url, arn string
}

// Feed receives from and deletes on the queue at queueURL; queueARN (may
// be "") fills the records' EventSourceARN and AWSRegion.
func (s *SQS) Feed(queueURL, queueARN string) *Feed {
	return &Feed{s: s, url: queueURL, arn: queueARN}
}

// Receive long-polls for up to max (1..10) messages, waiting up to wait
// (0..20 s, whole seconds) for the first.
func (f *Feed) Receive(ctx context.Context, max int, wait time.Duration) ([]events.SQSMessage, error) {
	msgs, err := f.s.Receive(ctx, f.url, max, wait, 0)
	if err != nil {
		return nil, err
	}
	out := make([]events.SQSMessage, len(msgs))
	for i, m := range msgs {
		out[i] = m.Record(f.arn)
	}
	return out, nil
}

// Delete acknowledges a message Receive returned.
func (f *Feed) Delete(ctx context.Context, receiptHandle string) error {
	return f.s.Delete(ctx, f.url, receiptHandle)
}

// Record is m as a record of Lambda's SQS event: attributes as strings
// (a count, times in Unix milliseconds), each left out when SQS did not
// report it, and the queue's ARN and region when queueARN is set.
func (m Message) Record(queueARN string) events.SQSMessage {
	attrs := map[string]string{}
	if n := m.Attributes.ApproximateReceiveCount; n > 0 {
		attrs[string(types.MessageSystemAttributeNameApproximateReceiveCount)] = strconv.Itoa(n)
	}
	for name, t := range map[types.MessageSystemAttributeName]time.Time{
		types.MessageSystemAttributeNameSentTimestamp:                    m.Attributes.SentTimestamp,
		types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp: m.Attributes.ApproximateFirstReceiveTimestamp,
	} {
		if !t.IsZero() {
			attrs[string(name)] = strconv.FormatInt(t.UnixMilli(), 10)
		}
	}
	r := events.SQSMessage{
		MessageId: m.ID, ReceiptHandle: m.ReceiptHandle, Body: string(m.Body), Attributes: attrs,
		// Lambda sends an empty object, not null, when there are none.
		MessageAttributes: map[string]events.SQSMessageAttribute{},
		EventSource:       "aws:sqs", EventSourceARN: queueARN,
	}
	if parts := strings.Split(queueARN, ":"); len(parts) == 6 {
		r.AWSRegion = parts[3]
	}
	return r
}
