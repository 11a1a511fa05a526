//go:build integration

package queue_test

// These tests run against moto (bash .ci/moto.sh run -- go test -tags
// integration ...), which the SDK reaches through AWS_ENDPOINT_URL_SQS on
// its own. The SQS semantics (visibility, redelivery, receive counts,
// delays, redrive, deletes) are the conformance suite's
// (conformance_integration_test.go); the tests here cover what is the
// adapter's own: rounding, long polls, URLs from ARNs and error
// classification. Error codes as real SQS spells them are covered by
// sqs_test.go against SQS's wire format.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/genjobs/genjobs/internal/dev/testenv"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/queue"
)

// newIntegrationClient returns a client for moto, or skips (fails under
// GENJOBS_REQUIRE_INTEGRATION=1) when AWS_ENDPOINT_URL_SQS is unset — the
// guard that keeps these tests off a real account.
func newIntegrationClient(t *testing.T) *sqs.Client {
	t.Helper()
	return sqs.NewFromConfig(integrationConfig(t, "AWS_ENDPOINT_URL_SQS"))
}

// integrationConfig is the SDK's configuration for moto, once each of
// endpointVars (the services the test calls) is set; it skips (fails
// under GENJOBS_REQUIRE_INTEGRATION=1) otherwise.
func integrationConfig(t *testing.T, endpointVars ...string) aws.Config {
	t.Helper()
	for _, v := range endpointVars {
		testenv.Endpoint(t, v)
	}
	var opts []func(*config.LoadOptions) error
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	}
	if os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
		opts = append(opts, config.WithRegion("us-east-1"))
	}
	cfg, err := config.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var unsafeQueueChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// queueName is unique per test and run, so tests can share one moto and
// run in parallel.
func queueName(t *testing.T, suffix string) string {
	base := unsafeQueueChars.ReplaceAllString(t.Name(), "-")
	stamp := fmt.Sprintf("-%d%s", time.Now().UnixNano(), suffix)
	if len(base) > 80-len(stamp) {
		base = base[:80-len(stamp)]
	}
	return base + stamp
}

// createQueue creates a queue and returns its URL and ARN; it is deleted
// when the test ends.
func createQueue(t *testing.T, c *sqs.Client, name string, attrs map[string]string) (string, string) {
	t.Helper()
	ctx := context.Background()
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("create queue %s: %v", name, err)
	}
	url := aws.ToString(out.QueueUrl)
	t.Cleanup(func() { _, _ = c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}) })
	got, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		t.Fatalf("queue ARN of %s: %v", name, err)
	}
	arn := got.Attributes[string(types.QueueAttributeNameQueueArn)]
	if arn == "" {
		t.Fatalf("queue %s has no ARN", name)
	}
	return url, arn
}

func testBody(t *testing.T, op string) []byte {
	t.Helper()
	b, err := message.Envelope{Action: message.ActionObserveGeneration, OperationID: op, ExpectedRevision: 3, ExpectedRemoteJobID: "job-1", Attempt: 1}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func receiveOne(t *testing.T, s *queue.SQS, url string, wait time.Duration) queue.Message {
	t.Helper()
	msgs, err := s.Receive(context.Background(), url, 1, wait, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Fatalf("received %d messages within %v, want 1", len(msgs), wait)
	}
	return msgs[0]
}

func receiveNone(t *testing.T, s *queue.SQS, url string, wait time.Duration, why string) {
	t.Helper()
	msgs, err := s.Receive(context.Background(), url, 10, wait, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 0 {
		t.Fatalf("%s: received %d messages (%s), want none", why, len(msgs), msgs[0].Body)
	}
}

// TestSQSIntegrationDelayedSend: a delayed message stays invisible until
// its delay has passed — rounded up, so 1.5 s means 2 s — and a long poll
// picks it up as soon as it is due.
func TestSQSIntegrationDelayedSend(t *testing.T) {
	t.Parallel()
	c := newIntegrationClient(t)
	s := queue.NewSQS(c)
	url, _ := createQueue(t, c, queueName(t, ""), map[string]string{"VisibilityTimeout": "30"})
	body := testBody(t, "op-delayed")

	sent := time.Now()
	id, err := s.Send(context.Background(), url, body, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if id == "" {
		t.Fatal("empty message id")
	}
	receiveNone(t, s, url, 0, "right after a delayed send")

	m := receiveOne(t, s, url, 10*time.Second)
	if elapsed := time.Since(sent); elapsed < 2*time.Second-10*time.Millisecond {
		t.Errorf("received %v after send, before the 2 s delay (1.5 s rounded up)", elapsed)
	}
	if m.ID != id || string(m.Body) != string(body) || m.ReceiptHandle == "" {
		t.Errorf("got %+v, want id %s and the sent body", m, id)
	}
	if _, err := message.Decode(m.Body); err != nil {
		t.Errorf("body does not decode: %v", err)
	}
	if err := s.Delete(context.Background(), url, m.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
}

// TestSQSIntegrationQueueURLFromARN: the URL derived from a queue's ARN
// (all a Lambda record carries) addresses that queue.
func TestSQSIntegrationQueueURLFromARN(t *testing.T) {
	t.Parallel()
	c := newIntegrationClient(t)
	s := queue.NewSQS(c)
	_, arn := createQueue(t, c, queueName(t, ""), nil)
	url, err := queue.QueueURLFromARN(arn)
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Send(context.Background(), url, testBody(t, "op-arn"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if m := receiveOne(t, s, url, 5*time.Second); m.ID != id {
		t.Errorf("got %s, want %s", m.ID, id)
	}
}

// TestSQSIntegrationMissingQueue: a send to a queue that does not exist
// fails with context and is classified as permanent.
func TestSQSIntegrationMissingQueue(t *testing.T) {
	t.Parallel()
	c := newIntegrationClient(t)
	s := queue.NewSQS(c)
	url := "https://sqs.us-east-1.amazonaws.com/000000000000/" + queueName(t, "-missing")
	_, err := s.Send(context.Background(), url, testBody(t, "op-missing"), 0)
	if err == nil {
		t.Fatal("send to a missing queue succeeded")
	}
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %v carries no API error", err)
	}
	if !strings.Contains(err.Error(), url) {
		t.Errorf("error %q does not name the queue", err)
	}
	if queue.Retryable(err) {
		t.Errorf("missing queue (code %s) classified as retryable", apiErr.ErrorCode())
	}
}

// TestSQSIntegrationFeed: the feed's records carry what Lambda's event
// gives (the ids, the body, the attributes as strings, the queue's ARN
// and region) under the queue's own visibility timeout, and its Delete
// acknowledges: the message does not come back.
func TestSQSIntegrationFeed(t *testing.T) {
	t.Parallel()
	c := newIntegrationClient(t)
	s := queue.NewSQS(c)
	url, arn := createQueue(t, c, queueName(t, ""), map[string]string{"VisibilityTimeout": "1"})
	f := s.Feed(url, arn)
	body := testBody(t, "op-feed")
	before := time.Now().Add(-time.Second).UnixMilli()
	id, err := s.Send(context.Background(), url, body, 0)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().Add(time.Second).UnixMilli()
	var first string
	for n := 1; n <= 2; n++ { // the second receive after the 1 s visibility ran out
		msgs, err := f.Receive(context.Background(), 10, 5*time.Second)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("receive %d: %d messages, %v; want 1", n, len(msgs), err)
		}
		r := msgs[0]
		sent, serr := strconv.ParseInt(r.Attributes["SentTimestamp"], 10, 64)
		if r.MessageId != id || r.Body != string(body) || r.ReceiptHandle == "" || r.EventSourceARN != arn || r.EventSource != "aws:sqs" ||
			r.AWSRegion != strings.Split(arn, ":")[3] || r.Attributes["ApproximateReceiveCount"] != strconv.Itoa(n) ||
			serr != nil || sent < before || sent > after {
			t.Fatalf("receive %d: %+v; want message %s sent between %d and %d, received %d times, from %s", n, r, id, before, after, n, arn)
		}
		if n == 1 {
			first = r.Attributes["ApproximateFirstReceiveTimestamp"]
		} else if got := r.Attributes["ApproximateFirstReceiveTimestamp"]; got == "" || got != first {
			t.Errorf("first receive %q, then %q: want the first receive's time both times", first, got)
		}
		if n == 2 {
			if err := f.Delete(context.Background(), r.ReceiptHandle); err != nil {
				t.Fatal(err)
			}
		}
	}
	if msgs, err := f.Receive(context.Background(), 10, 3*time.Second); err != nil || len(msgs) != 0 {
		t.Fatalf("after the delete: %d messages, %v; want none", len(msgs), err)
	}
}
