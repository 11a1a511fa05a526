package topology_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/eventsource"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/message"
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
