package observe_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/dev/eventsource"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/dev/localqueue"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/observe"
)

// feedEnv is one observe invocation fed by an embedded queue: the batch
// comes through an event source mapping of batch size 1, the feed
// receives from the same queue, and both lease through it.
type feedEnv struct {
	*env
	broker *localqueue.Broker
	url    string
	gen    *gatedGen
	recv   *spyReceiver
	obs    *observe.Handler
	// sentAtReturn is how many follow-ups were sent when Handle returned.
	sentAtReturn int
}

func newFeedEnv(t *testing.T, cfg observe.Config) *feedEnv {
	t.Helper()
	e := newEnv(t, "bolt-nosync", genacesim.Config{}, observe.Config{})
	fe := &feedEnv{env: e, broker: localqueue.New(e.clk), gen: &gatedGen{inner: e.gen.inner, open: make(chan struct{}), jobs: map[string]int{}}}
	close(fe.gen.open)
	var err error
	// Long enough that no message comes back while the clock runs on
	// during a test.
	const visibility = time.Hour
	if fe.url, err = fe.broker.Create("observe", localqueue.Config{Visibility: visibility}); err != nil {
		t.Fatal(err)
	}
	fe.recv = &spyReceiver{Receiver: &eventsource.Feed{Broker: fe.broker, Queue: fe.url, Clock: e.clk}}
	cfg.QueueURL, cfg.Visibility = fe.url, visibility
	fe.obs = observe.New(observe.Deps{Store: e.store, Genace: fe.gen, Delays: e.delays, Extender: fe.broker, Sender: e.out, Clock: e.clk,
		Log: slog.New(slog.NewJSONHandler(e.logs, nil)), Metrics: metrics.New(e.mlines, "observe", e.clk), Receiver: fe.recv}, cfg)
	return fe
}

// enqueue accepts n operations and puts their first observations on the
// queue, then a malformed message when bad; it returns the operations.
func (fe *feedEnv) enqueue(t *testing.T, n int, bad bool) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := "op-feed-" + string(rune('a'+i))
		body, err := fe.accept(t, id).Env.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fe.broker.Send(context.Background(), fe.url, body, 0); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if bad {
		if _, err := fe.broker.Send(context.Background(), fe.url, []byte("not an envelope"), 0); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// invoke runs one invocation of the given timeout, the manual clock
// moving on by itself meanwhile, about 100 times as fast as the wall
// clock (the feed's receive polls on it); it returns the mapping's totals
// and the virtual time it took.
func (fe *feedEnv) invoke(t *testing.T, timeout time.Duration) (eventsource.Stats, time.Duration) {
	t.Helper()
	h := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		resp, err := fe.obs.Handle(ctx, ev)
		fe.sentAtReturn = fe.out.Len()
		return resp, err
	}
	m := &eventsource.Mapping{Broker: fe.broker, Queue: fe.url, Handler: h, BatchSize: 1, Timeout: timeout, Clock: fe.clk}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
				fe.clk.Advance(eventsource.BatchingPoll)
			}
		}
	})
	start := fe.clk.Now()
	n, err := m.PollOnce(context.Background())
	took := fe.clk.Now().Sub(start)
	close(done)
	wg.Wait()
	if err != nil || n != 1 {
		t.Fatalf("invocation of %d records: %v\n%s", n, err, fe.logs.String())
	}
	return m.Stats(), took
}

// handledOnce checks that each operation's message was handled exactly
// once: one follow-up each, and one decision per message in all.
func (fe *feedEnv) handledOnce(t *testing.T, ids []string) {
	t.Helper()
	per := map[string]int{}
	for _, s := range fe.out.Take() {
		per[s.Env.OperationID]++
	}
	for _, id := range ids {
		if per[id] != 1 {
			t.Errorf("%s: %d follow-ups, want 1", id, per[id])
		}
	}
	if got := len(metricValues(t, fe.mlines, metrics.ActionDuration)); got != len(ids) {
		t.Errorf("%d decisions, want one per operation (%d)", got, len(ids))
	}
}

func metricValues(t *testing.T, b *handlertest.Buffer, name string) []float64 {
	t.Helper()
	var out []float64
	for line := range strings.Lines(b.String()) {
		var doc map[string]any
		if err := json.Unmarshal([]byte(line), &doc); err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		if v, ok := doc[name].(float64); ok {
			out = append(out, v)
		}
	}
	return out
}

func oneMetric(t *testing.T, b *handlertest.Buffer, name string) float64 {
	t.Helper()
	vs := metricValues(t, b, name)
	if len(vs) != 1 {
		t.Fatalf("%s: points %v, want one", name, vs)
	}
	return vs[0]
}

// gatedGen holds every GET (but those of job free) until open is closed,
// and tracks how many jobs have a GET in flight at once.
type gatedGen struct {
	inner *genace.Client
	open  chan struct{}
	free  string
	mu    sync.Mutex
	jobs  map[string]int
	most  int
}

func (g *gatedGen) Get(ctx context.Context, jobID string, _, _ time.Duration) (*genace.Job, error) {
	g.mu.Lock()
	g.jobs[jobID]++
	g.most = max(g.most, len(g.jobs))
	open := g.open
	if jobID == g.free {
		open = nil
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		if g.jobs[jobID]--; g.jobs[jobID] == 0 {
			delete(g.jobs, jobID)
		}
		g.mu.Unlock()
	}()
	if open != nil {
		select {
		case <-open:
		case <-ctx.Done():
		}
	}
	return g.inner.Get(ctx, jobID, 0, 5*time.Second)
}

func (g *gatedGen) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = make(chan struct{})
}

func (g *gatedGen) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.open)
}

func (g *gatedGen) inFlight() (now, most int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.jobs), g.most
}

// spyReceiver counts receives and can fail them and deletes: fail says
// for the n-th receive (from 1) whether it fails; failDeletes fails that
// many deletes, with the receipt handle in the error as SQS writes it.
type spyReceiver struct {
	observe.Receiver
	fail        func(n int) bool
	mu          sync.Mutex
	receives    int
	failDeletes int
	failed      []string // the receipt handles of the failed deletes
}

func (s *spyReceiver) Receive(ctx context.Context, max int, wait time.Duration) ([]events.SQSMessage, error) {
	s.mu.Lock()
	s.receives++
	n, fail := s.receives, s.fail
	s.mu.Unlock()
	if fail != nil && fail(n) {
		return nil, errors.New("injected: queue unavailable")
	}
	return s.Receiver.Receive(ctx, max, wait)
}

func (s *spyReceiver) Delete(ctx context.Context, receiptHandle string) error {
	s.mu.Lock()
	fail := s.failDeletes > 0
	if fail {
		s.failDeletes--
		s.failed = append(s.failed, receiptHandle)
	}
	s.mu.Unlock()
	if fail {
		return errors.New(`injected: the receipt handle "` + receiptHandle + `" is not valid`)
	}
	return s.Receiver.Delete(ctx, receiptHandle)
}

func (s *spyReceiver) count() int { s.mu.Lock(); defer s.mu.Unlock(); return s.receives }

// idleWithin bounds the virtual time of an invocation that ends once
// idle: one empty receive (20 s) after its work, with the clock running
// on during the work; the feed's stop time is 13 minutes in.
const idleWithin = 5 * time.Minute

// With messages already on the queue, one invocation given a one-record
// batch takes them all, handles each once, deletes each it acknowledged
// and leaves the one that failed for the queue to bring back; then,
// holding nothing and finding nothing, it ends long before its deadline.
func TestFeedTakesTheQueueIntoOneInvocation(t *testing.T) {
	t.Parallel()
	fe := newFeedEnv(t, observe.Config{})
	ids := fe.enqueue(t, 14, true)
	st, took := fe.invoke(t, 15*time.Minute)
	if st.Deleted != 1 || st.Failed != 0 {
		t.Errorf("the batch's record: %+v, want it acknowledged and deleted", st)
	}
	fe.handledOnce(t, ids)
	if d := fe.broker.Depth(fe.url); d.Visible != 0 || d.Delayed != 0 || d.InFlight != 1 {
		t.Errorf("queue %+v, want only the malformed message left, in flight", d)
	}
	if got := oneMetric(t, fe.mlines, metrics.FeedReceived); got != 14 {
		t.Errorf("%s %v, want the 13 operations and the malformed one", metrics.FeedReceived, got)
	}
	if took > idleWithin {
		t.Errorf("the invocation took %v of its 15 minutes, want it to end once idle", took)
	}
}

// An invocation whose batch is done and whose queue is empty ends after
// one empty receive, not at its feed's stop time.
func TestFeedIdleInvocationEnds(t *testing.T) {
	t.Parallel()
	fe := newFeedEnv(t, observe.Config{})
	ids := fe.enqueue(t, 1, false)
	_, took := fe.invoke(t, 15*time.Minute)
	fe.handledOnce(t, ids)
	if took > idleWithin || fe.recv.count() == 0 {
		t.Errorf("the invocation took %v of its 15 minutes after %d receives, want it to end after an empty one", took, fe.recv.count())
	}
}

// Hold bounds the records held at once, the batch's included: the feed
// waits for room, and takes the rest as records finish.
func TestFeedHoldsAtMostHold(t *testing.T) {
	t.Parallel()
	fe := newFeedEnv(t, observe.Config{Hold: 3})
	fe.gen.close()
	ids := fe.enqueue(t, 8, false)
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for now, _ := fe.gen.inFlight(); now < 3 && time.Now().Before(deadline); now, _ = fe.gen.inFlight() {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // time for a fourth, were there room
		fe.gen.release()
	}()
	fe.invoke(t, 15*time.Minute)
	fe.handledOnce(t, ids)
	if _, most := fe.gen.inFlight(); most != 3 {
		t.Errorf("at most %d jobs read at once, want Hold (3)", most)
	}
	if got := oneMetric(t, fe.mlines, metrics.RecordsHeld); got != 3 {
		t.Errorf("%s %v, want 3", metrics.RecordsHeld, got)
	}
	if d := fe.broker.Depth(fe.url); d.Visible+d.InFlight+d.Delayed != 0 {
		t.Errorf("queue %+v, want every message handled and deleted", d)
	}
}

// A failed receive is logged, waited out and followed by another; the
// batch is not failed for it. A failed delete is logged without the
// receipt handle and counted, and its message stays for redelivery.
func TestFeedRidesOutQueueErrors(t *testing.T) {
	t.Parallel()
	fe := newFeedEnv(t, observe.Config{})
	fe.gen.close() // the batch's record is held until the second receive
	fe.recv.fail = func(n int) bool {
		if n == 2 {
			fe.gen.release()
		}
		return n == 1
	}
	fe.recv.failDeletes = 1
	ids := fe.enqueue(t, 3, false)
	st, _ := fe.invoke(t, 15*time.Minute)
	if st.Deleted != 1 || st.Failed != 0 {
		t.Errorf("the batch's record: %+v, want it acknowledged despite the queue's error", st)
	}
	fe.handledOnce(t, ids)
	if d := fe.broker.Depth(fe.url); d.Visible != 0 || d.InFlight != 1 {
		t.Errorf("queue %+v, want the message whose delete failed left in flight", d)
	}
	if got := oneMetric(t, fe.mlines, metrics.FeedDeleteFailures); got != 1 {
		t.Errorf("%s %v, want 1", metrics.FeedDeleteFailures, got)
	}
	logs := fe.logs.String()
	if !strings.Contains(logs, "feed: receive failed") || !strings.Contains(logs, "feed: delete failed") {
		t.Errorf("the queue's errors are not logged:\n%s", logs)
	}
	if len(fe.recv.failed) != 1 || strings.Contains(logs, fe.recv.failed[0]) || !strings.Contains(logs, "<receipt handle>") {
		t.Errorf("failed deletes %q: a receipt handle reached the log:\n%s", fe.recv.failed, logs)
	}
}

// Nothing is received once less than FeedMargin is left before the
// deadline (a record taken then would get no useful chain); with more
// left, the feed receives.
func TestFeedStopsAtItsMargin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		timeout  time.Duration
		receives bool
	}{
		{"less than the margin left", observe.DefaultFeedMargin - time.Second, false},
		{"less than a whole second's poll beyond it", observe.DefaultFeedMargin + 500*time.Millisecond, false},
		{"a poll's time beyond it", observe.DefaultFeedMargin + 30*time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fe := newFeedEnv(t, observe.Config{})
			fe.enqueue(t, 3, false)
			fe.invoke(t, tc.timeout)
			if got := fe.recv.count() > 0; got != tc.receives {
				t.Errorf("%d receives, want any: %v", fe.recv.count(), tc.receives)
			}
			if d, want := fe.broker.Depth(fe.url), map[bool]int{false: 2, true: 0}[tc.receives]; d.Visible != want {
				t.Errorf("queue %+v, want %d visible", d, want)
			}
		})
	}
}

// Handle returns only once every record the feed received is done, not
// when the batch is: here the feed stops receiving while its records are
// still being read.
func TestFeedReturnsAfterItsRecords(t *testing.T) {
	t.Parallel()
	fe := newFeedEnv(t, observe.Config{})
	ids := fe.enqueue(t, 3, false)
	fe.gen.close()
	fe.gen.free = handlertest.Get(t, fe.store, ids[0]).RemoteJobID // the batch's
	start := fe.clk.Now()
	go func() {
		// Past the feed's stop time (30 s in), well after the batch is done.
		for fe.clk.Now().Before(start.Add(45 * time.Second)) {
			time.Sleep(time.Millisecond)
		}
		fe.gen.release()
	}()
	fe.invoke(t, observe.DefaultFeedMargin+30*time.Second)
	if fe.sentAtReturn != len(ids) {
		t.Errorf("%d follow-ups sent when Handle returned, want all %d", fe.sentAtReturn, len(ids))
	}
	fe.handledOnce(t, ids)
}

// An empty batch holds nothing, and no event source mapping sends one:
// it comes from a test, a manual invoke or the cold-start benchmark, and
// must not start the feed (whose receive then timed the cold start's
// empty invoke at 80 ms, retrying SQS on a closed port).
func TestEmptyBatchDoesNotFeed(t *testing.T) {
	t.Parallel()
	fe := newFeedEnv(t, observe.Config{})
	fe.enqueue(t, 2, false)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	resp, err := fe.obs.Handle(ctx, events.SQSEvent{})
	if err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("Handle(empty): %+v, %v", resp, err)
	}
	if n := fe.recv.count(); n > 0 {
		t.Errorf("%d receives for an empty batch, want none", n)
	}
	if d := fe.broker.Depth(fe.url); d.Visible != 2 {
		t.Errorf("queue %+v, want both messages left for a mapping", d)
	}
}
