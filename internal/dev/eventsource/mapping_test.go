package eventsource

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/localqueue"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

const vis = 30 * time.Second

type fixture struct {
	b   *localqueue.Broker
	clk *clock.Manual
	url string
	dlq string
}

// newFixture makes a broker on a manual clock with a queue "work"
// (visibility 30 s) redriving to "work-dlq" after maxReceives.
func newFixture(t testing.TB, maxReceives int) fixture {
	t.Helper()
	clk := clock.NewManual(t0)
	b := localqueue.New(clk)
	dlq, err := b.Create("work-dlq", localqueue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	url, err := b.Create("work", localqueue.Config{Visibility: vis, MaxReceiveCount: maxReceives, DeadLetter: "work-dlq"})
	if err != nil {
		t.Fatal(err)
	}
	return fixture{b: b, clk: clk, url: url, dlq: dlq}
}

func (f fixture) send(t testing.TB, bodies ...string) []string {
	t.Helper()
	var ids []string
	for _, body := range bodies {
		id, err := f.b.Send(context.Background(), f.url, []byte(body), 0)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func ok(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	return events.SQSEventResponse{}, nil
}

// failBodies reports the records with the given bodies as failures.
func failBodies(bodies ...string) Handler {
	return func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
		for _, r := range ev.Records {
			if slices.Contains(bodies, r.Body) {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
			}
		}
		return resp, nil
	}
}

func TestPollOnceOutcomes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		handler     Handler
		wantErr     bool
		wantLeft    int // records still on the queue (in flight)
		wantDeleted int64
	}{
		{"success deletes all", ok, false, 0, 3},
		{"batch item failures delete the rest", failBodies("b"), false, 1, 2},
		{"all listed as failures", failBodies("a", "b", "c"), false, 3, 0},
		{"handler error deletes none", func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{}, errors.New("boom")
		}, true, 3, 0},
		{"panic deletes none", func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
			panic("kaboom")
		}, true, 3, 0},
		{"unknown item identifier fails the batch", func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: "not-in-batch"}}}, nil
		}, true, 3, 0},
		{"empty item identifier fails the batch", func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{}}}, nil
		}, true, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 5)
			f.send(t, "a", "b", "c")
			m := &Mapping{Broker: f.b, Queue: f.url, Handler: tc.handler, Clock: f.clk}
			n, err := m.PollOnce(context.Background())
			if n != 3 {
				t.Errorf("handled = %d, want 3", n)
			}
			if tc.wantErr != errors.Is(err, ErrInvocation) {
				t.Fatalf("err = %v, want ErrInvocation: %v", err, tc.wantErr)
			}
			if !tc.wantErr && err != nil {
				t.Fatalf("err = %v", err)
			}
			if d := f.b.Depth(f.url); d != (localqueue.Depth{InFlight: tc.wantLeft}) {
				t.Errorf("Depth = %+v, want %d in flight", d, tc.wantLeft)
			}
			want := Stats{Invocations: 1, Records: 3, Deleted: tc.wantDeleted, Failed: int64(3) - tc.wantDeleted}
			if tc.wantErr {
				want.InvocationErrors = 1
			}
			if got := m.Stats(); got != want {
				t.Errorf("Stats = %+v, want %+v", got, want)
			}
			// What was not deleted comes back after the visibility.
			f.clk.Advance(vis)
			if d := f.b.Depth(f.url); d.Visible != tc.wantLeft {
				t.Errorf("after visibility: %+v, want %d visible", d, tc.wantLeft)
			}
		})
	}
}

func TestPollOnceEmptyAndBatchSize(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 5)
	var sizes []int
	m := &Mapping{Broker: f.b, Queue: f.url, Clock: f.clk, BatchSize: 4,
		Handler: func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			sizes = append(sizes, len(ev.Records))
			return events.SQSEventResponse{}, nil
		}}
	if n, err := m.PollOnce(context.Background()); n != 0 || err != nil {
		t.Fatalf("empty queue: %d, %v", n, err)
	}
	f.send(t, "1", "2", "3", "4", "5", "6")
	for {
		n, err := m.PollOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if !slices.Equal(sizes, []int{4, 2}) {
		t.Errorf("batch sizes = %v, want [4 2]", sizes)
	}
	if s := m.Stats(); s.Invocations != 2 || s.Records != 6 || s.Deleted != 6 {
		t.Errorf("Stats = %+v", s)
	}
}

func TestEventFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		wantRegion string
	}{
		{"the local region", "local"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 5)
			ids := f.send(t, `{"k":"v"}`)
			var got []events.SQSMessage
			m := &Mapping{Broker: f.b, Queue: f.url, Clock: f.clk,
				Handler: func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
					got = append(got, ev.Records...)
					// Fail it, so it comes back with a higher count.
					return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: ev.Records[0].MessageId}}}, nil
				}}
			sentAt := t0
			f.clk.Advance(2500 * time.Millisecond)
			firstAt := f.clk.Now()
			for range 3 {
				if _, err := m.PollOnce(context.Background()); err != nil {
					t.Fatal(err)
				}
				f.clk.Advance(vis)
			}
			if len(got) != 3 {
				t.Fatalf("got %d records, want 3", len(got))
			}
			sum := md5.Sum([]byte(`{"k":"v"}`))
			info, _ := f.b.Info(f.url)
			arn := info.ARN
			handles := map[string]bool{}
			for i, r := range got {
				want := map[string]string{
					"ApproximateReceiveCount":          strconv.Itoa(i + 1),
					"SentTimestamp":                    strconv.FormatInt(sentAt.UnixMilli(), 10),
					"SenderId":                         SenderID,
					"ApproximateFirstReceiveTimestamp": strconv.FormatInt(firstAt.UnixMilli(), 10),
				}
				if r.MessageId != ids[0] || r.Body != `{"k":"v"}` || r.Md5OfBody != hex.EncodeToString(sum[:]) ||
					r.EventSource != "aws:sqs" || r.EventSourceARN != arn || r.AWSRegion != tc.wantRegion ||
					r.MessageAttributes == nil || len(r.MessageAttributes) != 0 {
					t.Errorf("record %d = %+v", i, r)
				}
				if fmt.Sprint(r.Attributes) != fmt.Sprint(want) {
					t.Errorf("record %d attributes = %v, want %v", i, r.Attributes, want)
				}
				if handles[r.ReceiptHandle] || r.ReceiptHandle == "" {
					t.Errorf("record %d: receipt handle %q reused or empty", i, r.ReceiptHandle)
				}
				handles[r.ReceiptHandle] = true
			}
		})
	}
}

func TestDeadline(t *testing.T) {
	t.Parallel()
	t.Run("manual clock: the deadline is on the clock's time line", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, 5)
		f.send(t, "x")
		var sawDeadline time.Time
		var doneBefore, doneAfter bool
		var errAfter error
		// The invocation ends at the deadline without waiting for the
		// handler; the handler closes exited when it has seen it too.
		exited := make(chan struct{})
		m := &Mapping{Broker: f.b, Queue: f.url, Clock: f.clk, Timeout: 15 * time.Minute,
			Handler: func(ctx context.Context, _ events.SQSEvent) (events.SQSEventResponse, error) {
				defer close(exited)
				sawDeadline, _ = ctx.Deadline()
				doneBefore = ctx.Err() != nil
				f.clk.Advance(15 * time.Minute) // the handler overruns
				select {
				case <-ctx.Done():
					doneAfter = true
				case <-time.After(5 * time.Second):
				}
				errAfter = ctx.Err()
				return events.SQSEventResponse{}, nil
			}}
		_, err := m.PollOnce(context.Background())
		<-exited
		if !sawDeadline.Equal(t0.Add(15 * time.Minute)) {
			t.Errorf("deadline = %v, want t0+15m", sawDeadline)
		}
		if doneBefore || !doneAfter || !errors.Is(errAfter, context.DeadlineExceeded) {
			t.Errorf("done before %v, after %v, err %v", doneBefore, doneAfter, errAfter)
		}
		if !errors.Is(err, ErrInvocation) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("PollOnce: %v, want a timed-out invocation", err)
		}
		if d := f.b.Depth(f.url); d.Visible != 1 { // visible again: 15 min passed
			t.Errorf("a timed-out batch was deleted: %+v", d)
		}
	})
	t.Run("manual clock: a handler within its time succeeds", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, 5)
		f.send(t, "x")
		m := &Mapping{Broker: f.b, Queue: f.url, Clock: f.clk, Timeout: time.Minute,
			Handler: func(ctx context.Context, _ events.SQSEvent) (events.SQSEventResponse, error) {
				f.clk.Advance(59 * time.Second)
				return events.SQSEventResponse{}, ctx.Err()
			}}
		if _, err := m.PollOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if s := m.Stats(); s.Deleted != 1 {
			t.Errorf("Stats = %+v", s)
		}
	})
	t.Run("manual clock: parent cancellation reaches the handler", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, 5)
		f.send(t, "x")
		parent, cancel := context.WithCancel(context.Background())
		m := &Mapping{Broker: f.b, Queue: f.url, Clock: f.clk,
			Handler: func(ctx context.Context, _ events.SQSEvent) (events.SQSEventResponse, error) {
				cancel()
				<-ctx.Done()
				return events.SQSEventResponse{}, ctx.Err()
			}}
		if _, err := m.PollOnce(parent); !errors.Is(err, context.Canceled) {
			t.Errorf("PollOnce: %v, want Canceled", err)
		}
	})
	t.Run("wall clock", func(t *testing.T) {
		t.Parallel()
		b := localqueue.New(nil)
		url, err := b.Create("wall", localqueue.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Send(context.Background(), url, []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
		lefts := make(chan time.Duration, 1)
		m := &Mapping{Broker: b, Queue: url, Timeout: 50 * time.Millisecond,
			Handler: func(ctx context.Context, _ events.SQSEvent) (events.SQSEventResponse, error) {
				dl, _ := ctx.Deadline()
				lefts <- time.Until(dl)
				<-ctx.Done()
				return events.SQSEventResponse{}, nil
			}}
		_, err = m.PollOnce(context.Background())
		left := <-lefts
		if left <= 0 || left > 50*time.Millisecond {
			t.Errorf("deadline %v away, want within the 50 ms timeout", left)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("PollOnce: %v, want DeadlineExceeded", err)
		}
		if d := b.Depth(url); d.InFlight != 1 {
			t.Errorf("Depth = %+v, want the batch kept", d)
		}
	})
}

func TestFailingRecordEndsInDeadLetterQueue(t *testing.T) {
	t.Parallel()
	const maxReceives = 3
	f := newFixture(t, maxReceives)
	ids := f.send(t, "poison", "fine")
	var counts []string
	m := &Mapping{Broker: f.b, Queue: f.url, Clock: f.clk,
		Handler: func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			for _, r := range ev.Records {
				if r.Body == "poison" {
					counts = append(counts, r.Attributes["ApproximateReceiveCount"])
				}
			}
			return failBodies("poison")(ctx, ev)
		}}
	for range maxReceives + 1 {
		if _, err := m.PollOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		f.clk.Advance(vis)
	}
	if !slices.Equal(counts, []string{"1", "2", "3"}) {
		t.Errorf("receive counts seen = %v", counts)
	}
	if d := f.b.Depth(f.url); d != (localqueue.Depth{}) {
		t.Errorf("source Depth = %+v", d)
	}
	// The dead-letter queue is fed to triage by a mapping of its own.
	var dead []events.SQSMessage
	dm := &Mapping{Broker: f.b, Queue: f.dlq, Clock: f.clk,
		Handler: func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			dead = append(dead, ev.Records...)
			return events.SQSEventResponse{}, nil
		}}
	if n, err := dm.PollOnce(context.Background()); n != 1 || err != nil {
		t.Fatalf("DLQ poll: %d, %v", n, err)
	}
	info, _ := f.b.Info(f.dlq)
	arn := info.ARN
	if dead[0].MessageId != ids[0] || dead[0].Body != "poison" || dead[0].EventSourceARN != arn ||
		dead[0].Attributes["ApproximateReceiveCount"] != strconv.Itoa(maxReceives+1) {
		t.Errorf("dead-lettered record = %+v", dead[0])
	}
	if s := m.Stats(); s.Invocations != maxReceives || s.Deleted != 1 || s.Failed != maxReceives {
		t.Errorf("Stats = %+v", s)
	}
}

func TestStaleDeleteIsCounted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 5)
	f.send(t, "slow")
	m := &Mapping{Broker: f.b, Queue: f.url, Clock: f.clk, Timeout: time.Hour,
		Handler: func(ctx context.Context, _ events.SQSEvent) (events.SQSEventResponse, error) {
			// The handler outlasts the visibility and another poller
			// takes the message.
			f.clk.Advance(vis)
			if msgs, err := f.b.Receive(ctx, f.url, 10, 0); err != nil || len(msgs) != 1 {
				t.Errorf("second poller: %d, %v", len(msgs), err)
			}
			return events.SQSEventResponse{}, nil
		}}
	if _, err := m.PollOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := m.Stats(); s.StaleDeletes != 1 || s.Deleted != 0 {
		t.Errorf("Stats = %+v", s)
	}
	if d := f.b.Depth(f.url); d.InFlight != 1 {
		t.Errorf("the other holder's message was deleted: %+v", d)
	}
}

func TestGapBetweenReceiveAndInvoke(t *testing.T) {
	t.Parallel()
	const gap = 25 * time.Second
	tests := []struct {
		name string
		// renewAt is when the handler renews its lease, after it starts.
		renewAt time.Duration
		wantErr error
	}{
		{"the visibility left is the visibility less the gap", vis - gap - time.Second, nil},
		{"the visibility ran out during the gap and the handler", vis - gap, localqueue.ErrNotInFlight},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 5)
			f.send(t, "x")
			var invokedAt, deadline time.Time
			var renewErr error
			m := &Mapping{Broker: f.b, Queue: f.url, Clock: f.clk, Timeout: time.Minute, Gap: gap,
				Handler: func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
					invokedAt = f.clk.Now()
					deadline, _ = ctx.Deadline()
					f.clk.Advance(tt.renewAt)
					renewErr = f.b.ChangeVisibility(ctx, f.url, ev.Records[0].ReceiptHandle, vis)
					return events.SQSEventResponse{}, nil
				}}
			done := make(chan error, 1)
			go func() { _, err := m.PollOnce(context.Background()); done <- err }()
			// The batch is received at t0 and waits out the gap.
			for {
				if at, ok := f.clk.NextWaiter(); ok && at.Equal(t0.Add(gap)) {
					break
				}
				select {
				case err := <-done:
					t.Fatalf("PollOnce returned before the gap ran out: %v", err)
				case <-time.After(time.Millisecond):
				}
			}
			if s := m.Stats(); s.Invocations != 0 || f.b.Depth(f.url).InFlight != 1 {
				t.Fatalf("during the gap: %+v, %+v; want the batch received and not yet handed over", s, f.b.Depth(f.url))
			}
			f.clk.Set(t0.Add(gap))
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if !invokedAt.Equal(t0.Add(gap)) || !deadline.Equal(t0.Add(gap+time.Minute)) {
				t.Errorf("invoked at %v with deadline %v; want t0+%v, the timeout counted from the invocation", invokedAt, deadline, gap)
			}
			if !errors.Is(renewErr, tt.wantErr) || (tt.wantErr == nil) != (renewErr == nil) {
				t.Errorf("renewal %v after the handler ran %v: want %v (the visibility counts from the receive)", renewErr, tt.renewAt, tt.wantErr)
			}
		})
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	t.Run("workers drain the queue", func(t *testing.T) {
		t.Parallel()
		b := localqueue.New(nil)
		url, err := b.Create("run", localqueue.Config{})
		if err != nil {
			t.Fatal(err)
		}
		const total = 200
		var seen atomic.Int64
		m := &Mapping{Broker: b, Queue: url, Workers: 4, BatchSize: 3,
			Handler: func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
				seen.Add(int64(len(ev.Records)))
				return events.SQSEventResponse{}, nil
			}}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- m.Run(ctx, time.Millisecond) }()
		for i := range total {
			if _, err := b.Send(ctx, url, []byte(strconv.Itoa(i)), 0); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for m.Stats().Deleted < total && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
		if s := m.Stats(); s.Deleted != total || seen.Load() != total {
			t.Errorf("Stats = %+v, seen %d; want %d deleted once each", s, seen.Load(), total)
		}
	})
	t.Run("idle waits on the clock; failed invocations do not stop it", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, 5)
		f.send(t, "x")
		var calls atomic.Int64
		m := &Mapping{Broker: f.b, Queue: f.url, Clock: f.clk,
			Handler: func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
				calls.Add(1)
				return events.SQSEventResponse{}, errors.New("transient")
			}}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- m.Run(ctx, 10*time.Second) }()
		// The failed batch returns after the visibility; Run idles on the
		// manual clock until then, and only moving the clock moves it.
		for calls.Load() < 3 {
			if _, ok := f.clk.NextWaiter(); ok {
				f.clk.Advance(10 * time.Second)
			}
			time.Sleep(time.Millisecond)
		}
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
		if s := m.Stats(); s.InvocationErrors < 3 || s.Deleted != 0 {
			t.Errorf("Stats = %+v", s)
		}
	})
	t.Run("stopping it lets the invocation in flight finish", func(t *testing.T) {
		// Disabling a Lambda event source mapping stops polling; it does
		// not cancel an invocation that already runs. A handler cut off
		// between its record write and its review write would leave an
		// operation parked with no review (the local demo did, under load).
		t.Parallel()
		b := localqueue.New(nil)
		url, err := b.Create("stop", localqueue.Config{})
		if err != nil {
			t.Fatal(err)
		}
		started, release := make(chan struct{}), make(chan struct{})
		var ctxErr atomic.Value
		m := &Mapping{Broker: b, Queue: url,
			Handler: func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
				close(started)
				<-release
				ctxErr.Store(fmt.Sprint(ctx.Err()))
				return events.SQSEventResponse{}, nil
			}}
		if _, err := b.Send(context.Background(), url, []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- m.Run(ctx, time.Millisecond) }()
		<-started
		cancel()
		close(release)
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
		if got := ctxErr.Load(); got != "<nil>" {
			t.Errorf("the invocation's context was %v once the mapping stopped; want it left to finish", got)
		}
	})
	t.Run("the sandbox's end cancels the invocation in flight", func(t *testing.T) {
		// A local run's Ctrl-C: the functions die with the process, so an
		// observation chain in flight ends now, not after its long polls.
		t.Parallel()
		b := localqueue.New(nil)
		url, err := b.Create("sandbox", localqueue.Config{})
		if err != nil {
			t.Fatal(err)
		}
		sandbox, die := context.WithCancel(context.Background())
		started := make(chan struct{})
		var ctxErr atomic.Value
		m := &Mapping{Broker: b, Queue: url, Sandbox: sandbox, Timeout: time.Hour,
			Handler: func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
				close(started)
				<-ctx.Done()
				ctxErr.Store(fmt.Sprint(ctx.Err()))
				return events.SQSEventResponse{}, ctx.Err()
			}}
		if _, err := b.Send(context.Background(), url, []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- m.Run(ctx, time.Millisecond) }()
		<-started
		cancel()
		die()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run still waits for the invocation after its sandbox ended")
		}
		if got := ctxErr.Load(); got != context.Canceled.Error() {
			t.Errorf("the invocation's context was %v once the sandbox ended; want %v", got, context.Canceled)
		}
	})
	t.Run("the sandbox's deadline is not the function's", func(t *testing.T) {
		// A local run with a timeout: its end kills the sandboxes, but an
		// invocation's deadline is its function's timeout, as on Lambda. A
		// delivery that saw the run's end as its deadline handed itself on
		// without copying, over and over, once the run had under its
		// minimum copy window left.
		t.Parallel()
		b := localqueue.New(nil)
		url, err := b.Create("sandbox-deadline", localqueue.Config{})
		if err != nil {
			t.Fatal(err)
		}
		sandbox, die := context.WithTimeout(context.Background(), time.Minute)
		defer die()
		seen := make(chan time.Time, 1)
		m := &Mapping{Broker: b, Queue: url, Sandbox: sandbox, Timeout: time.Hour,
			Handler: func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
				dl, _ := ctx.Deadline()
				seen <- dl
				return events.SQSEventResponse{}, nil
			}}
		if _, err := b.Send(context.Background(), url, []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = m.Run(ctx, time.Millisecond) }()
		if dl := <-seen; time.Until(dl) < 50*time.Minute {
			t.Errorf("the invocation's deadline is %v away; want the function's timeout (1h), not the sandbox's end", time.Until(dl).Round(time.Second))
		}
	})
	t.Run("a missing queue stops it", func(t *testing.T) {
		t.Parallel()
		m := &Mapping{Broker: localqueue.New(nil), Queue: "local://missing", Handler: ok, Workers: 3}
		if err := m.Run(context.Background(), time.Millisecond); !errors.Is(err, localqueue.ErrNoQueue) {
			t.Errorf("Run: %v, want ErrNoQueue", err)
		}
	})
}

func TestMisconfiguration(t *testing.T) {
	t.Parallel()
	b := localqueue.New(nil)
	for _, m := range []*Mapping{
		{Handler: ok},
		{Broker: b},
		{Broker: b, Handler: ok, BatchSize: -1},
		{Broker: b, Handler: ok, BatchSize: MaxBatchSize + 1},
		{Broker: b, Handler: ok, Timeout: -time.Second},
		{Broker: b, Handler: ok, Workers: -1},
		{Broker: b, Handler: ok, Gap: -time.Second},
	} {
		if _, err := m.PollOnce(context.Background()); err == nil || errors.Is(err, ErrInvocation) {
			t.Errorf("PollOnce(%+v): %v, want a configuration error", m, err)
		}
		if err := m.Run(context.Background(), 0); err == nil {
			t.Errorf("Run(%+v): nil error", m)
		}
	}
}

// BenchmarkPollOnce measures the mapping's own cost per batch of 10 with a
// handler that does nothing: receive, event building, invocation, deletes.
func BenchmarkPollOnce(b *testing.B) {
	f := newFixture(b, 5)
	m := &Mapping{Broker: f.b, Queue: f.url, Clock: f.clk, Handler: ok}
	ctx := context.Background()
	body := []byte(`{"action":"submit_generation","operation_id":"op-123"}`)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for range 10 {
			if _, err := f.b.Send(ctx, f.url, body, 0); err != nil {
				b.Fatal(err)
			}
		}
		if n, err := m.PollOnce(ctx); n != 10 || err != nil {
			b.Fatalf("PollOnce = %d, %v", n, err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "batches/s")
	b.ReportMetric(float64(10*b.N)/b.Elapsed().Seconds(), "records/s")
}

// TestBatchingWindow: a short batch waits for more records up to the
// window, a batch that fills invokes at once, and the visibility counts
// from each record's receive.
func TestBatchingWindow(t *testing.T) {
	t.Parallel()
	const window = 5 * time.Second
	tests := []struct {
		name      string
		batch     int
		first     []string      // visible at the first receive
		later     []string      // sent while the mapping gathers
		advance   time.Duration // how far the clock moves after the later sends
		want      []string
		invokedAt time.Duration
	}{
		{"a short batch gathers for the whole window", 10, []string{"a"}, []string{"b", "c"}, window, []string{"a", "b", "c"}, window},
		{"a batch that fills invokes before the window ends", 3, []string{"a"}, []string{"b", "c"}, BatchingPoll, []string{"a", "b", "c"}, BatchingPoll},
		{"a full first receive invokes at once", 2, []string{"a", "b"}, nil, 0, []string{"a", "b"}, 0},
		{"nothing more: the window's records alone", 10, []string{"a"}, nil, window, []string{"a"}, window},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 5)
			f.send(t, tt.first...)
			var got []string
			var invokedAt time.Time
			m := &Mapping{Broker: f.b, Queue: f.url, Clock: f.clk, Timeout: time.Minute, BatchSize: tt.batch, BatchingWindow: window,
				Handler: func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
					invokedAt = f.clk.Now()
					for _, r := range ev.Records {
						got = append(got, r.Body)
					}
					return events.SQSEventResponse{}, nil
				}}
			done := make(chan error, 1)
			go func() { _, err := m.PollOnce(context.Background()); done <- err }()
			if tt.advance > 0 {
				// The first receive is in; the mapping waits on the clock.
				for {
					if _, ok := f.clk.NextWaiter(); ok {
						break
					}
					select {
					case err := <-done:
						t.Fatalf("PollOnce returned without gathering: %v (records %q)", err, got)
					case <-time.After(time.Millisecond):
					}
				}
				f.send(t, tt.later...)
				f.clk.Advance(tt.advance)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("PollOnce still gathering at %v", f.clk.Now().Sub(t0))
			}
			if !slices.Equal(got, tt.want) || !invokedAt.Equal(t0.Add(tt.invokedAt)) {
				t.Errorf("invoked at t0+%v with %q; want t0+%v with %q", invokedAt.Sub(t0), got, tt.invokedAt, tt.want)
			}
		})
	}
}

// TestTimeoutStopsTheInvocation: a handler still running at the
// function's timeout is left behind, as Lambda stops the function: the
// invocation fails at the deadline, its batch stays on the queue, and
// PollOnce does not wait for the handler to notice.
func TestTimeoutStopsTheInvocation(t *testing.T) {
	t.Parallel()
	b := localqueue.New(nil)
	url, err := b.Create("stuck", localqueue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Send(context.Background(), url, []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	m := &Mapping{Broker: b, Queue: url, Timeout: 50 * time.Millisecond,
		Handler: func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
			<-release // ignores its context
			return events.SQSEventResponse{}, nil
		}}
	done := make(chan error, 1)
	start := time.Now()
	go func() { _, err := m.PollOnce(context.Background()); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrInvocation) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("PollOnce: %v, want a timed-out invocation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("PollOnce still waiting for the handler %v after its 50ms timeout", time.Since(start).Round(time.Millisecond))
	}
	if s := m.Stats(); s.InvocationErrors != 1 || s.Deleted != 0 || s.Failed != 1 {
		t.Errorf("Stats = %+v, want one failed invocation, nothing deleted", s)
	}
	if d := b.Depth(url); d.InFlight != 1 {
		t.Errorf("Depth = %+v, want the batch kept in flight", d)
	}
}
