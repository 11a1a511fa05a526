package benchmark

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/dev/topology"
)

// The observation benchmark runs the real submit, observe and deliver
// handlers through the embedded event source mappings and queue
// (RunPipeline with Virtual), on the virtual clock of a testing/synctest
// bubble: every long poll, lease, delay and invocation deadline runs as
// deployed, and only the latencies of Latency stand in for AWS and
// Genace. Its scenarios must each run in a bubble of their own
// (observation_test.go), since synctest is only for tests.

// ObservationScenario is one run of the observation benchmark.
type ObservationScenario struct {
	// Name says what the scenario is for in the report.
	Name string
	// Renders are the render lengths, created Spacing apart.
	Renders []time.Duration
	Spacing time.Duration
	Latency Latency
	Seed    uint64
	// GenaceRateLimit is Genace's assumed rate limit (0: none).
	GenaceRateLimit int
	// Steady marks a scenario whose creations hold a load steady, for
	// which a steady state's figures are given.
	Steady bool
	// FittedTo is the renders in flight the stack ran before the scenario:
	// the sweep had fitted observe's concurrency to them (0: an idle
	// stack, fitted to an empty queue).
	FittedTo int
}

// Observed is what one scenario measured.
type Observed struct {
	Scenario ObservationScenario
	Result   *PipelineResult
	// Wall is the scenario's wall-clock time.
	Wall time.Duration
}

// RunObservation runs s; call it inside a synctest bubble.
func RunObservation(ctx context.Context, s ObservationScenario) (*Observed, error) {
	lat := s.Latency
	var horizon time.Duration
	for _, r := range s.Renders {
		horizon = max(horizon, r)
	}
	horizon += time.Duration(len(s.Renders))*s.Spacing + time.Hour
	res, err := RunPipeline(ctx, PipelineConfig{Renders: s.Renders, Spacing: s.Spacing, Virtual: &lat, Seed: s.Seed,
		Timeout: horizon, KeepProcs: true, GenaceRateLimit: s.GenaceRateLimit, FittedTo: s.FittedTo})
	if err != nil {
		return nil, fmt.Errorf("observation %s: %w", s.Name, err)
	}
	return &Observed{Scenario: s, Result: res}, nil
}

// GETsPerRender is the mean GETs per render and the mean of the floor
// (FloorGETs plus delivery's read) over the same renders.
func (o *Observed) GETsPerRender() (gets, floor float64) {
	n := 0
	for _, r := range o.detected() {
		gets += float64(r.GETs)
		floor += FloorGETs(r.Length, r.Queued) + 1
		n++
	}
	return gets / float64(max(n, 1)), floor / float64(max(n, 1))
}

// detected are the renders that finished within their polling budget;
// the others were parked for review (RenderResult.Parked).
func (o *Observed) detected() []RenderResult {
	var out []RenderResult
	for _, r := range o.Result.Renders {
		if !r.Parked {
			out = append(out, r)
		}
	}
	return out
}

// Detection is the q-quantile (nearest rank) of the renders' detection.
func (o *Observed) Detection(q float64) time.Duration {
	ds := make([]time.Duration, 0, len(o.Result.Renders))
	for _, r := range o.detected() {
		ds = append(ds, r.Detection)
	}
	return quantile(ds, q)
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// Late are the renders detected more than after after they finished.
func (o *Observed) Late(after time.Duration) []RenderResult {
	var out []RenderResult
	for _, r := range o.detected() {
		if r.Detection > after {
			out = append(out, r)
		}
	}
	return out
}

// ObserveGBSecondsPerRender is the observe function's billed compute per
// render. With steady set, it is the steady state's: the compute within
// the second half of the renders' creation, over the renders created in
// it (Little's law: the creations stand for the renders served), so the
// first renders' ramp-up and the last ones' tail, when few renders share
// the invocations, are left out.
func (o *Observed) ObserveGBSecondsPerRender(steady bool) float64 {
	inv, rs := o.Result.Invocations[topology.Observe], o.Result.Renders
	if !steady || len(rs) < 2 {
		return inv.GBSeconds() / float64(max(len(rs), 1))
	}
	first, last := rs[0].Created, rs[0].Created
	for _, r := range rs {
		first, last = minTime(first, r.Created), maxTime(last, r.Created)
	}
	from := first.Add(last.Sub(first) / 2)
	n := 0
	for _, r := range rs {
		if !r.Created.Before(from) && r.Created.Before(last) {
			n++
		}
	}
	return inv.GBSecondsWithin(from, last) / float64(max(n, 1))
}

// StandardRenders are n log-normal render times, median 60 s and 5 %
// over 10 minutes (mean ≈ 160 s), the same for a seed: the renders the
// scale runs and the load scenarios use.
func StandardRenders(n int, seed uint64) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, 0x6a0b5e))
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(float64(time.Minute) * math.Exp(standardRenderSigma*rng.NormFloat64()))
	}
	return out
}

// standardRenderSigma puts 5 % of renders over ten times the median:
// ln(10) over the standard normal's 95th percentile.
var standardRenderSigma = math.Log(10) / 1.6448536269514722

// standardMean is the mean of StandardRenders: median·e^(σ²/2).
var standardMean = time.Duration(float64(time.Minute) * math.Exp(standardRenderSigma*standardRenderSigma/2))

// AssumedGenaceRateLimit is the requests per second the scenarios let
// Genace answer before it refuses with 429: an assumption, since its API
// publishes 429 with Retry-After but no number.
const AssumedGenaceRateLimit = 500

// LengthScenario is count renders of exactly length, created over a
// minute.
func LengthScenario(length time.Duration, count int) ObservationScenario {
	rs := make([]time.Duration, count)
	for i := range rs {
		rs[i] = length
	}
	return ObservationScenario{Name: "renders of " + length.String(), Renders: rs, Spacing: time.Minute / time.Duration(count), Latency: DefaultLatency, Seed: 1, GenaceRateLimit: AssumedGenaceRateLimit}
}

// LoadScenario keeps about inFlight standard renders in flight: they are
// created at inFlight per mean render time (Little's law) for rounds mean
// render times.
func LoadScenario(inFlight int, rounds int) ObservationScenario {
	n := inFlight * rounds
	return ObservationScenario{Name: fmt.Sprintf("%d in flight", inFlight), Renders: StandardRenders(n, 1),
		Spacing: standardMean / time.Duration(inFlight), Latency: DefaultLatency, Seed: 1, GenaceRateLimit: AssumedGenaceRateLimit, Steady: true,
		FittedTo: inFlight}
}

// SurgeScenario is LoadScenario arriving at an idle stack: observe's
// concurrency starts at the sweep's fit for an empty queue, and only the
// sweep's runs raise it.
func SurgeScenario(inFlight int, rounds int) ObservationScenario {
	s := LoadScenario(inFlight, rounds)
	s.Name, s.FittedTo = fmt.Sprintf("%d in flight, arriving at an idle stack", inFlight), 0
	return s
}

// invocationPayloadLimit is Lambda's limit on a synchronous invocation's
// event, which an event source mapping's batch must fit.
const invocationPayloadLimit = 6 << 20

// Limit is one limit a run came near, and how near.
type Limit struct {
	Name string
	// Used is the run's peak over the limit.
	Used float64
}

// Limits are the limits the run's peaks are held to, nearest first:
// observe's MaximumConcurrency, the invocation payload, Genace's rate
// limit (and any 429 it answered).
func (o *Observed) Limits() []Limit {
	inv := o.Result.Invocations[topology.Observe]
	f, _ := topology.Stack.Function(topology.Observe)
	var ls []Limit
	if len(f.Mappings) > 0 && f.Mappings[0].MaxConcurrency > 0 {
		ls = append(ls, Limit{fmt.Sprintf("observe concurrency (MaximumConcurrency %d)", f.Mappings[0].MaxConcurrency),
			float64(inv.PeakConcurrent) / float64(f.Mappings[0].MaxConcurrency)})
	}
	ls = append(ls, Limit{"invocation payload (6 MB)", float64(inv.PeakPayload) / invocationPayloadLimit})
	if l := o.Scenario.GenaceRateLimit; l > 0 {
		name := fmt.Sprintf("Genace rate limit (%d/s, assumed)", l)
		if o.Result.Genace429 > 0 {
			name += fmt.Sprintf(": %d answered 429", o.Result.Genace429)
		}
		ls = append(ls, Limit{name, float64(o.Result.GenacePeakPerSecond) / float64(l)})
	}
	slices.SortStableFunc(ls, func(a, b Limit) int { return cmpFloat(b.Used, a.Used) })
	return ls
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func rendersCell(r *PipelineResult) string {
	if r.Stalled == 0 {
		return fmt.Sprint(len(r.Renders))
	}
	return fmt.Sprintf("%d (%d parked for review past the 6 h polling budget)", len(r.Renders), r.Stalled)
}

func steadyCell(o *Observed) string {
	if !o.Scenario.Steady {
		return "—"
	}
	return fmt.Sprintf("%.3f", o.ObserveGBSecondsPerRender(true))
}

// WriteObservation writes the scenarios' figures as a Markdown report.
func WriteObservation(w io.Writer, obs []*Observed) error {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("| scenario | renders | GETs per render (floor) | detection p50 / p99 / p99.9 / max | observe invocations, records per invocation | observe GB-s per render (steady state) | peak observe concurrency | Genace peak requests/s | nearest limit | heap + stacks per render observed | wall |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, o := range obs {
		gets, floor := o.GETsPerRender()
		inv := o.Result.Invocations[topology.Observe]
		near := "—"
		if ls := o.Limits(); len(ls) > 0 {
			near = fmt.Sprintf("%s at %.0f %%", ls[0].Name, 100*ls[0].Used)
		}
		p("| %s | %s | %.2f (%.2f, %.3f×) | %s / %s / %s / %s | %d, %.1f (largest %d) | %.3f (%s) | %d | %d | %s | %.0f KiB at %d | %s |\n",
			o.Scenario.Name, rendersCell(o.Result), gets, floor, gets/floor,
			fmtMS(o.Detection(0.5)), fmtMS(o.Detection(0.99)), fmtMS(o.Detection(0.999)), fmtMS(o.Detection(1)),
			inv.Count, float64(inv.Records)/float64(max(inv.Count, 1)), inv.PeakRecords,
			o.ObserveGBSecondsPerRender(false), steadyCell(o), inv.PeakConcurrent, o.Result.GenacePeakPerSecond, near,
			o.Result.Memory.PerRender()/1024, o.Result.Memory.Observing, o.Wall.Round(time.Millisecond))
	}
	p("\nTargets, from this run:\n\n")
	for _, o := range obs {
		gets, floor := o.GETsPerRender()
		if !o.Scenario.Steady {
			p("- GETs per render ≤ 1.05× the floor, %s: %.3f× — %s\n", o.Scenario.Name, gets/floor, verdict(gets <= targetGETsFloor*floor, ""))
			continue
		}
		d := o.Detection(0.999)
		few := ""
		if n := len(o.detected()); n < 1000 {
			// Nearest rank: under 1,000 renders the 99.9th percentile is
			// the largest, and says little.
			few = fmt.Sprintf(" (of %d renders, the largest: too few for a 99.9th percentile)", n)
		}
		p("- detection p99.9 < 2 s, %s: %s%s — %s\n", o.Scenario.Name, fmtMS(d), few, verdict(d < 2*time.Second, fmt.Sprintf("(%d of %d renders over 2 s)", len(o.Late(2*time.Second)), len(o.Result.Renders))))
		if o.Scenario.Name == "1000 in flight" {
			g := o.ObserveGBSecondsPerRender(true)
			p("- observe GB-s per render ≤ 0.2 at 1,000 in flight (steady state): %.3f — %s\n", g, verdict(g <= 0.2, ""))
		}
	}
	for _, o := range obs {
		if late := o.Late(2 * time.Second); len(late) > 0 {
			p("\n%s: %d of %d renders detected more than 2 s late", o.Scenario.Name, len(late), len(o.Result.Renders))
			causes := map[Blind]int{}
			for _, r := range late {
				causes[r.Blind]++
			}
			var why []string
			for _, b := range []Blind{BlindBeforeFirstRead, BlindAfterChange, BlindGap, BlindHeld} {
				if causes[b] > 0 {
					why = append(why, fmt.Sprintf("%d %s", causes[b], b))
				}
			}
			p(" (%s):", strings.Join(why, "; "))
			for i, r := range late {
				if i == 10 {
					p(" …")
					break
				}
				p(" %s long, %s late;", r.Length.Round(100*time.Millisecond), r.Detection.Round(100*time.Millisecond))
			}
			p("\n")
		}
	}
	return nil
}
