package queue_test

// These tests run the real SDK client against an httptest server that
// speaks SQS's JSON protocol the way real SQS does. They cover what the
// integration tests on moto cannot show is real SQS's (the attribute
// parsing, typed and query-compatible error codes as SQS spells them, a
// stale receipt handle's delete) and what needs no server at all
// (argument checks).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/genjobs/genjobs/internal/queue"
)

const testQueueURL = "https://sqs.us-east-1.amazonaws.com/000000000000/q"

// call is one request the fake received.
type call struct {
	Op   string
	Body map[string]any
}

// fakeSQS answers each call with reply(op, body): an HTTP status, extra
// headers and a JSON body.
type fakeSQS struct {
	mu    sync.Mutex
	calls []call
	reply func(op string, body map[string]any) (int, http.Header, any)
}

func (f *fakeSQS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		http.Error(w, "bad JSON", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.calls = append(f.calls, call{Op: op, Body: body})
	f.mu.Unlock()
	status, header, resp := http.StatusOK, http.Header(nil), any(map[string]any{})
	if f.reply != nil {
		status, header, resp = f.reply(op, body)
	}
	for k, vs := range header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(resp)
}

func (f *fakeSQS) Calls() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// newFake starts a fake and a real SDK client pointed at it. One attempt
// per call: the SDK's own retries would only slow the error tests down.
func newFake(t *testing.T, reply func(op string, body map[string]any) (int, http.Header, any)) (*fakeSQS, *queue.SQS) {
	t.Helper()
	f := &fakeSQS{reply: reply}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c := sqs.New(sqs.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(srv.URL),
		Credentials:      credentials.NewStaticCredentialsProvider("test", "test", ""),
		RetryMaxAttempts: 1,
	})
	return f, queue.NewSQS(c)
}

func TestSendRoundsDelayUpAndChecksRange(t *testing.T) {
	t.Parallel()
	cases := []struct {
		delay time.Duration
		want  float64 // DelaySeconds sent; -1: refused before any call
	}{
		{0, 0},
		{time.Nanosecond, 1},
		{time.Second, 1},
		{1500 * time.Millisecond, 2},
		{900 * time.Second, 900},
		{900*time.Second + time.Nanosecond, -1},
		{-time.Second, -1},
	}
	for _, tc := range cases {
		t.Run(tc.delay.String(), func(t *testing.T) {
			t.Parallel()
			f, s := newFake(t, func(string, map[string]any) (int, http.Header, any) {
				return 200, nil, map[string]any{"MessageId": "m-1"}
			})
			id, err := s.Send(context.Background(), testQueueURL, []byte(`{"x":1}`), tc.delay)
			if tc.want < 0 {
				if !errors.Is(err, queue.ErrDelayTooLong) {
					t.Fatalf("err = %v, want ErrDelayTooLong", err)
				}
				if queue.Retryable(err) {
					t.Error("ErrDelayTooLong must not be retryable")
				}
				if n := len(f.Calls()); n != 0 {
					t.Errorf("%d calls reached SQS, want none", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if id != "m-1" {
				t.Errorf("id = %q, want m-1", id)
			}
			c := f.Calls()
			if len(c) != 1 || c[0].Op != "SendMessage" {
				t.Fatalf("calls = %+v, want one SendMessage", c)
			}
			got, _ := c[0].Body["DelaySeconds"].(float64) // absent means 0
			if got != tc.want {
				t.Errorf("DelaySeconds = %v, want %v", got, tc.want)
			}
			if c[0].Body["QueueUrl"] != testQueueURL || c[0].Body["MessageBody"] != `{"x":1}` {
				t.Errorf("body = %v", c[0].Body)
			}
		})
	}
}

func TestChangeVisibilityRange(t *testing.T) {
	t.Parallel()
	cases := []struct {
		timeout time.Duration
		want    float64 // -1: refused
	}{
		{0, 0},
		{1500 * time.Millisecond, 2},
		{12 * time.Hour, 43200},
		{12*time.Hour + time.Second, -1},
		{-time.Nanosecond, -1},
	}
	for _, tc := range cases {
		t.Run(tc.timeout.String(), func(t *testing.T) {
			t.Parallel()
			f, s := newFake(t, nil)
			err := s.ChangeVisibility(context.Background(), testQueueURL, "rh-1", tc.timeout)
			if tc.want < 0 {
				if !errors.Is(err, queue.ErrInvalidArgument) || len(f.Calls()) != 0 {
					t.Fatalf("err = %v with %d calls, want ErrInvalidArgument and none", err, len(f.Calls()))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c := f.Calls()
			if len(c) != 1 || c[0].Op != "ChangeMessageVisibility" {
				t.Fatalf("calls = %+v", c)
			}
			got, _ := c[0].Body["VisibilityTimeout"].(float64)
			if got != tc.want || c[0].Body["ReceiptHandle"] != "rh-1" {
				t.Errorf("body = %v, want VisibilityTimeout %v", c[0].Body, tc.want)
			}
		})
	}
}

func TestArgumentChecksNeedNoCall(t *testing.T) {
	t.Parallel()
	f, s := newFake(t, nil)
	ctx := context.Background()
	checks := map[string]error{
		"send without URL":        func() error { _, err := s.Send(ctx, "", nil, 0); return err }(),
		"delete without handle":   s.Delete(ctx, testQueueURL, ""),
		"visibility without URL":  s.ChangeVisibility(ctx, "", "rh", 0),
		"receive max 0":           func() error { _, err := s.Receive(ctx, testQueueURL, 0, 0, 0); return err }(),
		"receive max 11":          func() error { _, err := s.Receive(ctx, testQueueURL, 11, 0, 0); return err }(),
		"receive wait 21s":        func() error { _, err := s.Receive(ctx, testQueueURL, 1, 21*time.Second, 0); return err }(),
		"receive visibility 13h":  func() error { _, err := s.Receive(ctx, testQueueURL, 1, 0, 13*time.Hour); return err }(),
		"receive negative wait":   func() error { _, err := s.Receive(ctx, testQueueURL, 1, -time.Second, 0); return err }(),
		"receive without a queue": func() error { _, err := s.Receive(ctx, "", 1, 0, 0); return err }(),
	}
	for name, err := range checks {
		if !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", name, err)
		}
		if queue.Retryable(err) {
			t.Errorf("%s: retryable, want not", name)
		}
	}
	if n := len(f.Calls()); n != 0 {
		t.Errorf("%d calls reached SQS, want none", n)
	}
}

// TestReceiveParsesAttributes parses the receive count, the sent time and
// the first receive time as real SQS reports them.
func TestReceiveParsesAttributes(t *testing.T) {
	t.Parallel()
	f, s := newFake(t, func(string, map[string]any) (int, http.Header, any) {
		return 200, nil, map[string]any{"Messages": []map[string]any{
			{
				"MessageId": "m-1", "ReceiptHandle": "rh-1", "Body": "one",
				"MD5OfBody":  "f97c5d29941bfb1b2fdab0874906ab82",
				"Attributes": map[string]string{"ApproximateReceiveCount": "3", "SentTimestamp": "1700000000123", "ApproximateFirstReceiveTimestamp": "1700000004567"},
			},
			{
				"MessageId": "m-2", "ReceiptHandle": "rh-2", "Body": "two",
				"MD5OfBody":  "b8a9f715dbb64fd5c56e7783c6820a61",
				"Attributes": map[string]string{"ApproximateReceiveCount": "many", "SentTimestamp": "", "ApproximateFirstReceiveTimestamp": "soon"},
			},
		}}
	})
	msgs, err := s.Receive(context.Background(), testQueueURL, 10, 20*time.Second, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 {
		t.Fatalf("got %d messages, want 2", len(msgs))
	}
	m := msgs[0]
	if m.ID != "m-1" || string(m.Body) != "one" || m.ReceiptHandle != "rh-1" {
		t.Errorf("message = %+v", m)
	}
	if m.Attributes.ApproximateReceiveCount != 3 {
		t.Errorf("ApproximateReceiveCount = %d, want 3", m.Attributes.ApproximateReceiveCount)
	}
	if want := time.UnixMilli(1700000000123).UTC(); !m.Attributes.SentTimestamp.Equal(want) {
		t.Errorf("SentTimestamp = %v, want %v", m.Attributes.SentTimestamp, want)
	}
	if want := time.UnixMilli(1700000004567).UTC(); !m.Attributes.ApproximateFirstReceiveTimestamp.Equal(want) {
		t.Errorf("ApproximateFirstReceiveTimestamp = %v, want %v", m.Attributes.ApproximateFirstReceiveTimestamp, want)
	}
	if a := msgs[1].Attributes; a != (queue.Attributes{}) {
		t.Errorf("unparseable attributes gave %+v, want zero values", a)
	}

	req := f.Calls()[0].Body
	if req["MaxNumberOfMessages"] != 10.0 || req["WaitTimeSeconds"] != 20.0 || req["VisibilityTimeout"] != 90.0 {
		t.Errorf("request = %v", req)
	}
	names := fmt.Sprint(req["MessageSystemAttributeNames"])
	for _, want := range []string{"ApproximateReceiveCount", "SentTimestamp", "ApproximateFirstReceiveTimestamp"} {
		if !strings.Contains(names, want) {
			t.Errorf("MessageSystemAttributeNames = %s, want %s among them", names, want)
		}
	}
}

// TestDeleteStaleReceiptHandle: real SQS answers 200 to a delete with a
// receipt handle from an earlier receive, so Delete
// succeeds and a redelivered message is acknowledged without fuss.
func TestDeleteStaleReceiptHandle(t *testing.T) {
	t.Parallel()
	_, s := newFake(t, nil)
	if err := s.Delete(context.Background(), testQueueURL, "stale-handle"); err != nil {
		t.Fatal(err)
	}
}

// TestErrorsFromTheWire drives real error responses through the SDK in
// real SQS's spelling (a __type plus the query-compatible code header),
// so Retryable sees what it will see in production.
func TestErrorsFromTheWire(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		status    int
		header    http.Header
		body      any
		retryable bool
	}{
		{"sqs missing queue", 400,
			http.Header{"X-Amzn-Query-Error": {"AWS.SimpleQueueService.NonExistentQueue;Sender"}},
			map[string]string{"__type": "com.amazonaws.sqs#QueueDoesNotExist", "message": "The specified queue does not exist."}, false},
		{"invalid parameter", 400, nil,
			map[string]string{"__type": "com.amazonaws.sqs#InvalidParameterValue", "message": "bad"}, false},
		{"sqs throttled", 400,
			http.Header{"X-Amzn-Query-Error": {"AWS.SimpleQueueService.RequestThrottled;Sender"}},
			map[string]string{"__type": "com.amazonaws.sqs#RequestThrottled", "message": "slow down"}, true},
		{"internal error", 500, nil,
			map[string]string{"__type": "com.amazonaws.sqs#InternalError"}, true},
		{"bare 503", 503, nil, map[string]string{}, true},
		{"unknown 400", 400, nil, map[string]string{"__type": "SomethingNew"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, s := newFake(t, func(string, map[string]any) (int, http.Header, any) {
				return tc.status, tc.header, tc.body
			})
			_, err := s.Send(context.Background(), testQueueURL, []byte("b"), 0)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), "sqs send to "+testQueueURL) {
				t.Errorf("error %q lacks its context", err)
			}
			if got := queue.Retryable(err); got != tc.retryable {
				t.Errorf("Retryable(%v) = %v, want %v", err, got, tc.retryable)
			}
		})
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var _ net.Error = timeoutErr{}

func TestRetryable(t *testing.T) {
	t.Parallel()
	api := func(code string) error { return &smithy.GenericAPIError{Code: code, Message: "m"} }
	override := "AWS.SimpleQueueService.NonExistentQueue"
	status := func(code int) error {
		return &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}}, Err: errors.New("x")}
	}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain error", errors.New("boom"), false},
		{"throttling", api("ThrottlingException"), true},
		{"request throttled", api("RequestThrottled"), true},
		{"query throttled", api("AWS.SimpleQueueService.RequestThrottled"), true},
		{"kms throttled", api("KmsThrottled"), true},
		{"service unavailable", api("ServiceUnavailable"), true},
		{"internal error", api("InternalError"), true},
		{"invalid parameter", api("InvalidParameterValue"), false},
		{"non-existent queue", api("AWS.SimpleQueueService.NonExistentQueue"), false},
		{"typed missing queue", &types.QueueDoesNotExist{ErrorCodeOverride: &override}, false},
		{"not in flight", api("AWS.SimpleQueueService.MessageNotInflight"), false},
		{"invalid receipt handle", api("ReceiptHandleIsInvalid"), false},
		{"access denied", api("AccessDenied"), false},
		{"wrapped throttling", fmt.Errorf("sqs send: %w", api("Throttling")), true},
		{"5xx status", status(502), true},
		{"429 status", status(429), true},
		{"4xx status", status(403), false},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), false},
		{"net timeout", &net.OpError{Op: "read", Err: timeoutErr{}}, true},
		{"connection reset", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, true},
		{"delay too long", fmt.Errorf("x: %w", queue.ErrDelayTooLong), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := queue.Retryable(tc.err); got != tc.want {
				t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestQueueURLFromARN(t *testing.T) {
	t.Parallel()
	cases := []struct {
		arn, want, problem string
	}{
		{arn: "arn:aws:sqs:us-east-1:123456789012:genjobs-observe", want: "https://sqs.us-east-1.amazonaws.com/123456789012/genjobs-observe"},
		{arn: "arn:aws:sqs:eu-west-1:123456789012:jobs.fifo", want: "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs.fifo"},
		{arn: "arn:aws-us-gov:sqs:us-gov-west-1:123456789012:q", want: "https://sqs.us-gov-west-1.amazonaws.com/123456789012/q"},
		{arn: "arn:aws-cn:sqs:cn-north-1:123456789012:q_1", want: "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q_1"},
		{arn: "", problem: "want arn:PARTITION"},
		{arn: "arn:aws:sqs:us-east-1:123456789012", problem: "want arn:PARTITION"},
		{arn: "arn:aws:sqs:us-east-1:123456789012:q:extra", problem: "want arn:PARTITION"},
		{arn: "urn:aws:sqs:us-east-1:123456789012:q", problem: "want arn:PARTITION"},
		{arn: "arn:aws:sns:us-east-1:123456789012:q", problem: "not sqs"},
		{arn: "arn:madeup:sqs:us-east-1:123456789012:q", problem: "unknown partition"},
		{arn: "arn:aws:sqs::123456789012:q", problem: "malformed region"},
		{arn: "arn:aws:sqs:US-EAST-1:123456789012:q", problem: "malformed region"},
		{arn: "arn:aws:sqs:us-east-1:12345:q", problem: "not 12 digits"},
		{arn: "arn:aws:sqs:us-east-1:123456789012:", problem: "malformed queue name"},
		{arn: "arn:aws:sqs:us-east-1:123456789012:has/slash", problem: "malformed queue name"},
		{arn: "arn:aws:sqs:us-east-1:123456789012:" + strings.Repeat("q", 81), problem: "malformed queue name"},
		{arn: "arn:aws:sqs:us-east-1:123456789012:.fifo", problem: "malformed queue name"},
	}
	for _, tc := range cases {
		got, err := queue.QueueURLFromARN(tc.arn)
		if tc.problem == "" {
			if err != nil || got != tc.want {
				t.Errorf("QueueURLFromARN(%q) = %q, %v; want %q", tc.arn, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.problem) {
			t.Errorf("QueueURLFromARN(%q) error = %v, want one mentioning %q", tc.arn, err, tc.problem)
		}
	}
}

// TestDepth asks for the three counts in one call and reads them; a count
// missing, negative or not a number is an error naming it, never a zero
// that would read as an empty queue.
func TestDepth(t *testing.T) {
	t.Parallel()
	full := map[string]string{
		"ApproximateNumberOfMessages":           "7",
		"ApproximateNumberOfMessagesNotVisible": "2",
		"ApproximateNumberOfMessagesDelayed":    "1",
	}
	f, s := newFake(t, func(op string, body map[string]any) (int, http.Header, any) {
		return http.StatusOK, nil, map[string]any{"Attributes": full}
	})
	d, err := s.Depth(context.Background(), testQueueURL)
	if err != nil || d != (queue.Depth{Visible: 7, InFlight: 2, Delayed: 1}) || d.Total() != 10 {
		t.Fatalf("Depth = %+v (total %d), %v; want 7 visible, 2 in flight, 1 delayed, total 10", d, d.Total(), err)
	}
	calls := f.Calls()
	if len(calls) != 1 || calls[0].Op != "GetQueueAttributes" || calls[0].Body["QueueUrl"] != testQueueURL {
		t.Fatalf("calls %+v, want one GetQueueAttributes of %s", calls, testQueueURL)
	}
	names, _ := json.Marshal(calls[0].Body["AttributeNames"])
	if want := `["ApproximateNumberOfMessages","ApproximateNumberOfMessagesNotVisible","ApproximateNumberOfMessagesDelayed"]`; string(names) != want {
		t.Errorf("asked for %s, want %s", names, want)
	}

	for _, name := range []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"} {
		for _, bad := range []string{"", "x", "-1", "1.5", "absent"} {
			attrs := maps.Clone(full)
			if bad == "absent" {
				delete(attrs, name)
			} else {
				attrs[name] = bad
			}
			_, s := newFake(t, func(string, map[string]any) (int, http.Header, any) {
				return http.StatusOK, nil, map[string]any{"Attributes": attrs}
			})
			d, err := s.Depth(context.Background(), testQueueURL)
			if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), testQueueURL) {
				t.Errorf("%s %q: Depth = %+v, %v; want an error naming %s and the queue", name, bad, d, err, name)
			}
		}
	}

	_, s = newFake(t, func(string, map[string]any) (int, http.Header, any) {
		return http.StatusBadRequest, http.Header{"X-Amzn-Query-Error": {"AWS.SimpleQueueService.NonExistentQueue;Sender"}},
			map[string]any{"__type": "com.amazonaws.sqs#QueueDoesNotExist", "message": "The specified queue does not exist."}
	})
	_, err = s.Depth(context.Background(), testQueueURL)
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || !strings.HasPrefix(err.Error(), "queue depth "+testQueueURL+": ") || queue.Retryable(err) {
		t.Errorf("missing queue: %v; want the API error wrapped as queue depth %s, not retryable", err, testQueueURL)
	}
	if _, err := s.Depth(context.Background(), ""); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("empty URL: %v, want ErrInvalidArgument", err)
	}
}
