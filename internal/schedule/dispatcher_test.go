package schedule_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/schedule"
)

// sent is one QueueSender call.
type sent struct {
	URL   string
	Body  []byte
	Delay time.Duration
}

// fakeSender is the consumer-side fake of the queue.
type fakeSender struct {
	mu   sync.Mutex
	sent []sent
	err  error
}

func (f *fakeSender) Send(_ context.Context, url string, body []byte, delay time.Duration) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return "", f.err
	}
	f.sent = append(f.sent, sent{URL: url, Body: append([]byte(nil), body...), Delay: delay})
	return "msg-id", nil
}

// fakeCreator records schedules and answers with err.
type fakeCreator struct {
	mu        sync.Mutex
	schedules []schedule.Schedule
	err       error
}

func (f *fakeCreator) CreateSchedule(_ context.Context, s schedule.Schedule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.schedules = append(f.schedules, s)
	return f.err
}

const (
	observeURL = "https://sqs.us-east-1.amazonaws.com/123456789012/genjobs-observe"
	observeARN = "arn:aws:sqs:us-east-1:123456789012:genjobs-observe"
	submitURL  = "https://sqs.us-east-1.amazonaws.com/123456789012/genjobs-submit"
	submitARN  = "arn:aws:sqs:us-east-1:123456789012:genjobs-submit"
	roleARN    = "arn:aws:iam::123456789012:role/genjobs-scheduler"
)

func testConfig() schedule.Config {
	return schedule.Config{
		Queues: map[message.Action]schedule.Target{
			message.ActionObserveGeneration: {URL: observeURL, ARN: observeARN},
			message.ActionSubmitGeneration:  {URL: submitURL, ARN: submitARN},
		},
		SchedulerRoleARN: roleARN,
		ScheduleGroup:    "genjobs",
		NamePrefix:       "gj-",
	}
}

var testStart = time.Date(2030, 1, 2, 3, 4, 5, 250_000_000, time.UTC)

func newTestDispatcher(t testing.TB, cfg schedule.Config, creator schedule.ScheduleCreator) (*schedule.Dispatcher, *fakeSender, *clock.Manual) {
	t.Helper()
	s := &fakeSender{}
	c := clock.NewManual(testStart)
	d, err := schedule.NewDispatcher(cfg, s, creator, c)
	if err != nil {
		t.Fatal(err)
	}
	return d, s, c
}

func TestDispatcherRoutesByDelay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		delay     time.Duration
		route     schedule.Route
		sqsDelay  time.Duration
		at        time.Time
		maxQueued time.Duration
	}{
		{name: "zero", delay: 0, route: schedule.RouteSQS, sqsDelay: 0},
		{name: "negative means now", delay: -5 * time.Second, route: schedule.RouteSQS, sqsDelay: 0},
		{name: "sub-second passes through", delay: 1500 * time.Millisecond, route: schedule.RouteSQS, sqsDelay: 1500 * time.Millisecond},
		{name: "900 s is SQS's limit", delay: 900 * time.Second, route: schedule.RouteSQS, sqsDelay: 900 * time.Second},
		{name: "just over 900 s rounds to 901", delay: 900*time.Second + time.Nanosecond, route: schedule.RouteScheduler,
			at: time.Date(2030, 1, 2, 3, 19, 6, 0, time.UTC)},
		{name: "901 s", delay: 901 * time.Second, route: schedule.RouteScheduler,
			at: time.Date(2030, 1, 2, 3, 19, 7, 0, time.UTC)},
		{name: "an hour", delay: time.Hour, route: schedule.RouteScheduler,
			at: time.Date(2030, 1, 2, 4, 4, 6, 0, time.UTC)},
		{name: "lower MaxQueueDelay", delay: 61 * time.Second, maxQueued: time.Minute, route: schedule.RouteScheduler,
			at: time.Date(2030, 1, 2, 3, 5, 7, 0, time.UTC)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.MaxQueueDelay = tc.maxQueued
			creator := &fakeCreator{}
			d, sender, _ := newTestDispatcher(t, cfg, creator)
			env := observe("op-1", 3, 2)
			want, _ := env.Encode()

			route, err := d.Send(context.Background(), env, tc.delay)
			if err != nil {
				t.Fatal(err)
			}
			if route != tc.route {
				t.Fatalf("route = %q, want %q", route, tc.route)
			}
			switch tc.route {
			case schedule.RouteSQS:
				if len(sender.sent) != 1 || len(creator.schedules) != 0 {
					t.Fatalf("%d sends and %d schedules, want 1 and 0", len(sender.sent), len(creator.schedules))
				}
				got := sender.sent[0]
				if got.URL != observeURL || got.Delay != tc.sqsDelay || string(got.Body) != string(want) {
					t.Errorf("sent %+v (body %s), want %s, %v, %s", got, got.Body, observeURL, tc.sqsDelay, want)
				}
			case schedule.RouteScheduler:
				if len(sender.sent) != 0 || len(creator.schedules) != 1 {
					t.Fatalf("%d sends and %d schedules, want 0 and 1", len(sender.sent), len(creator.schedules))
				}
				s := creator.schedules[0]
				if !s.At.Equal(tc.at) || s.At.Location() != time.UTC {
					t.Errorf("At = %v, want %v UTC", s.At, tc.at)
				}
				if s.Input != string(want) || s.TargetARN != observeARN || s.RoleARN != roleARN || s.Group != "genjobs" {
					t.Errorf("schedule = %+v", s)
				}
				if s.Name != schedule.ScheduleName("gj-", env) || s.ClientToken == "" {
					t.Errorf("name %q, token %q", s.Name, s.ClientToken)
				}
			}
		})
	}
}

// TestDispatcherScheduleAtWholeSecond: a delay landing exactly on a whole
// second is not pushed a further second.
func TestDispatcherScheduleAtWholeSecond(t *testing.T) {
	t.Parallel()
	creator := &fakeCreator{}
	d, _, _ := newTestDispatcher(t, testConfig(), creator)
	if _, err := d.Send(context.Background(), observe("op-1", 1, 1), 1000*time.Second-250*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2030, 1, 2, 3, 20, 45, 0, time.UTC); !creator.schedules[0].At.Equal(want) {
		t.Errorf("At = %v, want %v", creator.schedules[0].At, want)
	}
}

// TestDispatcherRetryIsIdempotent: the same envelope dispatched again
// (later, as a retry would be) asks for the same name and token, and an
// "already exists" answer is success.
func TestDispatcherRetryIsIdempotent(t *testing.T) {
	t.Parallel()
	creator := &fakeCreator{}
	d, _, clk := newTestDispatcher(t, testConfig(), creator)
	env := observe("op-1", 3, 2)
	if _, err := d.Send(context.Background(), env, time.Hour); err != nil {
		t.Fatal(err)
	}
	clk.Advance(47 * time.Second)
	creator.err = errors.Join(errors.New("ConflictException"), schedule.ErrScheduleExists)
	route, err := d.Send(context.Background(), env, time.Hour)
	if err != nil || route != schedule.RouteScheduler {
		t.Fatalf("retry: %q, %v; want scheduler route and success", route, err)
	}
	first, retry := creator.schedules[0], creator.schedules[1]
	if first.Name != retry.Name || first.ClientToken != retry.ClientToken {
		t.Errorf("retry used %q/%q, first %q/%q", retry.Name, retry.ClientToken, first.Name, first.ClientToken)
	}
	next := env.Next(message.ActionObserveGeneration, 3, "job-1")
	creator.err = nil
	if _, err := d.Send(context.Background(), next, time.Hour); err != nil {
		t.Fatal(err)
	}
	if other := creator.schedules[2]; other.Name == first.Name || other.ClientToken == first.ClientToken {
		t.Errorf("the next attempt reused name %q or token %q", other.Name, other.ClientToken)
	}
}

func TestDispatcherErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("invalid envelope is never sent", func(t *testing.T) {
		t.Parallel()
		d, sender, _ := newTestDispatcher(t, testConfig(), &fakeCreator{})
		bad := observe("op/with/slashes", 1, 1)
		route, err := d.Send(ctx, bad, 0)
		if !errors.Is(err, message.ErrMalformed) || route != "" || len(sender.sent) != 0 {
			t.Fatalf("route %q, err %v, %d sent", route, err, len(sender.sent))
		}
	})
	t.Run("action without a queue", func(t *testing.T) {
		t.Parallel()
		d, sender, _ := newTestDispatcher(t, testConfig(), &fakeCreator{})
		env := message.Envelope{Action: message.ActionDeliverArtifacts, OperationID: "op-1", ExpectedRevision: 1, ExpectedRemoteJobID: "j", Attempt: 0}
		if _, err := d.Send(ctx, env, 0); err == nil || !strings.Contains(err.Error(), "no queue configured") || len(sender.sent) != 0 {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("sender error is wrapped with the route", func(t *testing.T) {
		t.Parallel()
		d, sender, _ := newTestDispatcher(t, testConfig(), &fakeCreator{})
		boom := errors.New("throttled")
		sender.err = boom
		route, err := d.Send(ctx, observe("op-1", 1, 1), time.Second)
		if !errors.Is(err, boom) || route != schedule.RouteSQS || !strings.Contains(err.Error(), "op-1") {
			t.Fatalf("route %q, err %v", route, err)
		}
	})
	t.Run("scheduler error other than exists", func(t *testing.T) {
		t.Parallel()
		boom := errors.New("internal")
		d, _, _ := newTestDispatcher(t, testConfig(), &fakeCreator{err: boom})
		route, err := d.Send(ctx, observe("op-1", 1, 1), time.Hour)
		if !errors.Is(err, boom) || route != schedule.RouteScheduler {
			t.Fatalf("route %q, err %v", route, err)
		}
	})
	t.Run("long delay without a scheduler", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.SchedulerRoleARN = "" // not needed without a scheduler
		d, sender, _ := newTestDispatcher(t, cfg, nil)
		if _, err := d.Send(ctx, observe("op-1", 1, 1), 900*time.Second); err != nil {
			t.Fatalf("short delay: %v", err)
		}
		route, err := d.Send(ctx, observe("op-1", 1, 2), 901*time.Second)
		if !errors.Is(err, schedule.ErrNoScheduler) || route != schedule.RouteScheduler || len(sender.sent) != 1 {
			t.Fatalf("route %q, err %v, %d sent", route, err, len(sender.sent))
		}
	})
}

func TestNewDispatcherValidates(t *testing.T) {
	t.Parallel()
	mod := func(f func(*schedule.Config)) schedule.Config { c := testConfig(); f(&c); return c }
	cases := []struct {
		name    string
		cfg     schedule.Config
		sched   schedule.ScheduleCreator
		problem string
	}{
		{"no queues", mod(func(c *schedule.Config) { c.Queues = nil }), &fakeCreator{}, "no queues configured"},
		{"unknown action", mod(func(c *schedule.Config) { c.Queues["render"] = schedule.Target{URL: "u", ARN: "a"} }), &fakeCreator{}, `unknown action "render"`},
		{"queue without URL", mod(func(c *schedule.Config) { c.Queues[message.ActionDeliverArtifacts] = schedule.Target{ARN: "a"} }), &fakeCreator{}, "deliver_artifacts has no URL"},
		{"scheduled queue without ARN", mod(func(c *schedule.Config) {
			c.Queues[message.ActionDeliverArtifacts] = schedule.Target{URL: "u"}
			c.MaxDelay = map[message.Action]time.Duration{message.ActionDeliverArtifacts: 901 * time.Second}
		}), &fakeCreator{}, "deliver_artifacts has no ARN, which the scheduler needs: deliver_artifacts is delayed up to 15m1s, beyond the queue's 15m0s"},
		{"scheduled action without queue", mod(func(c *schedule.Config) {
			c.MaxDelay = map[message.Action]time.Duration{message.ActionDeliverArtifacts: time.Hour}
		}), &fakeCreator{}, "no queue for deliver_artifacts"},
		{"scheduled action without scheduler", mod(func(c *schedule.Config) {
			c.MaxDelay = map[message.Action]time.Duration{message.ActionObserveGeneration: time.Hour}
		}), nil, "no scheduler configured: observe_generation is delayed up to 1h0m0s"},
		{"no role", mod(func(c *schedule.Config) {
			c.SchedulerRoleARN = ""
			c.MaxDelay = map[message.Action]time.Duration{message.ActionObserveGeneration: time.Hour}
		}), &fakeCreator{}, "SchedulerRoleARN is empty"},
		{"bad prefix", mod(func(c *schedule.Config) { c.NamePrefix = "gj:" }), &fakeCreator{}, "NamePrefix"},
		{"long prefix", mod(func(c *schedule.Config) { c.NamePrefix = strings.Repeat("p", 25) }), &fakeCreator{}, "NamePrefix"},
		{"bad group", mod(func(c *schedule.Config) { c.ScheduleGroup = "a group" }), &fakeCreator{}, "ScheduleGroup"},
		{"negative MaxQueueDelay", mod(func(c *schedule.Config) { c.MaxQueueDelay = -1 }), &fakeCreator{}, "MaxQueueDelay"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := schedule.NewDispatcher(tc.cfg, &fakeSender{}, tc.sched, nil)
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.problem)
			}
		})
	}
	if _, err := schedule.NewDispatcher(testConfig(), nil, nil, nil); err == nil {
		t.Error("nil sender accepted")
	}
	// Without a scheduler, neither ARNs nor a role are needed.
	cfg := schedule.Config{Queues: map[message.Action]schedule.Target{message.ActionObserveGeneration: {URL: observeURL}}}
	if _, err := schedule.NewDispatcher(cfg, &fakeSender{}, nil, nil); err != nil {
		t.Errorf("queue-only config: %v", err)
	}
	// Nor with one, for actions that stay within the queue's limit
	// (exactly 15 minutes does).
	cfg.MaxDelay = map[message.Action]time.Duration{message.ActionObserveGeneration: 900 * time.Second}
	if _, err := schedule.NewDispatcher(cfg, &fakeSender{}, &fakeCreator{}, nil); err != nil {
		t.Errorf("config whose delays fit the queue: %v", err)
	}
}

func TestConfigScheduled(t *testing.T) {
	t.Parallel()
	c := schedule.Config{MaxDelay: map[message.Action]time.Duration{
		message.ActionSubmitGeneration:  900 * time.Second,                  // SQS's limit: the queue
		message.ActionObserveGeneration: 900*time.Second + time.Millisecond, // rounds up to 901 s: the scheduler
		message.ActionDeliverArtifacts:  0,
	}}
	if got := c.Scheduled(); !slices.Equal(got, []message.Action{message.ActionObserveGeneration}) {
		t.Errorf("Scheduled() = %v, want [observe_generation]", got)
	}
	c.MaxQueueDelay = time.Hour // a local queue that takes any delay
	if got := c.Scheduled(); len(got) != 0 {
		t.Errorf("with a 1 h queue limit, Scheduled() = %v, want none", got)
	}
}

func BenchmarkDispatcherSQSRoute(b *testing.B) {
	d, sender, _ := newTestDispatcher(b, testConfig(), &fakeCreator{})
	env := observe("op-0123456789", 3, 2)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		sender.sent = sender.sent[:0]
		if _, err := d.Send(ctx, env, 30*time.Second); err != nil {
			b.Fatal(err)
		}
	}
}

// TestObserveColdStartConfig is the observe function's deployment: its
// template gives it the URLs of the queues it sends to and the ARN of the
// one it schedules onto (observations beyond SQS's 15 minutes), nothing
// more. The dispatcher must start with that.
func TestObserveColdStartConfig(t *testing.T) {
	t.Parallel()
	cfg := schedule.Config{
		Queues: map[message.Action]schedule.Target{
			message.ActionObserveGeneration: {URL: observeURL, ARN: observeARN},
			message.ActionDeliverArtifacts:  {URL: "https://sqs.us-east-1.amazonaws.com/123456789012/genjobs-deliver"},
		},
		MaxDelay:         map[message.Action]time.Duration{message.ActionObserveGeneration: time.Hour, message.ActionDeliverArtifacts: 0},
		SchedulerRoleARN: roleARN, ScheduleGroup: "genjobs", NamePrefix: "gj-",
	}
	d, err := schedule.NewDispatcher(cfg, &fakeSender{}, &fakeCreator{}, nil)
	if err != nil {
		t.Fatalf("the observe function's configuration: %v", err)
	}
	if _, err := d.Send(context.Background(), observe("op-1", 1, 1), time.Hour); err != nil {
		t.Errorf("a long observation delay: %v", err)
	}
	// A delivery delayed past what was declared has no scheduler target:
	// a clear error, not a schedule without a target.
	env := message.Envelope{Action: message.ActionDeliverArtifacts, OperationID: "op-1", ExpectedRevision: 1, ExpectedRemoteJobID: "job-1"}
	if route, err := d.Send(context.Background(), env, time.Hour); !errors.Is(err, schedule.ErrNoScheduler) || route != schedule.RouteScheduler {
		t.Errorf("an undeclared long delivery delay: route %q, err %v; want ErrNoScheduler", route, err)
	}
}
