package benchmark

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/modroot"
)

const ms = time.Millisecond

// fixedLatencies make every event's timing hand-computable: 100 ms round
// trips, 20 ms pickup, 5 ms Lambda start and DynamoDB requests.
func fixedLatencies() Latencies {
	return Latencies{RoundTrip: Const(100 * ms), Pickup: Const(20 * ms), Start: Const(5 * ms), Dynamo: Const(5 * ms)}
}

func observeOne(o Observer, renderTime time.Duration) Render {
	return Simulate(o, []time.Duration{renderTime}, 2*time.Second, fixedLatencies(), 1).Renders[0]
}

// The floor on hand-computed renders (q = 2 s): 1 + ⌈(T − q)/30 s⌉.
func TestFloorGETs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		render time.Duration
		want   float64
	}{
		{time.Second, 1}, {2 * time.Second, 1}, {10 * time.Second, 2}, {32 * time.Second, 2},
		{32*time.Second + ms, 3}, {60 * time.Second, 3}, {100 * time.Second, 5}, {300 * time.Second, 11},
	} {
		if got := FloorGETs(c.render, 2*time.Second); got != c.want {
			t.Errorf("FloorGETs(%v) = %v, want %v", c.render, got, c.want)
		}
	}
}

// With fixed latencies the chain's timeline is hand-computable: the
// first poll leaves at 35 ms (write 5, pickup 20, start 5, GetItem 5),
// the queued→running change at 2 s answers it (back at 2.05 s), the next
// leaves at once and each further one 29 s after the previous; the ninth
// poll's window ends at Genace at 235.1 s and the chain hands over: the
// next chain's first poll reaches Genace at 235.235 s.
func TestObserveChainTimeline(t *testing.T) {
	t.Parallel()
	g := GenjobsChains()
	no := g
	no.Overlap = 0
	inChain := 100*ms/2 + 5*ms // half a round trip and the write
	for _, c := range []struct {
		name        string
		o           Observer
		render      time.Duration
		gets        int
		inVain      int
		detectAtMin time.Duration
		detectAtMax time.Duration
	}{
		{"queued only", g, time.Second, 1, 0, inChain, inChain},
		{"finish in the second poll", g, 10 * time.Second, 2, 0, inChain, inChain},
		{"finish in the fifth poll", g, 100 * time.Second, 5, 0, inChain, inChain},
		// Poll 3 (window to 61.1 s) and the overlapped poll 4 (arrived
		// 60.1 s) both answer the finish: one GET more than the looks.
		{"finish in an overlap", g, 60500 * ms, 4, 0, inChain, inChain},
		// Poll 3 is outstanding from 31.1 s: overlap closes the gap
		// between poll 2's window end (32.1 s) and the next arrival.
		{"finish at a window end, overlapped", g, 32150 * ms, 3, 0, inChain, inChain},
		// Without overlap poll 3 leaves at 32.15 s and arrives at
		// 32.2 s, after the finish: held in vain.
		{"finish at a window end, no overlap", no, 32150 * ms, 3, 1, 30 * time.Second, 30*time.Second + 200*ms},
		// In the hand-over gap (235.1 s, 235.235 s): the next chain's
		// first poll is held in vain, and its overlapped successor leaves
		// (at 264.185 s) before that answer is back.
		{"finish in the hand-over gap", g, 235150 * ms, 11, 1, 30 * time.Second, 30*time.Second + 200*ms},
		{"two chains", g, 300 * time.Second, 12, 0, inChain, inChain},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := observeOne(c.o, c.render)
			if r.GETs != c.gets || r.InVain != c.inVain {
				t.Errorf("GETs %d, in vain %d; want %d, %d", r.GETs, r.InVain, c.gets, c.inVain)
			}
			if r.Detect < c.detectAtMin || r.Detect > c.detectAtMax {
				t.Errorf("detected after %v, want within [%v, %v]", r.Detect, c.detectAtMin, c.detectAtMax)
			}
		})
	}
}

// A chain is one invocation, one hand-over write and message; the
// changes are written at once; a finished render writes and messages
// delivery once.
func TestObserveCountsInvocationsWritesAndMessages(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		render                     time.Duration
		invocations, writes, sends int
	}{
		{10 * time.Second, 1, 2, 1},  // running (changed), finished
		{300 * time.Second, 2, 3, 2}, // running, hand-over, finished
	} {
		r := observeOne(GenjobsChains(), c.render)
		if r.Invocations != c.invocations || r.Writes != c.writes || r.Sends != c.sends {
			t.Errorf("%v render: invocations %d, writes %d, sends %d; want %d, %d, %d", c.render, r.Invocations, r.Writes, r.Sends, c.invocations, c.writes, c.sends)
		}
	}
	// The invocation runs from its start to the last write: 10 s render,
	// handler from 30 ms to 10.05 s + 5 ms.
	if r := observeOne(GenjobsChains(), 10*time.Second); r.Busy != 10055*ms-30*ms {
		t.Errorf("busy %v, want %v", r.Busy, 10055*ms-30*ms)
	}
}

// A fixed poller on a 12 s render looks at about 5, 10 and 15 s.
func TestObserveFixedPoller(t *testing.T) {
	t.Parallel()
	r := observeOne(Fixed{Interval: 5 * time.Second}, 12*time.Second)
	// Each poll: 5 s delay, 20 ms pickup, 5 ms start, 5 ms GetItem, 50 ms
	// to Genace; back 50 ms later, written 5 ms after.
	if r.GETs != 3 || r.Invocations != 3 || r.Writes != 3 {
		t.Errorf("GETs %d, invocations %d, writes %d; want 3 each", r.GETs, r.Invocations, r.Writes)
	}
	if want := 5*ms + 3*(5*time.Second+20*ms+5*ms+5*ms+100*ms+5*ms) - 12*time.Second; r.Detect != want {
		t.Errorf("detected after %v, want %v", r.Detect, want)
	}
}

// A Step Functions loop hands over without a write, a message or a
// GetItem: its gap is only a Lambda start.
func TestObserveOrchestratedHandover(t *testing.T) {
	t.Parallel()
	sfn := GenjobsChains()
	sfn.Orchestrated = true
	r := observeOne(sfn, 300*time.Second)
	if r.Writes != 0 || r.Sends != 0 || r.Invocations != 2 || r.Detect != 55*ms {
		t.Errorf("writes %d, sends %d, invocations %d, detect %v; want 0, 0, 2, 55ms", r.Writes, r.Sends, r.Invocations, r.Detect)
	}
	poll := sfn
	poll.Chain = 30 * time.Second
	if r := observeOne(poll, 100*time.Second); r.Invocations < 4 {
		t.Errorf("one poll per task: %d invocations for a 100 s render, want ≥ 4", r.Invocations)
	}
}

// Longer round trips and slower pickups widen the hand-over gap: p99
// and the share of renders held in vain never fall along either axis.
func TestSimulateSensitivityIsMonotone(t *testing.T) {
	t.Parallel()
	w := DefaultWorkload()
	times := w.Sample(7)
	run := func(rtt, pick time.Duration) Outcome {
		l := DefaultLatencies()
		l.RoundTrip.Median, l.Pickup.Median = rtt, pick
		return Simulate(GenjobsChains(), times, w.QueueFor, l, 7)
	}
	for _, pick := range sensitivityPickup {
		var prev Outcome
		for i, rtt := range sensitivityRTT {
			o := run(rtt, pick)
			if i > 0 && (o.P99 < prev.P99 || o.InVainShare < prev.InVainShare) {
				t.Errorf("pickup %v: rtt %v gives p99 %v, in vain %.4f; below the shorter round trip's %v, %.4f", pick, rtt, o.P99, o.InVainShare, prev.P99, prev.InVainShare)
			}
			prev = o
		}
	}
	for _, rtt := range sensitivityRTT {
		var prev Outcome
		for i, pick := range sensitivityPickup {
			o := run(rtt, pick)
			if i > 0 && (o.P99 < prev.P99 || o.InVainShare < prev.InVainShare) {
				t.Errorf("rtt %v: pickup %v gives p99 %v, in vain %.4f; below the faster pickup's %v, %.4f", rtt, pick, o.P99, o.InVainShare, prev.P99, prev.InVainShare)
			}
			prev = o
		}
	}
	if a, b := run(50*ms, 20*ms), run(500*ms, time.Second); b.InVainShare <= a.InVainShare {
		t.Errorf("in vain %.4f at 500 ms / 1 s, not above %.4f at 50 ms / 20 ms", b.InVainShare, a.InVainShare)
	}
}

// The same seed replays the same outcome; another seed draws other
// latencies.
func TestSimulateIsSeeded(t *testing.T) {
	t.Parallel()
	times := DefaultWorkload().Sample(1)[:200]
	a := Simulate(GenjobsChains(), times, 2*time.Second, DefaultLatencies(), 1)
	b := Simulate(GenjobsChains(), times, 2*time.Second, DefaultLatencies(), 1)
	c := Simulate(GenjobsChains(), times, 2*time.Second, DefaultLatencies(), 2)
	if !slices.Equal(a.Renders, b.Renders) {
		t.Error("the same seed gave another outcome")
	}
	if slices.Equal(a.Renders, c.Renders) {
		t.Error("another seed gave the same outcome")
	}
}

// A cold start is drawn at about its share.
func TestModelLatencyTail(t *testing.T) {
	t.Parallel()
	d := DefaultLatencies().Start
	rng := rngFor(3)
	cold := 0
	for range 100000 {
		if d.Sample(rng) > 50*ms {
			cold++
		}
	}
	if cold < 800 || cold > 1200 {
		t.Errorf("%d of 100,000 starts over 50 ms, want about 1 %%", cold)
	}
}

// The pricing arithmetic of genjobs, the Step Functions rivals and the
// floor.
func TestModelCostArithmetic(t *testing.T) {
	t.Parallel()
	pr := &PipelineResult{Operations: 10, App: Requests{SQSSend: 10, DynamoPut: 10, WRU: 20},
		Functions: map[string]FunctionStats{
			FnSubmit:  {Actions: 10, Batches: 5, Requests: Requests{DynamoGet: 10, DynamoPut: 20, WRU: 40, RRU: 10, SQSSend: 10}},
			FnObserve: {Actions: 20, Batches: 5, Requests: Requests{DynamoGet: 20, DynamoPut: 40, WRU: 80, RRU: 20, SQSSend: 20, SQSChangeVisibility: 10}},
			FnDeliver: {Actions: 10, Batches: 10, Requests: Requests{DynamoGet: 10, DynamoPut: 10, WRU: 30, RRU: 10}},
		}}
	fns := Functions{SubmitMB: 1024, ObserveMB: 512, DeliverMB: 1024, SubmitBusy: time.Second, DeliverBusy: 2 * time.Second}
	o := Outcome{InvocationsPerRender: 2, WritesPerRender: 3, SendsPerRender: 2, BilledSecondsPerRender: 10, Billed100msPerRender: 100, SchedulesPerRender: 0.5}
	g := PerRender(pr, o, fns, OneRecord)
	want := Requests{SQSSend: 1 + 1 + 2, SQSReceive: 1 + 1 + 2, SQSDelete: 1 + 1 + 2, SQSChangeVisibility: 1,
		DynamoGet: 1 + 1 + 2, DynamoPut: 1 + 2 + 1 + 3, RRU: 1 + 1 + 2, WRU: 2 + 4 + 3 + 3*2, Schedules: 0.5,
		LambdaInvocations: 1 + 1 + 2, LambdaGBSeconds: 1 + 2 + 5}
	if g != want {
		t.Errorf("genjobs per render\n got %+v\nwant %+v", g, want)
	}
	occ := pr.Measured()
	if occ != (Occupancy{2, 4, 1}) {
		t.Errorf("measured occupancy %+v, want {2 4 1}", occ)
	}
	b := PerRender(pr, o, fns, occ)
	if b.LambdaInvocations != 0.5+1+0.5 || b.LambdaGBSeconds != 0.5+2+1.25 {
		t.Errorf("batched: %v invocations, %v GB-s; want 2, 3.75", b.LambdaInvocations, b.LambdaGBSeconds)
	}
	sf := StandardPerRender(pr, o, fns)
	if sf.SFNTransitions != 3+2*2 || sf.LambdaInvocations != 4 || sf.SQS() != 0 || sf.LambdaGBSeconds != 1+2+5 {
		t.Errorf("Standard per render %+v", sf)
	}
	ex := ExpressPerRender(pr, o, fns)
	if ex.ExpressRequests != 2 || math.Abs(ex.ExpressGBSeconds-10.0/16) > 1e-12 || ex.SFNTransitions != 0 {
		t.Errorf("Express per render %+v", ex)
	}
	p := ListPrices()
	if got := p.Dollars(Requests{ExpressRequests: 1e6, ExpressGBSeconds: 3600}); math.Abs(got-1.06) > 1e-9 {
		t.Errorf("a million Express requests and a GB-hour cost %v, want 1.06", got)
	}
	fl := FloorPerRender([]time.Duration{10 * time.Second, 20 * time.Minute}, fns)
	if fl.SQS() != 9 || fl.WRU != 3 || fl.LambdaInvocations != 3.5 {
		t.Errorf("floor %+v", fl)
	}
	if want := 0.125 * (605*time.Second + 3*time.Second).Seconds(); math.Abs(fl.LambdaGBSeconds-want) > 1e-9 {
		t.Errorf("floor GB-s %v, want %v", fl.LambdaGBSeconds, want)
	}
}

func TestPlotsArePNGs(t *testing.T) {
	t.Parallel()
	times := []time.Duration{time.Second, 10 * time.Second, time.Minute, 20 * time.Minute}
	g := Simulate(GenjobsChains(), times, 2*time.Second, DefaultLatencies(), 1)
	f := Simulate(Fixed{Interval: 5 * time.Second}, times, 2*time.Second, DefaultLatencies(), 1)
	for name, draw := range map[string]func(*bytes.Buffer) error{
		"observation": func(b *bytes.Buffer) error { return WritePlot(b, []Outcome{g, f}) },
		"cost-latency": func(b *bytes.Buffer) error {
			return WriteCostLatency(b, []CostPoint{{"a", 0.5, time.Second}, {"b", 2, 50 * ms}})
		},
		"gets-floor": func(b *bytes.Buffer) error { return WriteGETsFloor(b, g, 2*time.Second) },
	} {
		var b bytes.Buffer
		if err := draw(&b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.HasPrefix(b.Bytes(), []byte("\x89PNG")) {
			t.Errorf("%s: not a PNG", name)
		}
	}
}

// The report's model rows carry the targets and their verdicts.
func TestReportModelRows(t *testing.T) {
	t.Parallel()
	r := &Results{Workload: DefaultWorkload(), Latencies: DefaultLatencies(), Prices: ListPrices(), Functions: templateFunctions(t),
		Count: &PipelineResult{Operations: 1, Functions: map[string]FunctionStats{}}}
	r.Workload.Renders = 300
	r.model()
	r.price()
	r.Scale = ScaleTable(DefaultScaleInputs(r.Functions, r.Designs[0].Low), scaleInFlight...)
	var md strings.Builder
	r.WriteMarkdown(&md)
	for _, want := range []string{"### Scale: renders in flight", "| 100000 | ", "≤ 1.05×", "< 1.0 s", "≤ 1.5× the floor", "below every rival", "| 500.0 ms | 1000.0 ms |", "By construction", "step-functions/pricing"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("results.md lacks %q", want)
		}
	}
	if n := strings.Count(md.String(), "**met**") + strings.Count(md.String(), "**missed**"); n < 4 {
		t.Errorf("%d verdicts, want at least the 4 model targets", n)
	}
}

func TestSigmaPutsFivePercentOverTenMinutes(t *testing.T) {
	s := SigmaFor(10, Z95)
	if math.Abs(s-math.Log(10)/1.645) > 1e-3 {
		t.Errorf("sigma = %v, want ln(10)/1.645", s)
	}
}

// The log-normal sampler's median and 95th percentile match the
// workload's on a large seeded sample, and a seed replays exactly.
func TestLogNormalSampler(t *testing.T) {
	w := DefaultWorkload()
	w.Renders = 200000
	got := w.Sample(42)
	if !slices.Equal(got, w.Sample(42)) {
		t.Fatal("the same seed gave another sample")
	}
	if slices.Equal(got[:100], w.Sample(43)[:100]) {
		t.Fatal("another seed gave the same sample")
	}
	s := slices.Clone(got)
	slices.Sort(s)
	if med := Percentile(s, 0.5); math.Abs(med.Seconds()-60)/60 > 0.01 {
		t.Errorf("median %v, want 60 s ±1 %%", med)
	}
	if p95 := Percentile(s, 0.95); math.Abs(p95.Seconds()-600)/600 > 0.03 {
		t.Errorf("p95 %v, want 600 s ±3 %%", p95)
	}
}

func TestPercentileIsNearestRank(t *testing.T) {
	s := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for q, want := range map[float64]time.Duration{0.5: 5, 0.99: 10, 0.1: 1, 0.11: 2, 1: 10} {
		if got := Percentile(s, q); got != want {
			t.Errorf("Percentile(%v) = %v, want %v", q, got, want)
		}
	}
	if Percentile(nil, 0.5) != 0 {
		t.Error("empty input")
	}
}

func TestMedian(t *testing.T) {
	if m := median([]time.Duration{3, 1, 2}); m != 2 {
		t.Errorf("median %v", m)
	}
	if m := median([]time.Duration{4, 1, 2, 3}); m != 2 {
		t.Errorf("median of four %v", m)
	}
	if median(nil) != 0 {
		t.Error("median of none")
	}
}

// templateFunctions are the module's template.yaml memory sizes.
func templateFunctions(t *testing.T) Functions {
	t.Helper()
	root, err := modroot.Find("")
	if err != nil {
		t.Fatal(err)
	}
	f, err := TemplateFunctions(root)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
