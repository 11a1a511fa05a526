package benchmark

import (
	"bytes"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/schedule"
)

const ms = time.Millisecond

// realPolicy is the default policy with a 15-minute back-to-back window,
// so the tests do not move when the default does.
func realPolicy() schedule.Policy {
	p := schedule.DefaultPolicies().Default
	p.Immediate = 15 * time.Minute
	return p
}

// A fixed 5 s poller on a 12 s render looks at about 5, 10 and 15 s: three
// GETs, the last one 3 s (and the overheads) after the finish.
func TestFixedPollerOnA12sRender(t *testing.T) {
	r := Observe(Fixed{Interval: 5 * time.Second}, 12*time.Second, 0, DefaultOverheads())
	if r.GETs != 3 {
		t.Errorf("GETs = %d, want 3", r.GETs)
	}
	if r.Detect <= 0 || r.Detect >= 5*time.Second {
		t.Errorf("detected after %v, want within (0, 5 s)", r.Detect)
	}
	// 3 × (20 ms SQS + 50 ms round trip) after the three 5 s delays.
	if want := 15*time.Second + 3*70*ms - 12*time.Second; r.Detect != want {
		t.Errorf("detected after %v, want %v", r.Detect, want)
	}
	if r.LongPolls != 0 || r.Busy != 3*50*ms || r.BilledMS != 150 {
		t.Errorf("long polls %d, busy %v, billed %d ms: want 0, 150 ms, 150", r.LongPolls, r.Busy, r.BilledMS)
	}
}

// A long poll in progress answers at the finish: detection is the answer's
// way back, half a round trip.
func TestLongPollDetectsInstantly(t *testing.T) {
	ov := DefaultOverheads()
	r := Observe(NewGenjobs("g", realPolicy(), 1), 12*time.Second, 0, ov)
	if r.GETs != 1 || r.LongPolls != 1 || r.InVain != 0 {
		t.Errorf("GETs %d, long polls %d, in vain %d: want 1, 1, 0", r.GETs, r.LongPolls, r.InVain)
	}
	if r.Detect != ov.RoundTrip/2 {
		t.Errorf("detected after %v, want %v", r.Detect, ov.RoundTrip/2)
	}
	// The function ran from its start until the save: 25 ms + 12 s − 45 ms + 25 ms.
	if want := 12*time.Second - 20*ms + 25*ms; r.Busy != want {
		t.Errorf("busy %v, want %v", r.Busy, want)
	}
	// The queued→running change ends the first long poll: one more GET.
	q := Observe(NewGenjobs("g", realPolicy(), 1), 12*time.Second, 2*time.Second, ov)
	if q.GETs != 2 || q.Detect != ov.RoundTrip/2 {
		t.Errorf("with a queue phase: GETs %d, detect %v; want 2, %v", q.GETs, q.Detect, ov.RoundTrip/2)
	}
	// Back to back: one GET per cycle of a long poll and the overheads.
	long := Observe(NewGenjobs("g", realPolicy(), 1), 10*time.Minute, 0, ov)
	cycle := realPolicy().LongPoll + ov.SQSLatency + ov.RoundTrip
	if want := int(math.Ceil(float64(10*time.Minute) / float64(cycle))); long.GETs != want || long.Detect != ov.RoundTrip/2 {
		t.Errorf("10 min render: GETs %d, detect %v; want %d, %v", long.GETs, long.Detect, want, ov.RoundTrip/2)
	}
}

// A job that finishes between two looks is already terminal when the next
// long poll arrives: Genace holds it for the whole wait.
func TestLongPollOnAFinishedJobIsHeldInVain(t *testing.T) {
	ov := DefaultOverheads()
	// First look: starts 20 ms, arrives 45 ms, answers 30.045 s, saved
	// 30.070 s; second: starts 30.090 s, arrives 30.115 s.
	r := Observe(NewGenjobs("g", realPolicy(), 1), 30100*ms, 0, ov)
	if r.GETs != 2 || r.InVain != 1 {
		t.Fatalf("GETs %d, in vain %d: want 2, 1", r.GETs, r.InVain)
	}
	if want := 30115*ms + 30*time.Second + 25*ms - 30100*ms; r.Detect != want {
		t.Errorf("detected after %v, want %v", r.Detect, want)
	}
}

// The usual backoff looks at about 1, 3, 7 and 15 s.
func TestBackoffLooksAtDoublingIntervals(t *testing.T) {
	e := Exponential{Base: time.Second, Cap: time.Minute}
	for n, want := range map[int]time.Duration{1: 2 * time.Second, 5: 32 * time.Second, 6: time.Minute, 60: time.Minute} {
		if got := e.Next(0, n); got != want {
			t.Errorf("Next after %d = %v, want %v", n, got, want)
		}
	}
	r := Observe(e, 10*time.Second, 0, DefaultOverheads())
	if r.GETs != 4 {
		t.Errorf("GETs = %d, want 4", r.GETs)
	}
	if want := 15*time.Second + 4*70*ms - 10*time.Second; r.Detect != want {
		t.Errorf("detected after %v, want %v", r.Detect, want)
	}
}

// Past Immediate the real policy backs off, and delays over 900 s go
// through EventBridge Scheduler.
func TestGenjobsBacksOffAfterImmediate(t *testing.T) {
	g := NewGenjobs("g", realPolicy(), 1)
	if d := g.Next(14*time.Minute, 1); d != 0 {
		t.Errorf("delay at 14 min = %v, want 0 (back to back)", d)
	}
	if d := g.Next(15*time.Minute+time.Second, 1); d < 24*time.Second || d > 36*time.Second {
		t.Errorf("first backed-off delay = %v, want 30 s ±20 %%", d)
	}
	if w := g.Wait(0, 31*time.Second); w != 0 {
		t.Errorf("wait after a 31 s old snapshot = %v, want 0 (observe's window rule)", w)
	}
	if w := g.Wait(0, 100*ms); w != 30*time.Second {
		t.Errorf("wait after a fresh snapshot = %v, want 30 s", w)
	}
	r := Observe(g, 2*time.Hour, 0, DefaultOverheads())
	if r.Schedules == 0 {
		t.Error("a 2 h render made no EventBridge schedule")
	}
	if r.GETs > 60 || r.Detect < time.Minute {
		t.Errorf("2 h render: GETs %d, detect %v; want few GETs and a late detection under backoff", r.GETs, r.Detect)
	}
}

// Back to back for hours runs into MaxObservations: the render is parked.
func TestBudgetStallsALongBackToBackRender(t *testing.T) {
	p := realPolicy()
	p.Immediate = operation.DefaultBudgets.Polling
	r := Observe(NewGenjobs("g", p, 1), 2*time.Hour, 0, DefaultOverheads())
	if !r.Stalled || r.Detect != Never || r.GETs != operation.DefaultBudgets.MaxObservations {
		t.Errorf("stalled %v, detect %v, GETs %d; want true, never, %d", r.Stalled, r.Detect, r.GETs, operation.DefaultBudgets.MaxObservations)
	}
	o := Simulate(NewGenjobs("g", p, 1), []time.Duration{time.Second, 2 * time.Hour}, 0, DefaultOverheads())
	if o.Stalled != 1 || o.Max != Never || o.P99 != Never || o.P50 == Never {
		t.Errorf("stalled %d, p50 %v, p99 %v, max %v", o.Stalled, o.P50, o.P99, o.Max)
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

// The comparison's arithmetic: the Step Functions loop's transitions and
// tasks, and genjobs' requests scaled by observations per render.
func TestCostArithmetic(t *testing.T) {
	pr := &PipelineResult{Operations: 10, App: Requests{SQSSend: 10, DynamoPut: 10, WRU: 20},
		Functions: map[string]FunctionStats{
			FnSubmit:  {Actions: 10, Batches: 5, Requests: Requests{DynamoGet: 10, DynamoPut: 20, WRU: 40, RRU: 10, SQSSend: 10}},
			FnObserve: {Actions: 20, Batches: 5, Requests: Requests{DynamoGet: 20, DynamoPut: 20, WRU: 100, RRU: 20, SQSSend: 20}},
			FnDeliver: {Actions: 10, Batches: 10, Requests: Requests{DynamoGet: 10, DynamoPut: 10, WRU: 30, RRU: 10}},
		}}
	fns := Functions{SubmitMB: 1024, ObserveMB: 512, DeliverMB: 1024, SubmitBusy: time.Second, DeliverBusy: 2 * time.Second}
	o := Outcome{GETsPerRender: 4, BilledSecondsPerRender: 10, SchedulesPerRender: 0.5}
	g := PerRender(pr, o, fns)
	want := Requests{SQSSend: 1 + 1 + 4, SQSReceive: 6, SQSDelete: 6, DynamoGet: 1 + 4 + 1, DynamoPut: 1 + 2 + 4 + 1,
		RRU: 1 + 4 + 1, WRU: 2 + 4 + 20 + 3, Schedules: 0.5, LambdaInvocations: 6, LambdaGBSeconds: 1 + 5 + 2}
	if g != want {
		t.Errorf("genjobs per render\n got %+v\nwant %+v", g, want)
	}
	sf := StepFunctionsPerRender(pr, Outcome{GETsPerRender: 10}, fns, Overheads{RoundTrip: 100 * ms})
	if sf.SFNTransitions != 33 || sf.LambdaInvocations != 12 || sf.SQS() != 0 || sf.WRU != 2+4+3 {
		t.Errorf("step functions per render %+v", sf)
	}
	if want := 1 + 2 + 10*0.05; math.Abs(sf.LambdaGBSeconds-want) > 1e-9 {
		t.Errorf("step functions GB-s %v, want %v", sf.LambdaGBSeconds, want)
	}
	p := ListPrices()
	if got, want := p.Dollars(Requests{SFNTransitions: 1000}), 0.025; math.Abs(got-want) > 1e-12 {
		t.Errorf("1,000 transitions cost %v, want %v", got, want)
	}
	if got, want := p.Dollars(Requests{WRU: 1e6, RRU: 1e6, SQSSend: 1e6}), 0.625+0.125+0.40; math.Abs(got-want) > 1e-9 {
		t.Errorf("a million WRU, RRU and sends cost %v, want %v", got, want)
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

func TestPlotIsAPNG(t *testing.T) {
	times := []time.Duration{time.Second, 10 * time.Second, time.Minute, 20 * time.Minute}
	var outs []Outcome
	for _, s := range []Strategy{NewGenjobs("genjobs", realPolicy(), 1), Fixed{Interval: 5 * time.Second}} {
		outs = append(outs, Simulate(s, times, 2*time.Second, DefaultOverheads()))
	}
	var b bytes.Buffer
	if err := WritePlot(&b, outs); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b.Bytes(), []byte("\x89PNG")) {
		t.Error("not a PNG")
	}
}

func BenchmarkObserveGenjobs(b *testing.B) {
	times := DefaultWorkload().Sample(1)
	g := NewGenjobs("g", realPolicy(), 1)
	ov := DefaultOverheads()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		Observe(g, times[i%len(times)], 2*time.Second, ov)
	}
}

func BenchmarkObserveFixed(b *testing.B) {
	times := DefaultWorkload().Sample(1)
	ov := DefaultOverheads()
	f := Fixed{Interval: 5 * time.Second}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		Observe(f, times[i%len(times)], 2*time.Second, ov)
	}
}

func BenchmarkSample(b *testing.B) {
	w := DefaultWorkload()
	b.ReportAllocs()
	for b.Loop() {
		w.Sample(1)
	}
}
