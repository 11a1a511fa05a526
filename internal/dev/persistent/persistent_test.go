// Package persistent_test drives the real handlers and the real sweep
// through the embedded queue and event source, with the template's own
// timing (the queues' visibility timeouts, receive counts and DLQs from
// internal/dev/topology, the sweep's cadence from topology and its overdue
// threshold and claim timeout from template.yaml's parameters), on a
// virtual clock, against failures that never clear by themselves. Each
// must end parked with exactly one open review and OperationsParked
// counted, within a stated bound; once the failure clears, the
// operator's replay resumes the operation to delivery.
package persistent_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/dev/localpack"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/replay"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/stack"
	"github.com/genjobs/genjobs/internal/store"
)

// harness is the deployed stack on one machine and a virtual clock.
type harness struct {
	clk     *clock.Manual
	local   *topology.Local
	store   store.Store
	sim     *genacesim.Simulator
	client  *genace.Client
	disp    *schedule.Dispatcher
	sweeper func(context.Context) error
	every   time.Duration // the sweep's cadence
	metrics *handlertest.Buffer
	logs    *handlertest.Buffer
	gets    atomic.Int64
	sweeps  int
}

// corrupting flips a byte of every download while on: a finished render
// whose bytes never match the sha256 Genace reported.
type corrupting struct {
	*genace.Client
	on *atomic.Bool
}

func (c corrupting) Download(ctx context.Context, u genace.SignedURL, timeout time.Duration) (io.ReadCloser, int64, error) {
	body, n, err := c.Client.Download(ctx, u, timeout)
	if err != nil || !c.on.Load() {
		return body, n, err
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, 0, err
	}
	if len(b) > 0 {
		b[len(b)/2] ^= 0xff
	}
	return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
}

// counting counts GETs of the job.
type counting struct {
	corrupting
	s *harness
}

func (c counting) Get(ctx context.Context, id string, wait, timeout time.Duration) (*genace.Job, error) {
	c.s.gets.Add(1)
	return c.Client.Get(ctx, id, wait, timeout)
}

// renders are quick: the failures, not the renders, take the time.
var renders = genacesim.Config{DefaultModel: genacesim.ModelConfig{Price: 10, QueueFor: time.Minute, RunFor: 2 * time.Minute, OutputCount: 1}}

func newStack(t *testing.T, simCfg genacesim.Config, corrupt *atomic.Bool) *harness {
	t.Helper()
	s := &harness{clk: clock.NewManual(handlertest.Start), metrics: &handlertest.Buffer{}, logs: &handlertest.Buffer{}}
	var err error
	s.local, err = topology.Stack.Local(topology.LocalConfig{Clock: s.clk})
	if err != nil {
		t.Fatal(err)
	}
	s.sim, s.client = handlertest.Sim(t, s.clk, simCfg)
	s.store = handlertest.OpenStore(t, "bolt")
	s.disp, err = schedule.NewDispatcher(schedule.Config{Queues: s.local.Targets(), MaxQueueDelay: 365 * 24 * time.Hour}, s.local.Broker, nil, s.clk)
	if err != nil {
		t.Fatal(err)
	}
	g := counting{corrupting{s.client, corrupt}, s}
	log := slog.New(slog.NewTextHandler(s.logs, nil))
	m := func(fn string) *metrics.Emitter { return metrics.New(s.metrics, fn, s.clk) }
	// The deployed policies, but without long polls: a handler must never
	// wait on the virtual clock, which moves only when every queue is idle.
	ps := schedule.DefaultPolicies()
	ps.Default.LongPoll, ps.Default.Immediate = 0, 0
	delays := schedule.NewObservation(ps)
	dir, err := localpack.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hs, err := s.local.Handlers(func(f topology.Function) (stack.Deps, bool) {
		var gen stack.Genace = g
		if f.Name == topology.Submit {
			gen = s.client // the POSTs are not the reads this test counts
		}
		// The sweep's thresholds as deployed (topology holds them against
		// the template's parameter defaults).
		c := config.Config{SweepClaimTimeout: topology.Stack.Sweep.ClaimTimeout, SweepOverdue: topology.Stack.Sweep.OverdueAfter}
		return stack.Deps{Config: c, Store: s.store, Genace: gen, Artifacts: dir, Extender: s.local.Broker, Sender: s.disp, Delays: delays,
			Clock: s.clk, Log: log, Metrics: m(f.Name)}, true
	})
	if err != nil {
		t.Fatal(err)
	}
	fn, _ := topology.Stack.Function(topology.Sweep)
	every, ok := fn.Cadence()
	if !ok {
		t.Fatalf("sweep schedule %q: want rate(N minutes)", fn.Schedule)
	}
	s.every = every
	s.sweeper = hs[topology.Sweep].Scheduled
	s.local.Consume(topology.ConsumeConfig{
		Handlers:          topology.Batches(hs),
		NoBatchingWindows: true,
	})
	return s
}

// submit creates an operation and puts its dispatch on the queue.
func (s *harness) submit(t *testing.T, id string) {
	t.Helper()
	rec := handlertest.Create(t, s.store, handlertest.Prepared(id))
	body, err := handlertest.Dispatch(rec).Env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	url, _ := s.local.Targets()[message.ActionSubmitGeneration]
	if _, err := s.local.Broker.Send(context.Background(), url.URL, body, 0); err != nil {
		t.Fatal(err)
	}
}

// run drives the stack until done says so or the virtual time limit:
// every mapping polled until idle, the sweep at its cadence, the clock
// moved to the next event. It returns the virtual time taken.
func (s *harness) run(t *testing.T, limit time.Duration, done func() bool) time.Duration {
	t.Helper()
	start := s.clk.Now()
	nextSweep := start.Add(s.every)
	for !done() {
		n := 0
		for _, m := range s.local.Mappings {
			h, _ := m.PollOnce(context.Background())
			n += h
		}
		if n > 0 {
			continue
		}
		next, ok := s.local.Broker.NextEvent()
		if !ok || nextSweep.Before(next) {
			next = nextSweep
		}
		if next.Sub(start) > limit {
			break
		}
		s.clk.Set(next)
		if !s.clk.Now().Before(nextSweep) {
			if err := s.sweeper(context.Background()); err != nil {
				t.Fatalf("sweep: %v", err)
			}
			s.sweeps++
			nextSweep = nextSweep.Add(s.every)
		}
	}
	return s.clk.Now().Sub(start)
}

func (s *harness) rec(t *testing.T, id string) operation.Record {
	return handlertest.Get(t, s.store, id)
}

// parkedCount is how many operations OperationsParked counted.
func (s *harness) parkedCount() int { return strings.Count(s.metrics.String(), `"OperationsParked":1`) }

// checkParked asserts one open review naming the job and the category,
// and one park counted.
func (s *harness) checkParked(t *testing.T, id, category string) operation.Record {
	t.Helper()
	got := s.rec(t, id)
	if got.Parked == nil || got.Active() || got.LastError != category {
		t.Fatalf("record %s parked %+v last error %q; want parked with %s", got.Phase, got.Parked, got.LastError, category)
	}
	open, err := s.store.OpenReviewsOf(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || open[0].RemoteJobID != got.RemoteJobID || open[0].ErrorCategory != category || !strings.Contains(open[0].Reason, got.RemoteJobID) {
		t.Fatalf("open reviews %+v; want exactly one naming job %s and %s", open, got.RemoteJobID, category)
	}
	if n := s.parkedCount(); n != 1 {
		t.Fatalf("OperationsParked counted %d times; want 1", n)
	}
	if _, due := got.SweepDue(); due {
		t.Fatal("a parked record is still in the sweep's index")
	}
	return got
}

// resume plans and replays the parked operation as an operator would,
// and runs the stack until it is delivered.
func (s *harness) resume(t *testing.T, id string, want operation.Action) {
	t.Helper()
	r := &replay.Replayer{Store: s.store, Sender: s.disp, Clock: s.clk, Genace: s.client}
	plan, err := r.Plan(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Recommendation.Action != want || !plan.Ready {
		t.Fatalf("plan %+v; want %s, ready", plan, want)
	}
	if _, err := r.Replay(context.Background(), replay.Request{OperationID: id, Action: want, Operator: "ops"}); err != nil {
		t.Fatal(err)
	}
	s.run(t, time.Hour, func() bool { return s.rec(t, id).Phase == operation.PhaseDelivered })
	if got := s.rec(t, id); got.Phase != operation.PhaseDelivered {
		t.Fatalf("after the replay: %s, parked %+v", got.Phase, got.Parked)
	}
}

// A Genace that answers 500 for the job's every GET: observation retries
// with capped backoff for hours, then parks. Bound: within 12 virtual
// hours and 100 GETs (the budget is observe.DefaultMaxReadFailures, 80,
// about 6 hours). On the old code it never parked: every sweep re-armed
// the due record before the failed message came back, which then went
// stale instead of dead-lettering.
func TestPersistentReadFailureParks(t *testing.T) {
	t.Parallel()
	var sick atomic.Bool
	s := newStack(t, renders, new(atomic.Bool))
	s.sim.SetFaultFunc(func(info genacesim.RequestInfo) genacesim.Fault {
		if info.Kind == genacesim.KindGet && sick.Load() {
			return genacesim.ServerErrorNoJob(500)
		}
		return genacesim.NoFault()
	})
	sick.Store(true)
	s.submit(t, "op-sick")
	took := s.run(t, 12*time.Hour, func() bool { return s.rec(t, "op-sick").Parked != nil })
	got := s.rec(t, "op-sick")
	if got.Parked == nil {
		t.Fatalf("not parked after %s: %s, %d read failures, %d GETs, %d sweeps, DLQ %d\n%s",
			took, got.Phase, got.Counters.ReadFailures, s.gets.Load(), s.sweeps, s.local.DeadLetterDepth(), tail(s.logs.String()))
	}
	s.checkParked(t, "op-sick", "genace_read_failed")
	if g := s.gets.Load(); g > 100 || took > 12*time.Hour {
		t.Fatalf("parked after %s and %d GETs; want within 12h and 100 GETs", took, g)
	}
	t.Logf("parked after %s virtual, %d GETs, %d sweeps", took.Round(time.Minute), s.gets.Load(), s.sweeps)
	// Genace answers again: the operator's replay resumes observation.
	sick.Store(false)
	s.resume(t, "op-sick", operation.ActionObserve)
}

// A Genace whose 200 for the job no longer decodes (a state the contract
// does not know): retrying gets the same answer, so observation parks
// after worker.SuspectAttempts (3) reads instead of retrying for hours.
// Bound: within 10 virtual minutes and 5 GETs. On the old code the drift
// was an ordinary transient failure, with no end.
func TestContractDriftParksQuickly(t *testing.T) {
	t.Parallel()
	var drift atomic.Bool
	s := newStack(t, renders, new(atomic.Bool))
	s.sim.SetFaultFunc(func(info genacesim.RequestInfo) genacesim.Fault {
		if info.Kind == genacesim.KindGet && drift.Load() {
			return genacesim.Drifted(genacesim.DriftUnknownState)
		}
		return genacesim.NoFault()
	})
	drift.Store(true)
	s.submit(t, "op-drift")
	took := s.run(t, 12*time.Hour, func() bool { return s.rec(t, "op-drift").Parked != nil })
	if got := s.rec(t, "op-drift"); got.Parked == nil {
		t.Fatalf("not parked after %s: %s, %d read failures, %d GETs", took, got.Phase, got.Counters.ReadFailures, s.gets.Load())
	}
	s.checkParked(t, "op-drift", "genace_contract_drift")
	if took > 10*time.Minute || s.gets.Load() > 5 {
		t.Fatalf("parked after %s and %d GETs; want within 10 min and 5", took, s.gets.Load())
	}
	t.Logf("parked after %s virtual, %d GETs", took.Round(time.Second), s.gets.Load())
	drift.Store(false)
	s.resume(t, "op-drift", operation.ActionObserve)
}

// A finished render whose download never matches its sha256: delivery
// tries worker.SuspectAttempts (3) times, then parks. Bound: within 30
// virtual minutes of the job's success and 5 downloads. On the old code
// it stayed succeeded for days, retried forever.
func TestNeverVerifyingCopyParks(t *testing.T) {
	t.Parallel()
	var corrupt atomic.Bool
	corrupt.Store(true)
	s := newStack(t, renders, &corrupt)
	var files atomic.Int64
	s.sim.SetFaultFunc(func(info genacesim.RequestInfo) genacesim.Fault {
		if info.Kind == genacesim.KindFile {
			files.Add(1)
		}
		return genacesim.NoFault()
	})
	s.submit(t, "op-bad-copy")
	s.run(t, time.Hour, func() bool { return s.rec(t, "op-bad-copy").Phase == operation.PhaseSucceeded })
	took := s.run(t, 7*24*time.Hour, func() bool { return s.rec(t, "op-bad-copy").Parked != nil })
	got := s.rec(t, "op-bad-copy")
	if got.Parked == nil {
		t.Fatalf("not parked after %s: %s, %d failures, %d downloads, %d sweeps, DLQ %d\n%s",
			took, got.Phase, got.Counters.ReadFailures, files.Load(), s.sweeps, s.local.DeadLetterDepth(), tail(s.logs.String()))
	}
	s.checkParked(t, "op-bad-copy", "artifact_verify_failed")
	if took > 30*time.Minute || files.Load() > 5 {
		t.Fatalf("parked after %s and %d downloads; want within 30 min and 5", took, files.Load())
	}
	t.Logf("parked after %s virtual, %d downloads", took.Round(time.Second), files.Load())
	corrupt.Store(false)
	s.resume(t, "op-bad-copy", operation.ActionDeliver)
}

func tail(s string) string {
	if len(s) > 4000 {
		return s[len(s)-4000:]
	}
	return s
}
