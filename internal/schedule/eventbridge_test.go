package schedule_test

// EventBridge Scheduler has no emulator; these tests run the real SDK
// client against an httptest server that checks each request's shape and
// answers as the service does.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"

	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/queue"
	"github.com/genjobs/genjobs/internal/schedule"
)

// createRequest is the JSON body of CreateSchedule, as the wire has it.
type createRequest struct {
	ActionAfterCompletion      string
	ClientToken                string
	FlexibleTimeWindow         struct{ Mode string }
	GroupName                  string
	ScheduleExpression         string
	ScheduleExpressionTimezone string
	Target                     struct {
		Arn, RoleArn, Input string
		RetryPolicy         *struct{ MaximumEventAgeInSeconds, MaximumRetryAttempts int }
		DeadLetterConfig    *struct{ Arn string }
	}
}

type seenRequest struct {
	Method, Path string
	Body         createRequest
	Raw          map[string]any
}

// fakeScheduler records requests and answers with the status queued in
// statuses (200 when empty).
type fakeScheduler struct {
	mu       sync.Mutex
	requests []seenRequest
	statuses []int
}

func (f *fakeScheduler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var req seenRequest
	req.Method, req.Path = r.Method, r.URL.Path
	if err := json.Unmarshal(raw, &req.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	_ = json.Unmarshal(raw, &req.Raw)
	f.mu.Lock()
	f.requests = append(f.requests, req)
	status := http.StatusOK
	if len(f.statuses) > 0 {
		status, f.statuses = f.statuses[0], f.statuses[1:]
	}
	f.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	switch status {
	case http.StatusOK:
		name := strings.TrimPrefix(r.URL.Path, "/schedules/")
		_ = json.NewEncoder(w).Encode(map[string]string{
			"ScheduleArn": "arn:aws:scheduler:us-east-1:123456789012:schedule/" + req.Body.GroupName + "/" + name,
		})
	case http.StatusConflict:
		w.Header().Set("X-Amzn-Errortype", "ConflictException")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"Message": "Schedule already exists."})
	default:
		w.Header().Set("X-Amzn-Errortype", "InternalServerException")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"Message": "Unexpected error."})
	}
}

func (f *fakeScheduler) Requests() []seenRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenRequest(nil), f.requests...)
}

// newSchedulerDispatcher wires a Dispatcher to the real adapter and SDK
// client, pointed at a fake through BaseEndpoint with static credentials.
// One attempt per call, so a 500 is seen once, not retried by the SDK.
func newSchedulerDispatcher(t *testing.T, statuses ...int) (*schedule.Dispatcher, *schedule.EventBridgeScheduler, *fakeScheduler) {
	t.Helper()
	f := &fakeScheduler{statuses: statuses}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	client := scheduler.New(scheduler.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(srv.URL),
		Credentials:      credentials.NewStaticCredentialsProvider("test", "test", ""),
		RetryMaxAttempts: 1,
	})
	adapter := schedule.NewEventBridgeScheduler(client, dlqARN)
	d, _, _ := newTestDispatcher(t, testConfig(), adapter)
	return d, adapter, f
}

const dlqARN = "arn:aws:sqs:us-east-1:123456789012:genjobs-observe-dlq"

var clientTokenRule = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func TestEventBridgeSchedulerRequestShape(t *testing.T) {
	t.Parallel()
	d, _, f := newSchedulerDispatcher(t)
	env := observe("op:with-colon", 3, 2)
	route, err := d.Send(context.Background(), env, 901*time.Second)
	if err != nil || route != schedule.RouteScheduler {
		t.Fatalf("Send: %q, %v", route, err)
	}
	reqs := f.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	name := schedule.ScheduleName("gj-", env)
	if r.Method != http.MethodPost || r.Path != "/schedules/"+name {
		t.Errorf("%s %s, want POST /schedules/%s", r.Method, r.Path, name)
	}
	// testStart 03:04:05.25 + 901 s = 03:19:06.25, rounded up.
	b := r.Body
	if b.ScheduleExpression != "at(2030-01-02T03:19:07)" {
		t.Errorf("ScheduleExpression = %q", b.ScheduleExpression)
	}
	if b.ScheduleExpressionTimezone != "UTC" {
		t.Errorf("ScheduleExpressionTimezone = %q", b.ScheduleExpressionTimezone)
	}
	if b.FlexibleTimeWindow.Mode != "OFF" || b.ActionAfterCompletion != "DELETE" || b.GroupName != "genjobs" {
		t.Errorf("window %q, after completion %q, group %q", b.FlexibleTimeWindow.Mode, b.ActionAfterCompletion, b.GroupName)
	}
	if b.Target.Arn != observeARN || b.Target.RoleArn != roleARN {
		t.Errorf("target %+v", b.Target)
	}
	// A delivery that keeps failing ends in the dead-letter queue (which
	// triage reads), after bounded retries, instead of being dropped.
	if dl := b.Target.DeadLetterConfig; dl == nil || dl.Arn != dlqARN {
		t.Errorf("Target.DeadLetterConfig %+v, want Arn %s", dl, dlqARN)
	}
	if rp := b.Target.RetryPolicy; rp == nil || rp.MaximumRetryAttempts != schedule.TargetRetryAttempts ||
		rp.MaximumEventAgeInSeconds != int(schedule.TargetMaxEventAge/time.Second) {
		t.Errorf("Target.RetryPolicy %+v, want %d attempts within %v", rp, schedule.TargetRetryAttempts, schedule.TargetMaxEventAge)
	}
	got, err := message.Decode([]byte(b.Target.Input))
	if err != nil {
		t.Fatalf("Target.Input is not a valid envelope: %v", err)
	}
	if got != env {
		t.Errorf("Target.Input decodes to %+v, want %+v", got, env)
	}
	if !clientTokenRule.MatchString(b.ClientToken) {
		t.Errorf("ClientToken %q breaks Scheduler's rule", b.ClientToken)
	}
	if _, ok := r.Raw["Name"]; ok {
		t.Error("Name travels in the path, not the body")
	}
}

// TestEventBridgeSchedulerRetrySameName: the same envelope dispatched
// again hits the same schedule, with the same client token.
func TestEventBridgeSchedulerRetrySameName(t *testing.T) {
	t.Parallel()
	d, _, f := newSchedulerDispatcher(t)
	env := observe("op-1", 3, 2)
	for range 2 {
		if _, err := d.Send(context.Background(), env, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Send(context.Background(), observe("op-1", 3, 3), time.Hour); err != nil {
		t.Fatal(err)
	}
	r := f.Requests()
	if r[0].Path != r[1].Path || r[0].Body.ClientToken != r[1].Body.ClientToken {
		t.Errorf("retry: %s/%s vs %s/%s", r[1].Path, r[1].Body.ClientToken, r[0].Path, r[0].Body.ClientToken)
	}
	if r[2].Path == r[0].Path || r[2].Body.ClientToken == r[0].Body.ClientToken {
		t.Errorf("next attempt reused %s or its token", r[0].Path)
	}
}

// TestEventBridgeSchedulerConflictIsSuccess: a 409 ConflictException
// means an earlier try created the schedule.
func TestEventBridgeSchedulerConflictIsSuccess(t *testing.T) {
	t.Parallel()
	d, adapter, _ := newSchedulerDispatcher(t, http.StatusConflict, http.StatusConflict)
	route, err := d.Send(context.Background(), observe("op-1", 3, 2), time.Hour)
	if err != nil || route != schedule.RouteScheduler {
		t.Fatalf("Send after 409: %q, %v; want success", route, err)
	}
	err = adapter.CreateSchedule(context.Background(), schedule.Schedule{
		Name: "n", At: testStart, TargetARN: observeARN, RoleARN: roleARN, Input: "{}",
	})
	if !errors.Is(err, schedule.ErrScheduleExists) {
		t.Errorf("adapter on 409: %v, want ErrScheduleExists", err)
	}
}

func TestEventBridgeSchedulerServerError(t *testing.T) {
	t.Parallel()
	d, _, f := newSchedulerDispatcher(t, http.StatusInternalServerError)
	route, err := d.Send(context.Background(), observe("op-1", 3, 2), time.Hour)
	if err == nil || errors.Is(err, schedule.ErrScheduleExists) || route != schedule.RouteScheduler {
		t.Fatalf("Send after 500: %q, %v; want a scheduler-route error", route, err)
	}
	if !strings.Contains(err.Error(), "InternalServerException") || !strings.Contains(err.Error(), "op-1") {
		t.Errorf("error %q lacks the cause or the operation", err)
	}
	if n := len(f.Requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
	if !queue.Retryable(err) {
		t.Errorf("a 500 from Scheduler must be retryable: %v", err)
	}
}
