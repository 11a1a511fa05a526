// Package queue is genjobs' thin adapter over Amazon SQS. It exists so the
// rest of the code sends and acknowledges messages through a few calls with
// checked arguments (a delay SQS would reject fails here, before a network
// round trip) and errors that say which call on which queue failed and
// whether trying again can help.
//
// The Lambda functions receive their messages from the event source
// mapping; Receive and Delete are here for tests, local pollers and tools.
// Depth and Mapping (the mapping's maximum concurrency) are what fitting
// that consumer to the queue's load reads and sets.
package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/genjobs/genjobs/internal/schedule"
)

// Limits SQS enforces; checking them here turns a malformed call into an
// immediate, non-retryable error instead of a 400 from the service.
const (
	// MaxDelay is the longest DelaySeconds SQS accepts. Longer waits go
	// through EventBridge Scheduler (see package schedule).
	MaxDelay = 900 * time.Second
	// MaxVisibilityTimeout is the longest visibility timeout SQS accepts.
	MaxVisibilityTimeout = 12 * time.Hour
	// MaxWait is the longest long poll ReceiveMessage accepts.
	MaxWait = 20 * time.Second
	// MaxReceive is the most messages one ReceiveMessage returns.
	MaxReceive = 10
)

// ErrDelayTooLong is returned (wrapped) by Send for a delay outside
// 0..MaxDelay. It is a programming or configuration error, never retryable:
// the caller should have routed the delay through the scheduler.
var ErrDelayTooLong = errors.New("delay outside SQS's 0..900 s range")

// ErrInvalidArgument is returned (wrapped) for any other argument SQS would
// reject: an empty queue URL or receipt handle, or a timeout out of range.
var ErrInvalidArgument = errors.New("invalid argument")

// SQS sends, receives and acknowledges messages. It is safe for concurrent
// use, as the *sqs.Client it wraps is.
type SQS struct {
	c *sqs.Client
}

// The consumers declare the interfaces they need; these checks keep SQS
// usable where they expect it, so a signature change breaks the build here
// rather than at wiring time in a function's main.
var _ schedule.QueueSender = (*SQS)(nil)

// NewSQS wraps a client. The client's endpoint comes from the SDK's own
// configuration (AWS_ENDPOINT_URL_SQS points it at a local emulator), so
// production code has no endpoint override of its own.
func NewSQS(c *sqs.Client) *SQS { return &SQS{c: c} }

// Send puts body on the queue, invisible for delay. The delay is rounded up
// to whole seconds (SQS's unit): rounding down could deliver a message
// before the moment the caller computed. A delay outside 0..MaxDelay
// returns ErrDelayTooLong without calling SQS.
func (s *SQS) Send(ctx context.Context, queueURL string, body []byte, delay time.Duration) (string, error) {
	if queueURL == "" {
		return "", fmt.Errorf("sqs send: %w: empty queue URL", ErrInvalidArgument)
	}
	if delay < 0 || delay > MaxDelay {
		return "", fmt.Errorf("sqs send to %s: %w: %v", queueURL, ErrDelayTooLong, delay)
	}
	out, err := s.c.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:     aws.String(queueURL),
		MessageBody:  aws.String(string(body)),
		DelaySeconds: ceilSeconds(delay),
	})
	if err != nil {
		return "", fmt.Errorf("sqs send to %s: %w", queueURL, err)
	}
	return aws.ToString(out.MessageId), nil
}

// ChangeVisibility sets how long the received message stays hidden, counted
// from now. A consumer extends it while it is still working on a message
// (so it is not delivered twice), or sets it to 0 to give the message back
// at once. The timeout is rounded up to whole seconds and must be within
// 0..MaxVisibilityTimeout.
func (s *SQS) ChangeVisibility(ctx context.Context, queueURL, receiptHandle string, timeout time.Duration) error {
	if queueURL == "" || receiptHandle == "" {
		return fmt.Errorf("sqs change visibility: %w: empty queue URL or receipt handle", ErrInvalidArgument)
	}
	if timeout < 0 || timeout > MaxVisibilityTimeout {
		return fmt.Errorf("sqs change visibility on %s: %w: timeout %v outside 0..%v", queueURL, ErrInvalidArgument, timeout, MaxVisibilityTimeout)
	}
	_, err := s.c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(queueURL),
		ReceiptHandle:     aws.String(receiptHandle),
		VisibilityTimeout: ceilSeconds(timeout),
	})
	if err != nil {
		return fmt.Errorf("sqs change visibility on %s: %w", queueURL, err)
	}
	return nil
}

// Delete acknowledges a received message so it is not delivered again.
func (s *SQS) Delete(ctx context.Context, queueURL, receiptHandle string) error {
	if queueURL == "" || receiptHandle == "" {
		return fmt.Errorf("sqs delete: %w: empty queue URL or receipt handle", ErrInvalidArgument)
	}
	_, err := s.c.DeleteMessage(ctx, &sqs.DeleteMessageInput{
		QueueUrl:      aws.String(queueURL),
		ReceiptHandle: aws.String(receiptHandle),
	})
	if err != nil {
		return fmt.Errorf("sqs delete on %s: %w", queueURL, err)
	}
	return nil
}

// Message is one received message.
type Message struct {
	// ID is SQS's message id, stable across redeliveries.
	ID string
	// Body is the message body as sent.
	Body []byte
	// ReceiptHandle identifies this receipt; Delete and ChangeVisibility
	// need it (not ID), and each receive gets a new one.
	ReceiptHandle string
	// Attributes are the system attributes Receive asks for.
	Attributes Attributes
}

// Attributes are the system attributes a consumer uses to judge a message:
// how often it came back (a poison message keeps coming back) and how old
// it is. Each is the zero value when SQS did not report it or reported
// something unparseable: a receive must not fail for a bookkeeping field.
type Attributes struct {
	// ApproximateReceiveCount counts receives, this one included.
	ApproximateReceiveCount int
	// SentTimestamp is when SQS accepted the message (UTC, ms precision).
	SentTimestamp time.Time
	// ApproximateFirstReceiveTimestamp is when the message was first
	// received (UTC, ms precision); a redelivery reports the first one.
	ApproximateFirstReceiveTimestamp time.Time
}

// Receive long-polls for up to maxMessages messages (1..10), waiting up to wait
// (0..20 s) for the first one. visibility hides the received messages for
// that long (rounded up to whole seconds); 0 keeps the queue's own
// visibility timeout. An empty result with a nil error means the wait ran
// out with nothing to deliver.
func (s *SQS) Receive(ctx context.Context, queueURL string, maxMessages int, wait, visibility time.Duration) ([]Message, error) {
	switch {
	case queueURL == "":
		return nil, fmt.Errorf("sqs receive: %w: empty queue URL", ErrInvalidArgument)
	case maxMessages < 1 || maxMessages > MaxReceive:
		return nil, fmt.Errorf("sqs receive from %s: %w: maxMessages %d outside 1..%d", queueURL, ErrInvalidArgument, maxMessages, MaxReceive)
	case wait < 0 || wait > MaxWait:
		return nil, fmt.Errorf("sqs receive from %s: %w: wait %v outside 0..%v", queueURL, ErrInvalidArgument, wait, MaxWait)
	case visibility < 0 || visibility > MaxVisibilityTimeout:
		return nil, fmt.Errorf("sqs receive from %s: %w: visibility %v outside 0..%v", queueURL, ErrInvalidArgument, visibility, MaxVisibilityTimeout)
	}
	out, err := s.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:            aws.String(queueURL),
		MaxNumberOfMessages: int32(maxMessages),
		// Rounded down: waiting longer than asked could outlast the
		// caller's own deadline.
		WaitTimeSeconds:   int32(wait / time.Second),
		VisibilityTimeout: ceilSeconds(visibility),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameApproximateReceiveCount,
			types.MessageSystemAttributeNameSentTimestamp,
			types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("sqs receive from %s: %w", queueURL, err)
	}
	msgs := make([]Message, 0, len(out.Messages))
	for _, m := range out.Messages {
		msgs = append(msgs, Message{
			ID:            aws.ToString(m.MessageId),
			Body:          []byte(aws.ToString(m.Body)),
			ReceiptHandle: aws.ToString(m.ReceiptHandle),
			Attributes:    parseAttributes(m.Attributes),
		})
	}
	return msgs, nil
}

// Depth is how many messages a queue holds, by state, as SQS counts them:
// approximately, and eventually consistent (a message sent a moment ago
// may not be counted yet). It is what sizing a consumer to its load needs:
// what waits now, what is being worked on, what is due later.
type Depth struct {
	// Visible is ApproximateNumberOfMessages: messages a receive can get
	// now.
	Visible int
	// InFlight is ApproximateNumberOfMessagesNotVisible: received and not
	// yet deleted, hidden by their visibility timeout.
	InFlight int
	// Delayed is ApproximateNumberOfMessagesDelayed: sent with a delay
	// that has not run out yet.
	Delayed int
}

// Total is every message the queue holds, in whichever state: each one is
// work a consumer will have to do.
func (d Depth) Total() int { return d.Visible + d.InFlight + d.Delayed }

// depthAttributes are the attributes Depth asks for, in Depth's order.
var depthAttributes = []types.QueueAttributeName{
	types.QueueAttributeNameApproximateNumberOfMessages,
	types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
}

// Depth reads the queue's message counts in one GetQueueAttributes call.
// A count SQS leaves out or reports as anything but a non-negative integer
// is an error, not zero: a caller sizing capacity by Depth would otherwise
// take a malformed answer for an empty queue and scale down.
func (s *SQS) Depth(ctx context.Context, queueURL string) (Depth, error) {
	if queueURL == "" {
		return Depth{}, fmt.Errorf("queue depth: %w: empty queue URL", ErrInvalidArgument)
	}
	out, err := s.c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(queueURL),
		AttributeNames: depthAttributes,
	})
	if err != nil {
		return Depth{}, fmt.Errorf("queue depth %s: %w", queueURL, err)
	}
	var counts [3]int
	for i, name := range depthAttributes {
		raw, ok := out.Attributes[string(name)]
		if !ok {
			return Depth{}, fmt.Errorf("queue depth %s: SQS did not report %s", queueURL, name)
		}
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 {
			return Depth{}, fmt.Errorf("queue depth %s: %s is %q, not a count", queueURL, name, raw)
		}
		counts[i] = n
	}
	return Depth{Visible: counts[0], InFlight: counts[1], Delayed: counts[2]}, nil
}

// parseAttributes reads the system attributes SQS reports as strings.
func parseAttributes(raw map[string]string) Attributes {
	var a Attributes
	if v, err := strconv.Atoi(raw[string(types.MessageSystemAttributeNameApproximateReceiveCount)]); err == nil && v >= 0 {
		a.ApproximateReceiveCount = v
	}
	a.SentTimestamp = parseMillis(raw[string(types.MessageSystemAttributeNameSentTimestamp)])
	a.ApproximateFirstReceiveTimestamp = parseMillis(raw[string(types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp)])
	return a
}

// parseMillis reads an epoch time in milliseconds, SQS's timestamp
// format; anything else is the zero time.
func parseMillis(s string) time.Time {
	if v, err := strconv.ParseInt(s, 10, 64); err == nil && v > 0 {
		return time.UnixMilli(v).UTC()
	}
	return time.Time{}
}

// ceilSeconds converts d to whole seconds, rounding up, for SQS's integer
// second fields. Callers have bounded d, so it fits an int32.
func ceilSeconds(d time.Duration) int32 {
	s := d / time.Second
	if d%time.Second > 0 {
		s++
	}
	return int32(s)
}

// QueueURLFromARN turns arn:aws:sqs:REGION:ACCOUNT:NAME into the queue's
// URL, https://sqs.REGION.amazonaws.com/ACCOUNT/NAME. A Lambda function fed
// by SQS knows its queue only as the record's eventSourceARN, but every SQS
// call wants the URL. Only the aws, aws-us-gov and aws-cn partitions are
// known; anything else is an error rather than a guessed host.
func QueueURLFromARN(arn string) (string, error) {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" {
		return "", fmt.Errorf("queue ARN %q: want arn:PARTITION:sqs:REGION:ACCOUNT:NAME", arn)
	}
	partition, service, region, account, name := parts[1], parts[2], parts[3], parts[4], parts[5]
	var domain string
	switch partition {
	case "aws", "aws-us-gov":
		domain = "amazonaws.com"
	case "aws-cn":
		domain = "amazonaws.com.cn"
	default:
		return "", fmt.Errorf("queue ARN %q: unknown partition %q", arn, partition)
	}
	if service != "sqs" {
		return "", fmt.Errorf("queue ARN %q: service is %q, not sqs", arn, service)
	}
	if !validRegion(region) {
		return "", fmt.Errorf("queue ARN %q: malformed region %q", arn, region)
	}
	if !validAccount(account) {
		return "", fmt.Errorf("queue ARN %q: account %q is not 12 digits", arn, account)
	}
	if !validQueueName(name) {
		return "", fmt.Errorf("queue ARN %q: malformed queue name %q", arn, name)
	}
	return "https://sqs." + region + "." + domain + "/" + account + "/" + name, nil
}

// validRegion accepts region names such as us-east-1 or us-gov-west-1:
// lower-case letters, digits and inner hyphens. It is a shape check, not a
// list, so a new region needs no code change.
func validRegion(s string) bool {
	if s == "" || len(s) > 32 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func validAccount(s string) bool {
	if len(s) != 12 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// validQueueName follows SQS's rule: 1..80 of letters, digits, '-' and
// '_', where a FIFO queue's name ends in ".fifo" (counted in the 80).
func validQueueName(s string) bool {
	if s == "" || len(s) > 80 {
		return false
	}
	s = strings.TrimSuffix(s, ".fifo")
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}
