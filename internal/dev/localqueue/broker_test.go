package localqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// setup returns a broker on a manual clock with one queue "q" and, when
// maxReceives > 0, its dead-letter queue "dlq".
func setup(t testing.TB, vis time.Duration, maxReceives int) (*Broker, *clock.Manual, string) {
	t.Helper()
	clk := clock.NewManual(t0)
	b := New(clk)
	cfg := Config{Visibility: vis}
	if maxReceives > 0 {
		if _, err := b.Create("dlq", Config{}); err != nil {
			t.Fatal(err)
		}
		cfg.MaxReceiveCount, cfg.DeadLetter = maxReceives, "dlq"
	}
	url, err := b.Create("q", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, clk, url
}

func send(t testing.TB, b *Broker, url, body string, delay time.Duration) string {
	t.Helper()
	id, err := b.Send(context.Background(), url, []byte(body), delay)
	if err != nil {
		t.Fatalf("Send(%q, %v): %v", body, delay, err)
	}
	return id
}

func receive(t testing.TB, b *Broker, url string, max int) []Message {
	t.Helper()
	msgs, err := b.Receive(context.Background(), url, max, 0)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return msgs
}

func receiveOne(t testing.TB, b *Broker, url string) Message {
	t.Helper()
	msgs := receive(t, b, url, 10)
	if len(msgs) != 1 {
		t.Fatalf("received %d messages, want 1", len(msgs))
	}
	return msgs[0]
}

func TestSendDelay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		delay time.Duration
		due   time.Duration // when it must become visible
	}{
		{"zero", 0, 0},
		{"one second", time.Second, time.Second},
		{"one hour", time.Hour, time.Hour},
		{"a week, beyond SQS's 15 minutes", 7 * 24 * time.Hour, 7 * 24 * time.Hour},
		{"fraction rounds up", 1500 * time.Millisecond, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, clk, url := setup(t, 0, 0)
			id := send(t, b, url, "hello", tc.delay)
			if tc.due > 0 {
				if d := b.Depth(url); d != (Depth{Delayed: 1}) {
					t.Errorf("Depth before due = %+v, want 1 delayed", d)
				}
				if at, ok := b.NextEvent(); !ok || !at.Equal(t0.Add(tc.due)) {
					t.Errorf("NextEvent = %v, %v; want %v", at, ok, t0.Add(tc.due))
				}
				clk.Set(t0.Add(tc.due - time.Nanosecond))
				if msgs := receive(t, b, url, 10); len(msgs) != 0 {
					t.Fatalf("received %d messages 1 ns before due", len(msgs))
				}
			}
			clk.Set(t0.Add(tc.due))
			if d := b.Depth(url); d != (Depth{Visible: 1}) {
				t.Errorf("Depth when due = %+v, want 1 visible", d)
			}
			m := receiveOne(t, b, url)
			if m.ID != id || string(m.Body) != "hello" || m.ReceiveCount != 1 ||
				!m.SentAt.Equal(t0) || !m.FirstReceivedAt.Equal(t0.Add(tc.due)) || m.ReceiptHandle == "" {
				t.Errorf("received %+v", m)
			}
		})
	}
}

func TestVisibilityExpiryRedelivers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, clk, url := setup(t, 30*time.Second, 0)
	id := send(t, b, url, "x", 0)
	first := receiveOne(t, b, url)
	if d := b.Depth(url); d != (Depth{InFlight: 1}) {
		t.Errorf("Depth in flight = %+v", d)
	}
	if at, ok := b.NextEvent(); !ok || !at.Equal(t0.Add(30*time.Second)) {
		t.Errorf("NextEvent = %v, %v; want visibility expiry", at, ok)
	}
	clk.Advance(29 * time.Second)
	if msgs := receive(t, b, url, 10); len(msgs) != 0 {
		t.Fatal("redelivered before the visibility timeout ran out")
	}
	clk.Advance(time.Second)
	second := receiveOne(t, b, url)
	if second.ID != id || second.ReceiveCount != 2 || second.ReceiptHandle == first.ReceiptHandle ||
		!second.FirstReceivedAt.Equal(t0) {
		t.Fatalf("redelivery = %+v (first %+v)", second, first)
	}
	if err := b.Delete(ctx, url, first.ReceiptHandle); !errors.Is(err, ErrStaleReceipt) {
		t.Errorf("Delete with the old handle: %v, want ErrStaleReceipt", err)
	}
	if err := b.ChangeVisibility(ctx, url, first.ReceiptHandle, time.Minute); !errors.Is(err, ErrStaleReceipt) {
		t.Errorf("ChangeVisibility with the old handle: %v, want ErrStaleReceipt", err)
	}
	if d := b.Depth(url); d != (Depth{InFlight: 1}) {
		t.Errorf("stale calls changed the message: Depth = %+v", d)
	}
	if err := b.Delete(ctx, url, second.ReceiptHandle); err != nil {
		t.Fatalf("Delete with the current handle: %v", err)
	}
	if err := b.Delete(ctx, url, second.ReceiptHandle); !errors.Is(err, ErrStaleReceipt) {
		t.Errorf("second Delete: %v, want ErrStaleReceipt", err)
	}
	if err := b.Delete(ctx, url, "never-issued"); !errors.Is(err, ErrStaleReceipt) {
		t.Errorf("Delete with an unknown handle: %v, want ErrStaleReceipt", err)
	}
	if d := b.Depth(url); d != (Depth{}) {
		t.Errorf("Depth after delete = %+v", d)
	}
	if _, ok := b.NextEvent(); ok {
		t.Error("NextEvent reports an event on an empty broker")
	}
}

func TestChangeVisibility(t *testing.T) {
	t.Parallel()
	const vis = 30 * time.Second
	for _, tc := range []struct {
		name    string
		at      time.Duration // since the receive
		timeout time.Duration
		wantErr error
		visible time.Duration // since the receive, when wantErr is nil
	}{
		{"extend prevents redelivery", 20 * time.Second, 2 * time.Minute, nil, 140 * time.Second},
		{"shorten", 5 * time.Second, 5 * time.Second, nil, 10 * time.Second},
		{"zero makes it visible at once", 10 * time.Second, 0, nil, 10 * time.Second},
		{"fraction rounds up", 0, 1500 * time.Millisecond, nil, 2 * time.Second},
		{"after expiry is not in flight", vis, time.Minute, ErrNotInFlight, 0},
		{"negative", 0, -time.Second, ErrInvalidArgument, 0},
		{"beyond 12 h in one call", 0, MaxVisibility + time.Second, ErrInvalidArgument, 0},
		{"beyond 12 h since the receive", 10 * time.Second, MaxVisibility, ErrInvalidArgument, 0},
		{"exactly 12 h since the receive", 10 * time.Second, MaxVisibility - 10*time.Second, nil, MaxVisibility},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b, clk, url := setup(t, vis, 0)
			send(t, b, url, "x", 0)
			m := receiveOne(t, b, url)
			clk.Advance(tc.at)
			err := b.ChangeVisibility(ctx, url, m.ReceiptHandle, tc.timeout)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ChangeVisibility: %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				return
			}
			if tc.visible > tc.at {
				if at, ok := b.NextEvent(); !ok || !at.Equal(t0.Add(tc.visible)) {
					t.Errorf("NextEvent = %v, %v; want %v", at, ok, t0.Add(tc.visible))
				}
				clk.Set(t0.Add(tc.visible - time.Nanosecond))
				if msgs := receive(t, b, url, 10); len(msgs) != 0 {
					t.Fatalf("redelivered at %v, before %v", clk.Now().Sub(t0), tc.visible)
				}
				clk.Set(t0.Add(tc.visible))
			}
			again := receiveOne(t, b, url)
			if again.ReceiveCount != 2 {
				t.Errorf("ReceiveCount = %d, want 2", again.ReceiveCount)
			}
		})
	}
}

func TestDeleteAfterExpiryBeforeRedelivery(t *testing.T) {
	t.Parallel()
	// SQS accepts the delete: nobody else has the message.
	b, clk, url := setup(t, 30*time.Second, 0)
	send(t, b, url, "x", 0)
	m := receiveOne(t, b, url)
	clk.Advance(time.Minute)
	if err := b.Delete(context.Background(), url, m.ReceiptHandle); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if d := b.Depth(url); d != (Depth{}) {
		t.Errorf("Depth = %+v, want empty", d)
	}
}

func TestRedriveToDeadLetterQueue(t *testing.T) {
	t.Parallel()
	for _, maxReceives := range []int{1, 3} {
		t.Run(fmt.Sprint(maxReceives), func(t *testing.T) {
			t.Parallel()
			const vis = 30 * time.Second
			b, clk, url := setup(t, vis, maxReceives)
			dlq := URLPrefix + "dlq"
			id := send(t, b, url, "poison", 0)
			var last Message
			for i := 1; i <= maxReceives; i++ {
				last = receiveOne(t, b, url)
				if last.ReceiveCount != i {
					t.Fatalf("receive %d: ReceiveCount %d", i, last.ReceiveCount)
				}
				clk.Advance(vis)
			}
			if msgs := receive(t, b, url, 10); len(msgs) != 0 {
				t.Fatalf("receive %d delivered %+v; want it redriven", maxReceives+1, msgs)
			}
			if d := b.Depth(url); d != (Depth{}) {
				t.Errorf("source Depth = %+v, want empty", d)
			}
			if d := b.Depth(dlq); d != (Depth{Visible: 1}) {
				t.Errorf("DLQ Depth = %+v, want 1 visible", d)
			}
			if err := b.Delete(context.Background(), url, last.ReceiptHandle); !errors.Is(err, ErrStaleReceipt) {
				t.Errorf("Delete on the source after redrive: %v, want ErrStaleReceipt", err)
			}
			dead := receiveOne(t, b, dlq)
			if dead.ID != id || string(dead.Body) != "poison" || dead.ReceiveCount != maxReceives+1 ||
				!dead.SentAt.Equal(t0) || !dead.FirstReceivedAt.Equal(t0) {
				t.Errorf("DLQ message = %+v", dead)
			}
			if err := b.Delete(context.Background(), dlq, dead.ReceiptHandle); err != nil {
				t.Errorf("Delete on the DLQ: %v", err)
			}
		})
	}
}

func TestRedriveKeepsOthersFlowing(t *testing.T) {
	t.Parallel()
	// The receive that redrives a message goes on to deliver the next.
	b, clk, url := setup(t, 30*time.Second, 1)
	poison := send(t, b, url, "poison", 0)
	receiveOne(t, b, url)
	clk.Advance(30 * time.Second)
	good := send(t, b, url, "good", 0)
	msgs := receive(t, b, url, 10)
	if len(msgs) != 1 || msgs[0].ID != good {
		t.Fatalf("received %+v, want only %s (poison %s redriven)", msgs, good, poison)
	}
}

func TestDepthAndNextEvent(t *testing.T) {
	t.Parallel()
	b, clk, url := setup(t, time.Minute, 0)
	other, err := b.Create("other", Config{})
	if err != nil {
		t.Fatal(err)
	}
	send(t, b, url, "now-1", 0)
	send(t, b, url, "now-2", 0)
	send(t, b, url, "later", 10*time.Minute)
	send(t, b, other, "soon", 45*time.Second)
	receive(t, b, url, 1) // in flight until t0+1m
	if d := b.Depth(url); d != (Depth{Visible: 1, InFlight: 1, Delayed: 1}) {
		t.Errorf("Depth = %+v", d)
	}
	if d := b.Depth(other); d != (Depth{Delayed: 1}) {
		t.Errorf("other Depth = %+v", d)
	}
	if d := b.Depth("local://nope"); d != (Depth{}) {
		t.Errorf("unknown queue Depth = %+v", d)
	}
	steps := []time.Duration{45 * time.Second, time.Minute, 10 * time.Minute}
	for _, want := range steps {
		at, ok := b.NextEvent()
		if !ok || !at.Equal(t0.Add(want)) {
			t.Fatalf("NextEvent = %v, %v; want t0+%v", at, ok, want)
		}
		clk.Set(at)
	}
	if at, ok := b.NextEvent(); ok {
		t.Errorf("NextEvent = %v after the last event", at)
	}
	if d := b.Depth(url); d != (Depth{Visible: 3}) {
		t.Errorf("final Depth = %+v", d)
	}
}

func TestDeterministicOrder(t *testing.T) {
	t.Parallel()
	run := func() []string {
		b, clk, url := setup(t, 30*time.Second, 0)
		var log []string
		send(t, b, url, "delayed", 10*time.Second)
		send(t, b, url, "a", 0)
		send(t, b, url, "b", 0)
		m := receive(t, b, url, 1)[0] // "a", back at t0+30s
		log = append(log, string(m.Body)+"/"+m.ID)
		clk.Advance(5 * time.Second)
		send(t, b, url, "c", 0) // visible at t0+5s
		clk.Advance(30 * time.Second)
		// Visible since: b t0, c t0+5s, delayed t0+10s, a t0+30s.
		for _, m := range receive(t, b, url, 10) {
			log = append(log, string(m.Body)+"/"+m.ID+"/"+m.ReceiptHandle)
		}
		return log
	}
	first := run()
	var bodies []string
	for _, e := range first[1:] {
		bodies = append(bodies, strings.SplitN(e, "/", 2)[0])
	}
	if want := []string{"b", "c", "delayed", "a"}; !slices.Equal(bodies, want) {
		t.Errorf("order = %v, want %v", bodies, want)
	}
	for range 5 {
		if again := run(); !slices.Equal(again, first) {
			t.Fatalf("replay differs:\n%v\n%v", again, first)
		}
	}
}

func TestReceiveLimitsAndOverride(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, clk, url := setup(t, 30*time.Second, 0)
	for i := range 5 {
		send(t, b, url, fmt.Sprint(i), 0)
	}
	msgs, err := b.Receive(ctx, url, 2, 5*time.Minute)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("Receive(2) = %d, %v", len(msgs), err)
	}
	if got := receive(t, b, url, 10); len(got) != 3 {
		t.Fatalf("second receive got %d, want the other 3", len(got))
	}
	clk.Advance(30 * time.Second)
	if got := receive(t, b, url, 10); len(got) != 3 {
		t.Errorf("after 30 s got %d, want the 3 on the queue's visibility only", len(got))
	}
	for _, tc := range []struct {
		max int
		vis time.Duration
	}{{0, 0}, {1, -time.Second}, {1, MaxVisibility + time.Second}} {
		if _, err := b.Receive(ctx, url, tc.max, tc.vis); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Receive(%d, %v): %v, want ErrInvalidArgument", tc.max, tc.vis, err)
		}
	}
}

func TestZeroVisibilityNeverDeliversTwiceInOneReceive(t *testing.T) {
	t.Parallel()
	b, _, url := setup(t, 0, 0)
	send(t, b, url, "x", 0)
	m := receiveOne(t, b, url)
	if err := b.ChangeVisibility(context.Background(), url, m.ReceiptHandle, 0); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, b, url, 10); len(got) != 1 || got[0].ReceiveCount != 2 {
		t.Errorf("got %+v, want the message once, count 2", got)
	}
}

func TestQueueManagement(t *testing.T) {
	t.Parallel()
	b := New(clock.NewManual(t0))
	url, err := b.Create("jobs", Config{})
	if err != nil || url != "local://jobs" {
		t.Fatalf("Create = %q, %v", url, err)
	}
	dlq, err := b.Create("dlq", Config{})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := b.Info(url); err != nil || info.Name != "jobs" || info.URL != url || info.ARN != "arn:aws:sqs:local:000000000000:jobs" {
		t.Errorf("Info = %+v, %v", info, err)
	}
	if info, _ := b.Info(dlq); info.ARN != "arn:aws:sqs:local:000000000000:dlq" {
		t.Errorf("default ARN = %q", info.ARN)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want error
	}{
		{"jobs", Config{}, ErrExists},
		{"x", Config{MaxReceiveCount: 3, DeadLetter: "missing"}, ErrNoQueue},
		{"x", Config{MaxReceiveCount: 3}, ErrInvalidArgument},
		{"x", Config{DeadLetter: "dlq"}, ErrInvalidArgument},
		{"x", Config{MaxReceiveCount: 3, DeadLetter: "x"}, ErrInvalidArgument},
		{"x", Config{Visibility: -time.Second}, ErrInvalidArgument},
		{"x", Config{MaxReceiveCount: 1001, DeadLetter: "dlq"}, ErrInvalidArgument},
		{"", Config{}, ErrInvalidArgument},
		{"a.fifo", Config{}, ErrInvalidArgument},
		{strings.Repeat("a", 81), Config{}, ErrInvalidArgument},
	} {
		if _, err := b.Create(tc.name, tc.cfg); !errors.Is(err, tc.want) {
			t.Errorf("Create(%q, %+v): %v, want %v", tc.name, tc.cfg, err, tc.want)
		}
	}
	for _, f := range []func() error{
		func() error { _, err := b.Info("local://nope"); return err },
	} {
		if err := f(); !errors.Is(err, ErrNoQueue) {
			t.Errorf("lookup of a missing queue: %v, want ErrNoQueue", err)
		}
	}
}

func TestCallErrors(t *testing.T) {
	t.Parallel()
	b, _, url := setup(t, 0, 0)
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"send to missing queue", func() error { _, err := b.Send(ctx, "local://nope", []byte("x"), 0); return err }(), ErrNoQueue},
		{"receive from missing queue", func() error { _, err := b.Receive(ctx, "local://nope", 1, 0); return err }(), ErrNoQueue},
		{"delete on missing queue", b.Delete(ctx, "local://nope", "h"), ErrNoQueue},
		{"change visibility on missing queue", b.ChangeVisibility(ctx, "local://nope", "h", 0), ErrNoQueue},
		{"negative delay", func() error { _, err := b.Send(ctx, url, []byte("x"), -time.Second); return err }(), ErrInvalidArgument},
		{"empty body", func() error { _, err := b.Send(ctx, url, nil, 0); return err }(), ErrInvalidArgument},
		{"oversized body", func() error { _, err := b.Send(ctx, url, make([]byte, MaxBodySize+1), 0); return err }(), ErrInvalidArgument},
		{"invalid UTF-8", func() error { _, err := b.Send(ctx, url, []byte{0xff}, 0); return err }(), ErrInvalidArgument},
		{"control character", func() error { _, err := b.Send(ctx, url, []byte("a\x00b"), 0); return err }(), ErrInvalidArgument},
		{"cancelled send", func() error { _, err := b.Send(cancelled, url, []byte("x"), 0); return err }(), context.Canceled},
		{"cancelled receive", func() error { _, err := b.Receive(cancelled, url, 1, 0); return err }(), context.Canceled},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if _, err := b.Send(ctx, url, []byte("tab\tok é \U0001F600 \uFFFD"), 0); err != nil {
		t.Errorf("valid body refused: %v", err)
	}
}

func TestSendCopiesBody(t *testing.T) {
	t.Parallel()
	b, _, url := setup(t, 0, 0)
	body := []byte("original")
	send(t, b, url, string(body), 0)
	_, _ = b.Send(context.Background(), url, body, 0)
	copy(body, "mutated!")
	for _, m := range receive(t, b, url, 10) {
		if string(m.Body) != "original" {
			t.Errorf("body = %q", m.Body)
		}
	}
}

// TestConcurrentUse runs senders, receivers that sometimes drop a message
// (letting its visibility run out) or give it back, and a goroutine moving
// the clock, all at once. Every message must be deleted exactly once and
// no delete may succeed with a stale handle.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	const (
		senders   = 8
		perSender = 300
		receivers = 8
		total     = senders * perSender
	)
	ctx := context.Background()
	b, clk, url := setup(t, 5*time.Second, 0)
	var (
		mu      sync.Mutex
		sent    = map[string]bool{}
		deleted = map[string]int{}
		done    atomic.Int64
	)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range perSender {
				id, err := b.Send(ctx, url, []byte(fmt.Sprintf("%d-%d", s, i)), time.Duration(i%3)*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if sent[id] {
					t.Errorf("id %s issued twice", id)
				}
				sent[id] = true
				mu.Unlock()
			}
		})
	}
	stop := make(chan struct{})
	var ticker sync.WaitGroup
	ticker.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				clk.Advance(time.Second)
				time.Sleep(50 * time.Microsecond)
			}
		}
	})
	for r := range receivers {
		wg.Go(func() {
			n := 0
			for done.Load() < total {
				msgs, err := b.Receive(ctx, url, 10, 0)
				if err != nil {
					t.Error(err)
					return
				}
				for _, m := range msgs {
					n++
					switch (n + r) % 7 {
					case 0: // drop it: the visibility runs out
						continue
					case 1: // give it back
						if err := b.ChangeVisibility(ctx, url, m.ReceiptHandle, 0); err != nil &&
							!errors.Is(err, ErrStaleReceipt) && !errors.Is(err, ErrNotInFlight) {
							t.Error(err)
						}
						continue
					}
					switch err := b.Delete(ctx, url, m.ReceiptHandle); {
					case err == nil:
						mu.Lock()
						deleted[m.ID]++
						mu.Unlock()
						done.Add(1)
					case errors.Is(err, ErrStaleReceipt):
					default:
						t.Error(err)
					}
				}
				if len(msgs) == 0 {
					time.Sleep(10 * time.Microsecond)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	ticker.Wait()
	if len(sent) != total {
		t.Fatalf("sent %d distinct ids, want %d", len(sent), total)
	}
	for id := range sent {
		if deleted[id] != 1 {
			t.Errorf("message %s deleted %d times", id, deleted[id])
		}
	}
	if d := b.Depth(url); d != (Depth{}) {
		t.Errorf("Depth at the end = %+v", d)
	}
}

// ShownAt is when a message became visible before the receive holding it:
// its delay's end, then its visibility timeout's; a stale or unknown
// handle has none.
func TestShownAt(t *testing.T) {
	t.Parallel()
	b, clk, url := setup(t, 30*time.Second, 0)
	send(t, b, url, "x", 5*time.Second)
	clk.Advance(7 * time.Second)
	first := receiveOne(t, b, url)
	if at, ok := b.ShownAt(first.ReceiptHandle); !ok || !at.Equal(t0.Add(5*time.Second)) {
		t.Errorf("ShownAt after the delay = %v, %v; want %v (the send was at %v)", at, ok, t0.Add(5*time.Second), first.SentAt)
	}
	clk.Advance(40 * time.Second)
	second := receiveOne(t, b, url)
	if at, ok := b.ShownAt(second.ReceiptHandle); !ok || !at.Equal(t0.Add(37*time.Second)) {
		t.Errorf("ShownAt after the visibility timeout = %v, %v; want %v", at, ok, t0.Add(37*time.Second))
	}
	if _, ok := b.ShownAt(first.ReceiptHandle); ok {
		t.Error("a stale receipt handle has a shown time")
	}
}
