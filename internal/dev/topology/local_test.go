package topology_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/eventsource"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/queue"
)

// TestLocalRedrivesAsDeclared: each main queue of a Local redrives a
// message to its dead-letter queue after MaxReceiveCount receives, and
// the dead-letter queue's mapping hands it to triage.
func TestLocalRedrivesAsDeclared(t *testing.T) {
	t.Parallel()
	for _, a := range message.Actions {
		t.Run(string(a), func(t *testing.T) {
			t.Parallel()
			clk := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			l, err := topology.Stack.Local(topology.LocalConfig{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			var triaged []string
			fail := func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
				return events.SQSEventResponse{}, errors.New("always fails")
			}
			triage := func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
				for _, r := range ev.Records {
					triaged = append(triaged, r.EventSourceARN+" "+r.Attributes["ApproximateReceiveCount"])
				}
				return events.SQSEventResponse{}, nil
			}
			// Stepped on a manual clock, as the fault simulation steps it.
			l.Consume(topology.ConsumeConfig{NoBatchingWindows: true, Handlers: map[string]eventsource.Handler{
				topology.Submit: fail, topology.Observe: fail, topology.Deliver: fail, topology.Triage: triage,
			}})
			i := slices.IndexFunc(topology.Stack.Queues, func(q topology.Queue) bool { return q.Action == a })
			if i < 0 {
				t.Fatalf("no queue carries %s", a)
			}
			main := topology.Stack.Queues[i]
			if got := l.Targets()[a].URL; got != l.URL(main.ID) || got == "" {
				t.Fatalf("target of %s is %q, want %s's URL %q", a, got, main.ID, l.URL(main.ID))
			}
			if _, err := l.Broker.Send(context.Background(), l.URL(main.ID), []byte("poison"), 0); err != nil {
				t.Fatal(err)
			}
			for range topology.MaxReceiveCount + 1 {
				for _, m := range l.Mappings {
					if _, err := m.PollOnce(context.Background()); err != nil && !errors.Is(err, eventsource.ErrInvocation) {
						t.Fatal(err)
					}
				}
				clk.Advance(main.Visibility)
			}
			dlq, err := l.Broker.Info(l.URL(main.DeadLetter))
			if err != nil {
				t.Fatal(err)
			}
			want := dlq.ARN + " 6"
			if len(triaged) != 1 || triaged[0] != want {
				t.Fatalf("triage saw %q, want [%s]", triaged, want)
			}
		})
	}
}

// TestConsumeTakesTheTopology: the mappings get the topology's batch
// sizes, concurrency and timeouts, in the topology's order, and the
// overrides replace them.
func TestConsumeTakesTheTopology(t *testing.T) {
	t.Parallel()
	h := func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
		return events.SQSEventResponse{}, nil
	}
	handlers := map[string]eventsource.Handler{topology.Submit: h, topology.Observe: h, topology.Deliver: h, topology.Triage: h}
	for _, tc := range []struct {
		name    string
		cfg     topology.ConsumeConfig
		workers func(topology.Mapping) int
		window  func(topology.Mapping) time.Duration
	}{
		{"as declared", topology.ConsumeConfig{Handlers: handlers},
			func(m topology.Mapping) int { return m.MaxConcurrency },
			func(m topology.Mapping) time.Duration { return m.BatchingWindow }},
		{"overridden", topology.ConsumeConfig{Handlers: handlers,
			Workers:           func(topology.Function, topology.Mapping) int { return 1 },
			NoBatchingWindows: true},
			func(topology.Mapping) int { return 1 },
			func(topology.Mapping) time.Duration { return 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, err := topology.Stack.Local(topology.LocalConfig{})
			if err != nil {
				t.Fatal(err)
			}
			l.Consume(tc.cfg)
			i := 0
			for _, f := range topology.Stack.Functions {
				for _, mp := range f.Mappings {
					if i >= len(l.Mappings) {
						t.Fatalf("%d mappings, want more", len(l.Mappings))
					}
					got := l.Mappings[i]
					i++
					if got.Function.Name != f.Name || got.Queue.ID != mp.Queue || got.Mapping.Queue != l.URL(mp.Queue) ||
						got.BatchSize != mp.BatchSize || got.Workers != tc.workers(mp) || got.Timeout != f.Timeout || got.BatchingWindow != tc.window(mp) {
						t.Errorf("mapping %d: %s on %s batch %d window %v workers %d timeout %v; want %s on %s batch %d window %v workers %d timeout %v",
							i, got.Function.Name, got.Queue.ID, got.BatchSize, got.BatchingWindow, got.Workers, got.Timeout,
							f.Name, mp.Queue, mp.BatchSize, tc.window(mp), tc.workers(mp), f.Timeout)
					}
				}
			}
			if i != len(l.Mappings) {
				t.Errorf("%d mappings, want %d", len(l.Mappings), i)
			}
		})
	}
}

// TestLocalFeedIsObservesOwnQueue: only the function that holds records
// (observe) gets a feed, on the queue it consumes, and what the feed
// receives counts in that function's Stats.
func TestLocalFeedIsObservesOwnQueue(t *testing.T) {
	t.Parallel()
	l, err := topology.Stack.Local(topology.LocalConfig{Clock: clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range topology.Stack.Functions {
		if got := l.Feed(f.Name) != nil; got != (f.Name == topology.Observe) {
			t.Errorf("%s: a feed %v, want one for observe alone", f.Name, got)
		}
	}
	_, url, _ := l.Consumed(topology.Observe)
	if _, err := l.Broker.Send(context.Background(), url, []byte("m"), 0); err != nil {
		t.Fatal(err)
	}
	msgs, err := l.Feed(topology.Observe).Receive(context.Background(), 10, 0)
	if err != nil || len(msgs) != 1 || msgs[0].Body != "m" {
		t.Fatalf("feed received %+v, %v; want the message sent to observe's queue", msgs, err)
	}
	if got := l.Stats()[topology.Observe].Records; got != 1 {
		t.Errorf("observe's records %d, want the one its feed received", got)
	}
}

// The sweep's view of a function's capacity, which LocalCapacity serves.
var _ interface {
	Depth(context.Context) (queue.Depth, error)
	MaxConcurrency(context.Context) (int, error)
	SetMaxConcurrency(context.Context, int) error
} = (*topology.LocalCapacity)(nil)

// TestLocalCapacity: a function's capacity reads its queue's depth by
// state and its mapping's cap, and a cap set within Lambda's bounds
// reaches that mapping; without a mapping, or out of bounds, it is an
// error that changes nothing.
func TestLocalCapacity(t *testing.T) {
	t.Parallel()
	h := func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
		return events.SQSEventResponse{}, nil
	}
	for _, tc := range []struct {
		name     string
		function string
		consume  map[string]eventsource.Handler // nil: no Consume
		set      int                            // 0: none
		wantCap  int
		wantErr  bool
		noMap    bool // the error is ErrNoMapping
	}{
		{name: "unset is the topology's", function: topology.Observe, consume: map[string]eventsource.Handler{topology.Observe: h}, wantCap: 8},
		{name: "set reaches the mapping", function: topology.Observe, consume: map[string]eventsource.Handler{topology.Observe: h}, set: 3, wantCap: 3},
		{name: "Lambda's least", function: topology.Observe, consume: map[string]eventsource.Handler{topology.Observe: h}, set: 2, wantCap: 2},
		{name: "Lambda's most, above Workers", function: topology.Observe, consume: map[string]eventsource.Handler{topology.Observe: h}, set: 1000, wantCap: 1000},
		{name: "below Lambda's range", function: topology.Observe, consume: map[string]eventsource.Handler{topology.Observe: h}, set: 1, wantCap: 8, wantErr: true},
		{name: "above Lambda's range", function: topology.Observe, consume: map[string]eventsource.Handler{topology.Observe: h}, set: 1001, wantCap: 8, wantErr: true},
		{name: "before Consume", function: topology.Observe, set: 3, wantErr: true, noMap: true},
		{name: "a function not wired", function: topology.Deliver, consume: map[string]eventsource.Handler{topology.Observe: h}, set: 3, wantErr: true, noMap: true},
		{name: "a function with no queue", function: topology.Sweep, consume: map[string]eventsource.Handler{topology.Observe: h}, set: 3, wantErr: true},
		{name: "no such function", function: "nope", consume: map[string]eventsource.Handler{topology.Observe: h}, set: 3, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := topology.Stack.Local(topology.LocalConfig{Clock: clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))})
			if err != nil {
				t.Fatal(err)
			}
			// Taken before Consume: it finds the mapping when called.
			c := l.Capacity(tc.function)
			if tc.consume != nil {
				l.Consume(topology.ConsumeConfig{Handlers: tc.consume})
			}
			if tc.set != 0 {
				err := c.SetMaxConcurrency(ctx, tc.set)
				if (err != nil) != tc.wantErr || errors.Is(err, topology.ErrNoMapping) != tc.noMap {
					t.Fatalf("SetMaxConcurrency(%d) = %v; want error %v, ErrNoMapping %v", tc.set, err, tc.wantErr, tc.noMap)
				}
			}
			got, err := c.MaxConcurrency(ctx)
			if tc.wantCap == 0 {
				if err == nil {
					t.Errorf("MaxConcurrency() = %d, want an error", got)
				}
				return
			}
			if err != nil || got != tc.wantCap {
				t.Fatalf("MaxConcurrency() = %d, %v; want %d", got, err, tc.wantCap)
			}
			for _, m := range l.Mappings {
				if m.Function.Name == tc.function && m.MaxConcurrency() != tc.wantCap {
					t.Errorf("the mapping on %s has cap %d, want %d", m.Queue.ID, m.MaxConcurrency(), tc.wantCap)
				}
			}
		})
	}
	t.Run("a done context", func(t *testing.T) {
		t.Parallel()
		l, err := topology.Stack.Local(topology.LocalConfig{})
		if err != nil {
			t.Fatal(err)
		}
		l.Consume(topology.ConsumeConfig{Handlers: map[string]eventsource.Handler{topology.Observe: h}})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		c := l.Capacity(topology.Observe)
		if err := c.SetMaxConcurrency(ctx, 3); !errors.Is(err, context.Canceled) {
			t.Errorf("SetMaxConcurrency: %v, want context.Canceled", err)
		}
		if n, _ := c.MaxConcurrency(context.Background()); n != 8 {
			t.Errorf("cap %d after a cancelled set, want 8", n)
		}
		if _, err := c.Depth(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Depth: %v, want context.Canceled", err)
		}
	})
}

// TestLocalCapacityDepth: Depth counts the function's own queue's
// messages by state, as SQS's attributes do, and no other queue's.
func TestLocalCapacityDepth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                      string
		visible, delayed, receive int
		want                      queue.Depth
	}{
		{"empty", 0, 0, 0, queue.Depth{}},
		{"visible", 3, 0, 0, queue.Depth{Visible: 3}},
		{"delayed", 0, 2, 0, queue.Depth{Delayed: 2}},
		{"in flight", 4, 1, 3, queue.Depth{Visible: 1, InFlight: 3, Delayed: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := topology.Stack.Local(topology.LocalConfig{Clock: clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))})
			if err != nil {
				t.Fatal(err)
			}
			_, url, _ := l.Consumed(topology.Observe)
			send := func(to string, n int, delay time.Duration) {
				for range n {
					if _, err := l.Broker.Send(ctx, to, []byte("x"), delay); err != nil {
						t.Fatal(err)
					}
				}
			}
			send(url, tc.visible, 0)
			send(url, tc.delayed, time.Minute)
			send(l.URL("DeliverQueue"), 5, 0) // not observe's
			if tc.receive > 0 {
				if msgs, err := l.Broker.Receive(ctx, url, tc.receive, 0); err != nil || len(msgs) != tc.receive {
					t.Fatalf("Receive: %d, %v", len(msgs), err)
				}
			}
			got, err := l.Capacity(topology.Observe).Depth(ctx)
			if err != nil || got != tc.want || got.Total() != tc.visible+tc.delayed {
				t.Errorf("Depth() = %+v (total %d), %v; want %+v", got, got.Total(), err, tc.want)
			}
		})
	}
}

// TestLocalCapacityCapsTheRun: a cap set through Capacity holds while
// the topology runs: observe (8 pollers) capped at 2 runs 2 invocations
// at once, its queue showing their batches in flight.
func TestLocalCapacityCapsTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Manual and never moved: no deadline or visibility runs out, and a
	// poller beyond the cap waits on it until the run ends.
	l, err := topology.Stack.Local(topology.LocalConfig{Clock: clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	var running, peak atomic.Int64
	release := make(chan struct{})
	l.Consume(topology.ConsumeConfig{Handlers: map[string]eventsource.Handler{
		topology.Observe: func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
			n := running.Add(1)
			defer running.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			<-release
			return events.SQSEventResponse{}, nil
		}}})
	c := l.Capacity(topology.Observe)
	if err := c.SetMaxConcurrency(ctx, 2); err != nil {
		t.Fatal(err)
	}
	_, url, _ := l.Consumed(topology.Observe)
	for range 100 {
		if _, err := l.Broker.Send(ctx, url, []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- l.Run(runCtx, time.Second) }()
	// Observe's batch is 10: two invocations hold 20 records.
	want := queue.Depth{Visible: 80, InFlight: 20}
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := c.Depth(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d == want && running.Load() == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("depth %+v with %d running; want %+v with 2", d, running.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	close(release)
	if err := <-errc; err != nil {
		t.Errorf("Run: %v", err)
	}
	if p := peak.Load(); p != 2 {
		t.Errorf("%d invocations ran at once, want 2 (the cap)", p)
	}
}
