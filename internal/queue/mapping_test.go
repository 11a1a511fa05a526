package queue_test

// These tests run the real Lambda client against an httptest server
// answering Lambda's REST API as real Lambda does, for what the
// integration test on moto cannot show: that an update sends nothing but
// the scaling config (so it cannot reset the mapping's other settings),
// that out-of-range values never reach Lambda, and how Lambda's errors are
// classified.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/smithy-go"

	"github.com/genjobs/genjobs/internal/queue"
)

// capacity is the interface the sweep consumes (a copy: the sweep
// declares its own). Capacity must keep satisfying it.
type capacity interface {
	Depth(context.Context) (queue.Depth, error)
	MaxConcurrency(context.Context) (int, error)
	SetMaxConcurrency(context.Context, int) error
}

var (
	_ capacity = queue.Capacity{}
	_ capacity = (*queue.Capacity)(nil)
)

const testMappingUUID = "a1b2c3d4-5678-90ab-cdef-11111EXAMPLE"

// lambdaCall is one request the fake Lambda received.
type lambdaCall struct {
	Method, Path string
	Body         map[string]any
}

// fakeLambda answers each request with reply(call): a status, an error
// type for X-Amzn-ErrorType (empty for success) and a JSON body.
type fakeLambda struct {
	mu    sync.Mutex
	calls []lambdaCall
	reply func(lambdaCall) (int, string, any)
}

func (f *fakeLambda) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := lambdaCall{Method: r.Method, Path: r.URL.Path}
	if raw, _ := io.ReadAll(r.Body); len(raw) > 0 {
		if err := json.Unmarshal(raw, &c.Body); err != nil {
			http.Error(w, "bad JSON", http.StatusBadRequest)
			return
		}
	}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	status, errType, resp := http.StatusOK, "", any(map[string]any{})
	if f.reply != nil {
		status, errType, resp = f.reply(c)
	}
	if errType != "" {
		w.Header().Set("X-Amzn-ErrorType", errType)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(resp)
}

func (f *fakeLambda) Calls() []lambdaCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]lambdaCall(nil), f.calls...)
}

func newFakeMapping(t *testing.T, uuid string, reply func(lambdaCall) (int, string, any)) (*fakeLambda, *queue.Mapping) {
	t.Helper()
	f := &fakeLambda{reply: reply}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c := lambda.New(lambda.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(srv.URL),
		Credentials:      credentials.NewStaticCredentialsProvider("test", "test", ""),
		RetryMaxAttempts: 1,
	})
	return f, queue.NewMapping(c, uuid)
}

// mappingJSON is a GetEventSourceMapping/UpdateEventSourceMapping answer
// as Lambda gives it, with scaling (nil: none set).
func mappingJSON(scaling map[string]any) map[string]any {
	m := map[string]any{
		"UUID":           testMappingUUID,
		"BatchSize":      10,
		"EventSourceArn": "arn:aws:sqs:us-east-1:123456789012:genjobs-observe",
		"FunctionArn":    "arn:aws:lambda:us-east-1:123456789012:function:genjobs-observe",
		"State":          "Enabled",
	}
	if scaling != nil {
		m["ScalingConfig"] = scaling
	}
	return m
}

// TestSetMaxConcurrencyRange: Lambda's bounds are checked before any
// call, and an accepted n is sent as the scaling config alone, to the
// mapping's own resource.
func TestSetMaxConcurrencyRange(t *testing.T) {
	t.Parallel()
	cases := []struct {
		n  int
		ok bool
	}{{-1, false}, {0, false}, {1, false}, {2, true}, {3, true}, {1000, true}, {1001, false}}
	for _, tc := range cases {
		f, m := newFakeMapping(t, testMappingUUID, func(lambdaCall) (int, string, any) {
			return http.StatusAccepted, "", mappingJSON(map[string]any{"MaximumConcurrency": 3})
		})
		err := m.SetMaxConcurrency(context.Background(), tc.n)
		calls := f.Calls()
		if !tc.ok {
			if !errors.Is(err, queue.ErrInvalidArgument) || queue.Retryable(err) {
				t.Errorf("n=%d: err = %v, want a non-retryable ErrInvalidArgument", tc.n, err)
			}
			if len(calls) != 0 {
				t.Errorf("n=%d: %d calls reached Lambda, want none", tc.n, len(calls))
			}
			continue
		}
		if err != nil {
			t.Errorf("n=%d: %v", tc.n, err)
			continue
		}
		if len(calls) != 1 {
			t.Fatalf("n=%d: %d calls, want 1", tc.n, len(calls))
		}
		c := calls[0]
		got, _ := json.Marshal(c.Body)
		want, _ := json.Marshal(map[string]any{"ScalingConfig": map[string]any{"MaximumConcurrency": tc.n}})
		if c.Method != http.MethodPut || c.Path != "/2015-03-31/event-source-mappings/"+testMappingUUID || string(got) != string(want) {
			t.Errorf("n=%d: %s %s %s, want PUT /2015-03-31/event-source-mappings/%s %s", tc.n, c.Method, c.Path, got, testMappingUUID, want)
		}
	}
}

// TestMaxConcurrency reads the scaling config, and a mapping without one
// as 0 (unbounded), not as an error.
func TestMaxConcurrency(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		scaling map[string]any
		want    int
	}{
		"set":              {map[string]any{"MaximumConcurrency": 8}, 8},
		"no scaling":       {nil, 0},
		"empty scaling":    {map[string]any{}, 0},
		"the upper bound":  {map[string]any{"MaximumConcurrency": 1000}, 1000},
		"the lower bound":  {map[string]any{"MaximumConcurrency": 2}, 2},
		"a different one":  {map[string]any{"MaximumConcurrency": 37}, 37},
		"only other field": {map[string]any{"Unknown": 1}, 0},
	} {
		f, m := newFakeMapping(t, testMappingUUID, func(lambdaCall) (int, string, any) {
			return http.StatusOK, "", mappingJSON(tc.scaling)
		})
		got, err := m.MaxConcurrency(context.Background())
		if err != nil || got != tc.want {
			t.Errorf("%s: %d, %v; want %d", name, got, err, tc.want)
		}
		if calls := f.Calls(); len(calls) != 1 || calls[0].Method != http.MethodGet || calls[0].Path != "/2015-03-31/event-source-mappings/"+testMappingUUID {
			t.Errorf("%s: calls %+v, want one GET of the mapping", name, calls)
		}
	}
}

// TestMappingErrors: Lambda's errors come back wrapped with the mapping's
// UUID and classified: a missing mapping is permanent, an update while
// the previous one is still being applied (ResourceInUseException) and
// throttling are worth retrying. An empty UUID never reaches Lambda.
func TestMappingErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status    int
		errType   string
		retryable bool
	}{
		{http.StatusNotFound, "ResourceNotFoundException", false},
		{http.StatusBadRequest, "InvalidParameterValueException", false},
		{http.StatusBadRequest, "ResourceInUseException", true},
		{http.StatusTooManyRequests, "TooManyRequestsException", true},
		{http.StatusInternalServerError, "ServiceException", true},
	} {
		_, m := newFakeMapping(t, testMappingUUID, func(lambdaCall) (int, string, any) {
			return tc.status, tc.errType, map[string]any{"Type": "User", "message": "from the fake"}
		})
		for op, err := range map[string]error{
			"get": func() error { _, err := m.MaxConcurrency(context.Background()); return err }(),
			"set": m.SetMaxConcurrency(context.Background(), 5),
		} {
			var apiErr smithy.APIError
			if !errors.As(err, &apiErr) || apiErr.ErrorCode() != tc.errType {
				t.Errorf("%s %s: err = %v, want the API error %s", op, tc.errType, err, tc.errType)
				continue
			}
			if !strings.Contains(err.Error(), testMappingUUID) {
				t.Errorf("%s %s: %q does not name the mapping", op, tc.errType, err)
			}
			if got := queue.Retryable(err); got != tc.retryable {
				t.Errorf("%s %s: Retryable = %v, want %v", op, tc.errType, got, tc.retryable)
			}
		}
	}

	f, m := newFakeMapping(t, "", nil)
	if _, err := m.MaxConcurrency(context.Background()); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("get without a UUID: %v, want ErrInvalidArgument", err)
	}
	if err := m.SetMaxConcurrency(context.Background(), 5); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("set without a UUID: %v, want ErrInvalidArgument", err)
	}
	if n := len(f.Calls()); n != 0 {
		t.Errorf("%d calls without a UUID reached Lambda, want none", n)
	}
}
