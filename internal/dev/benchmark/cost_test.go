package benchmark

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/samlocal"
)

// handUsage is a small usage to price by hand: one render of 58 s queued
// 2 s (3 long polls, and delivery's read), 49 cycles of W 1 s + 200 ms.
var handUsage = Usage{
	Path:           Requests{WRU: 10, RRU: 4, SQSSend: 2, SQSReceive: 2, SQSDelete: 2, LambdaInvocations: 2, S3Put: 1, S3Head: 1, Events: 1},
	Observe:        Requests{WRU: 9, RRU: 1, DynamoPut: 3, SQSSend: 1, SQSReceive: 1, SQSDelete: 1, LambdaInvocations: 1},
	ObserveActions: 1, SubmitGBs: 0.1, ObserveGBs: 2, DeliverGBs: 0.2, PathLog: 1000, ObserveLog: 2000, GETs: 4,
	Series:  []string{"A{Function=x}", "B{Function=x,Model=*}"},
	Renders: []RenderResult{{Length: 58 * time.Second, Queued: 2 * time.Second}}, P99: 300 * time.Millisecond,
}

var handStack = Stack{Alarms: 3, InsightsAlarms: []string{"B", "C"}, Dashboards: 1, Keys: 1, Mappings: 2, Scheduled: 100, Models: 2, RecordDays: 30, LogDays: 30}

func design(t *testing.T, ds []Design, prefix string) Design {
	t.Helper()
	for _, d := range ds {
		if strings.HasPrefix(d.Name, prefix) {
			return d
		}
	}
	t.Fatalf("no design %q", prefix)
	return Design{}
}

// Each design's arithmetic, one price at a time, on the hand case.
func TestDesignArithmetic(t *testing.T) {
	t.Parallel()
	// The sweep's 100 runs, intake's 1,000 calls and the path's
	// invocations are in every Lambda figure.
	common := 1000*0.05*0.125 + 1000*0.3 + 100*0.2*0.125
	for i, c := range []struct {
		design  string
		prices  Prices
		renders float64
		want    float64
	}{
		{"floor", Prices{WRU: 1}, 1000, 1000 * (10 + 9.0/3*2)},
		{"genjobs", Prices{WRU: 1}, 1000, 1000 * (10 + 9)},
		{"genjobs", Prices{LambdaGBSecond: 1}, 1000, common + 1000*2},
		{"genjobs", Prices{SQSRequest: 1}, 1000, 1000*6 + 1000*3 + 2*5*131400},
		{"genjobs", Prices{Alarm: 1, InsightsAlarmMetric: 10, Metric: 100}, 1000, 3 + 10*(2+1) + 100*3},
		{"multiplexing poller, Fargate", Prices{FargateVCPUHour: 1}, 1000, 730 * 0.25},
		// 1e8 renders of 58 s: 2,207 in flight, a peak of 6,621, over
		// 200 GET/s × 19.3 s per poll = 3,867 a task.
		{"multiplexing poller, Fargate", Prices{FargateVCPUHour: 1}, 1e8, 2 * 730 * 0.25},
		{"multiplexing poller, EC2", Prices{NanoHour: 1}, 1000, 730},
		{"long Lambda", Prices{LambdaGBSecond: 1}, 1000, common + 2628000*0.125},
		{"Lambda durable functions: wait", Prices{DurableOperation: 1}, 1000, 1000 * (2*49 + 2)},
		{"Lambda durable functions: long poll", Prices{DurableOperation: 1}, 1000, 1000 * (3 + 2)},
		{"Step Functions Standard: Wait W, short GET (HTTP", Prices{Transition: 1}, 1000, 1000 * (3*49 + 4)},
		{"Step Functions Standard: Wait W, short GET (Lambda", Prices{LambdaRequest: 1}, 1000, 1000 + 2000 + 100 + 1000*49},
		{"Step Functions Standard: HTTP Task", Prices{Transition: 1}, 1000, 1000 * (2*3 + 4)},
		{"fixed 5 s", Prices{RRU: 1}, 1000, 1000*4 + 100*8 + 525600*8 + 1000*58.0/5*100/4096},
	} {
		got := design(t, Designs(c.prices, DefaultAssumptions, handUsage, handStack), c.design).Month(c.renders).Total()
		if math.Abs(got-c.want) > 1e-6*c.want {
			t.Errorf("%s, %v renders (case %d): $%v, want $%v", c.design, c.renders, i, got, c.want)
		}
	}
	ds := Designs(CurrentPrices, DefaultAssumptions, handUsage, handStack)
	for prefix, want := range map[string]time.Duration{
		"genjobs": 300 * time.Millisecond, "multiplexing poller, Fargate": 400 * time.Millisecond,
		"Lambda durable functions: wait": 1900 * time.Millisecond, "fixed 5 s": 5600 * time.Millisecond,
	} {
		if got := design(t, ds, prefix).P99; got != want {
			t.Errorf("%s: p99 %s, want %s", prefix, got, want)
		}
	}
}

func templateStack(t *testing.T) (Stack, *samlocal.Template) {
	t.Helper()
	tmpl, err := samlocal.Load("../../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := StackOf(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	return s, tmpl
}

// The template's fixed costs are read whole, and every design pays them
// at 10,000 renders a month.
func TestFixedCostsAt10k(t *testing.T) {
	t.Parallel()
	s, tmpl := templateStack(t)
	if n := len(tmpl.OfType("AWS::CloudWatch::Alarm")); s.Alarms+len(s.InsightsAlarms) != n || s.Mappings == 0 || s.Scheduled == 0 || s.Models == 0 {
		t.Fatalf("stack %+v: want all %d alarms, the mappings, the sweep's schedule and the models", s, n)
	}
	for _, d := range Designs(CurrentPrices, DefaultAssumptions, handUsage, s) {
		if d.Floor {
			continue
		}
		fixed := map[string]float64{}
		for _, l := range d.Month(1e4) {
			if l.Fixed {
				fixed[l.Item] += l.USD
			}
		}
		// Every design keeps the path, and its mappings' pollers receive
		// on empty queues (once billed to genjobs alone).
		want := []string{"CloudWatch alarms", "CloudWatch dashboard", "CloudWatch custom metrics", "KMS key and Secrets Manager secret", "sweep", "SQS idle receives, the path's mappings"}
		if d.Genjobs {
			want = append(want, "SQS idle receives")
		}
		for _, item := range want {
			if fixed[item] <= 0 {
				t.Errorf("%s at 10k: no fixed %q (%v)", d.Name, item, fixed)
			}
		}
	}
}

// The floor is below every design at every volume, on standard renders.
func TestFloorBoundsEveryDesign(t *testing.T) {
	t.Parallel()
	s, _ := templateStack(t)
	u := handUsage
	u.Renders = nil
	for _, l := range StandardRenders(500, 1) {
		u.Renders = append(u.Renders, RenderResult{Length: l, Queued: min(renderQueued, l)})
	}
	ds := Designs(CurrentPrices, DefaultAssumptions, u, s, 0)
	for _, n := range Volumes {
		floor := ds[0].Month(n).Total()
		for _, d := range ds[1:] {
			if got := d.Month(n).Total(); got < floor {
				t.Errorf("%s at %s: $%.2f, below the floor's $%.2f", d.Name, fmtVolume(n), got, floor)
			}
		}
	}
}

// TestCostFigures prices a measured run and writes cost.md and cost.svg
// to GENJOBS_COST_OUT (1,000 renders in flight); without it, it prices a
// small run.
func TestCostFigures(t *testing.T) {
	out := os.Getenv("GENJOBS_COST_OUT")
	s := LoadScenario(20, 2)
	if out != "" {
		// Each volume's own renders in flight: under 1, 62 and 6,167.
		s = LoadScenario(InFlight(Volumes[1], standardMean), 6)
	}
	o := runScenarios(t, s)[0]
	stack, _ := templateStack(t)
	u := UsageOf(o.Result)
	if len(u.Series) == 0 || u.PathLog == 0 || u.ObserveLog == 0 || u.ObserveGBs == 0 {
		t.Fatalf("usage without its telemetry or compute: %s", u.Summary())
	}
	if out != "" {
		u.At = map[float64]Usage{Volumes[1]: u}
		for _, n := range []float64{Volumes[0], Volumes[2]} {
			s := LoadScenario(InFlight(n, standardMean), 3) // 18,500 renders
			if n == Volumes[0] {
				// Under one render in flight: 200 renders at the month's
				// own rate, not one in flight's.
				s = LoadScenario(1, 200)
				s.Spacing = time.Duration(float64(month) / n)
			}
			u.At[n] = UsageOf(runScenarios(t, s)[0].Result)
		}
	}
	ds := Designs(CurrentPrices, DefaultAssumptions, u, stack)
	var md, svg bytes.Buffer
	if err := WriteCost(&md, u, ds); err != nil {
		t.Fatal(err)
	}
	if err := WritePlot(&svg, ds); err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if c := d.Month(Volumes[0]).Total(); !(c > 0) {
			t.Errorf("%s: $%v a month", d.Name, c)
		}
	}
	t.Log("\n" + md.String())
	if out != "" {
		for name, b := range map[string][]byte{"cost.md": md.Bytes(), "cost.svg": svg.Bytes()} {
			if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
