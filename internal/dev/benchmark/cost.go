package benchmark

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/dev/samlocal"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/store/dynamo"
)

// The cost comparison (issue 23, part 4): what a month of renders costs
// on AWS in genjobs, as measured on the virtual pipeline, against other
// designs that keep the same durable record per operation, each priced
// by the arithmetic of its mechanism on the same renders. Every price is
// a list price: no free tier (it is the account's, shared with whatever
// else runs there), no savings plan.

// PriceDate is when the prices were checked, against stored copies of
// the pages each comment names (us-east-1, on-demand).
const PriceDate = "2026-12-04"

// Prices are unit prices in US dollars, each per the unit its name ends
// in (a GB-s, a request, a GB-month, an hour; Alarm, Dashboard, Metric,
// KMSKey and Secret per month); CurrentPrices cites each one's page.
type Prices struct {
	LambdaGBSecond, LambdaRequest                            float64
	DurableOperation, DurableWrittenGB, DurableRetainedGBMon float64
	SQSRequest                                               float64
	WRU, RRU, DynamoGBMonth, PITRGBMonth                     float64
	S3Put, S3Get, S3GBMonth                                  float64
	Event                                                    float64
	Alarm, InsightsAlarmMetric, Dashboard, Metric            float64
	LogsGB, LogsGBMonth                                      float64
	KMSKey, KMSRequest, Secret, SecretCall                   float64
	Transition, ExpressRequest, ExpressGBSecond              float64
	FargateVCPUHour, FargateGBHour                           float64
	NanoHour, EBSGBMonth, IPv4Hour, DataOutGB                float64
}

// CurrentPrices are us-east-1's on PriceDate.
var CurrentPrices = Prices{
	// "AWS Lambda pricing": Arm, the first 7.5 billion GB-s a month;
	// requests; durable functions' durable operations, data written and
	// data retained (quoted from that page by secondary sources: the
	// stored copy renders its rate tables client-side).
	LambdaGBSecond: 0.0000133334, LambdaRequest: 0.20 / 1e6,
	DurableOperation: 8.00 / 1e6, DurableWrittenGB: 0.25, DurableRetainedGBMon: 0.15,
	// "Amazon SQS pricing": standard queues, 1 million to 100 billion
	// requests a month; each 64 KB of a request's payload is a request.
	SQSRequest: 0.40 / 1e6,
	// "Amazon DynamoDB pricing" (on-demand, after the November 2024 cut):
	// write and read request units, Standard table storage, continuous
	// backups (PITR, which the table enables).
	WRU: 0.625 / 1e6, RRU: 0.125 / 1e6, DynamoGBMonth: 0.25, PITRGBMonth: 0.20,
	// "Amazon S3 pricing": S3 Standard PUT, GET and HEAD, storage (first
	// 50 TB).
	S3Put: 0.005 / 1000, S3Get: 0.0004 / 1000, S3GBMonth: 0.023,
	// "Amazon EventBridge pricing": custom events (PutEvents), per 64 KB.
	Event: 1.00 / 1e6,
	// "Amazon CloudWatch pricing": a standard-resolution alarm metric, a
	// metric analyzed by a Metrics Insights alarm, a dashboard, a custom
	// metric (first 10,000), Logs ingestion (Standard class; Lambda's logs
	// are tiered from May 2025, this the first tier) and storage.
	Alarm: 0.10, InsightsAlarmMetric: 0.10, Dashboard: 3.00, Metric: 0.30,
	LogsGB: 0.50, LogsGBMonth: 0.03,
	// "AWS Key Management Service pricing": a customer managed key, its
	// requests. "AWS Secrets Manager pricing": a secret, its API calls.
	KMSKey: 1.00, KMSRequest: 0.03 / 10000, Secret: 0.40, SecretCall: 0.05 / 10000,
	// "AWS Step Functions pricing": a Standard state transition (an HTTP
	// Task is one too), an Express request and GB-s (first 1,000 hours).
	Transition: 0.025 / 1000, ExpressRequest: 1.00 / 1e6, ExpressGBSecond: 0.00001667,
	// "AWS Fargate pricing": Linux/ARM vCPU-hour and GB-hour.
	FargateVCPUHour: 0.03238, FargateGBHour: 0.00356,
	// "Amazon EC2 On-Demand Pricing": t4g.nano (the stored pages show
	// t3a.nano's $0.0054; t4g's published rate is 20 % under it); data
	// transfer out to the internet (first 10 TB; Lambda's is billed at
	// the same rate).
	// "Amazon EBS pricing": gp3 GB-month. "Amazon VPC pricing": a public
	// IPv4 address-hour.
	NanoHour: 0.0042, EBSGBMonth: 0.08, IPv4Hour: 0.005, DataOutGB: 0.09,
}

// Assumptions are what the designs' arithmetic rests on besides prices.
type Assumptions struct {
	// PeakFactor is the peak renders in flight over the month's mean: what
	// always-on capacity is sized for.
	PeakFactor float64
	// GETs per second one unit of each always-on design sustains (CPU:
	// ~800 GET/s per vCPU, kept-alive TLS): a 0.25 vCPU Fargate task, a
	// t4g.nano at its 10 % baseline, a 128 MB Lambda (1/14 vCPU).
	TaskGETs, NanoGETs, ShardGETs float64
	TaskVCPU, TaskGB              float64
	ShardGB                       float64
	// Wait is W of the wait-then-GET designs (1 s: durable and Step
	// Functions waits are whole seconds); Tick is the fixed poller's.
	Wait, Tick time.Duration
	// Pollers are an event source mapping's on an empty queue (Lambda
	// runs several; the count is not published), each long-polling for
	// IdleWait; an always-on design's unit is one poller of its intake.
	Pollers  float64
	IdleWait time.Duration
	// Latency is the virtual run's; Step is a managed orchestrator's
	// latency per state transition or checkpoint.
	Latency Latency
	Step    time.Duration
	// StateChanges is the record's writes a job's changes cost any
	// observer (queued→running, →succeeded).
	StateChanges float64
	// RecordBytes is a render's stored bytes (record, audit, index);
	// StepBytes a checkpointed GET answer.
	RecordBytes, StepBytes float64
	// Bytes sent to the internet: a GET, the POST, a delivery's reads.
	GETOut, POSTOut, DeliverOut float64
	// ColdStarts is the share of invocations that start cold and read the
	// secret; KMSRequests a month (alarm publishes, the table's key).
	ColdStarts, KMSRequests float64
	// Intake is the intake call per render, Sweep a sweep run, Call the
	// run of a short-GET Lambda step: each one invocation of 128 MB.
	Intake, Sweep, Call time.Duration
	// Retention is how long durable functions keep a closed execution's
	// history (the default).
	Retention time.Duration
}

// DefaultAssumptions are the comparison's.
var DefaultAssumptions = Assumptions{
	PeakFactor: 3, TaskGETs: 200, NanoGETs: 80, ShardGETs: 50, TaskVCPU: 0.25, TaskGB: 0.5, ShardGB: 0.125,
	Wait: time.Second, Tick: 5 * time.Second, Pollers: 5, IdleWait: 20 * time.Second,
	Latency: DefaultLatency, Step: 50 * time.Millisecond, StateChanges: 2,
	RecordBytes: 1536, StepBytes: 1024, GETOut: 700, POSTOut: 2048, DeliverOut: 40 << 10,
	ColdStarts: 0.01, KMSRequests: 10000,
	Intake: 50 * time.Millisecond, Sweep: 200 * time.Millisecond, Call: 220 * time.Millisecond,
	Retention: 14 * 24 * time.Hour,
}

// month is AWS's billing month: 730 hours.
const month = 730 * time.Hour

// Usage is genjobs' measured usage per render.
type Usage struct {
	// Path are the application's, submit's and deliver's requests: the
	// way in and out every design keeps. Observe are observe's.
	Path, Observe Requests
	// ObserveActions are observe's handler actions.
	ObserveActions float64
	// GB-s of each function.
	SubmitGBs, ObserveGBs, DeliverGBs float64
	// Log bytes (EMF lines included) of the path and of observe.
	PathLog, ObserveLog float64
	// GETs are Genace's reads, delivery's included.
	GETs float64
	// Series are the custom metrics the run made (Telemetry.Series).
	Series []string
	// Renders are the renders measured, P99 their detection's.
	Renders []RenderResult
	P99     time.Duration
	// At, when set, is the usage measured at each volume's own renders in
	// flight (InFlight): genjobs' observe shares its invocations among
	// the renders in flight, so its requests and compute per render depend
	// on the volume. Genjobs' rows take observe's part from it.
	At map[float64]Usage
}

// at is the usage measured for a month of n renders, or u.
func (u Usage) at(n float64) Usage {
	if v, ok := u.At[n]; ok {
		return v
	}
	return u
}

// InFlight is the mean renders in flight in a month of n renders of
// mean length mean (Little's law), at least one.
func InFlight(n float64, mean time.Duration) int {
	return max(1, int(math.Ceil(n*mean.Seconds()/month.Seconds())))
}

// UsageOf is a run's usage per render.
func UsageOf(res *PipelineResult) Usage {
	n := float64(max(res.Operations, 1))
	per := func(fn string) Requests { return res.Functions[fn].Requests.Times(1 / n) }
	gbs := func(fn string) float64 {
		if inv := res.Invocations[fn]; inv != nil {
			return inv.GBSeconds() / n
		}
		return 0
	}
	o := &Observed{Result: res, Scenario: ObservationScenario{Steady: true}}
	u := Usage{Path: res.App.Times(1 / n).Plus(per(topology.Submit)).Plus(per(topology.Deliver)), Observe: per(topology.Observe),
		ObserveActions: float64(res.Functions[topology.Observe].Actions) / n,
		// Observe's compute as the steady state's: the renders' ramp-up and
		// tail, when few share the invocations, are not a month's.
		SubmitGBs: gbs(topology.Submit), ObserveGBs: o.ObserveGBSecondsPerRender(true), DeliverGBs: gbs(topology.Deliver),
		GETs: float64(res.GenaceGETs) / n, Renders: res.Renders, P99: (&Observed{Result: res}).Detection(0.99)}
	if t := res.Telemetry; t != nil {
		u.PathLog = float64(t.Bytes[topology.Submit]+t.Bytes[topology.Deliver]) / n
		u.ObserveLog = float64(t.Bytes[topology.Observe]) / n
		for s := range t.Series {
			u.Series = append(u.Series, s)
		}
	}
	return u
}

// Summary says the usage in a sentence.
func (u Usage) Summary() string {
	all := u.Path.Plus(u.Observe)
	return fmt.Sprintf("%d renders (mean %s): per render %.2f SQS requests, %.2f WRU, %.2f RRU, %.2f Lambda invocations, "+
		"GB-s submit %.3f / observe %.2f / deliver %.3f, %.2f GETs, %.1f KB of logs; %d custom metrics; detection p99 %s",
		len(u.Renders), u.meanRender().Round(time.Second), sqs(all), all.WRU, all.RRU, all.LambdaInvocations,
		u.SubmitGBs, u.ObserveGBs, u.DeliverGBs, u.GETs, (u.PathLog+u.ObserveLog)/1000, len(u.Series), u.P99.Round(time.Millisecond))
}

// meanRender is the renders' mean length.
func (u Usage) meanRender() time.Duration {
	var sum time.Duration
	for _, r := range u.Renders {
		sum += r.Length
	}
	return sum / time.Duration(max(len(u.Renders), 1))
}

// perRender is the renders' mean of f.
func (u Usage) perRender(f func(RenderResult) float64) float64 {
	var sum float64
	for _, r := range u.Renders {
		sum += f(r)
	}
	return sum / float64(max(len(u.Renders), 1))
}

// longPolls is the floor's long polls for r (FloorGETs).
func longPolls(r RenderResult) float64 { return FloorGETs(r.Length, r.Queued) }

// Stack is the fixed part of genjobs' stack, read from template.yaml.
type Stack struct {
	// Alarms watch one metric each; InsightsAlarms name the metric each
	// Metrics Insights alarm sums.
	Alarms         int
	InsightsAlarms []string
	Dashboards     int
	Keys           int
	// Mappings are the SQS event source mappings.
	Mappings int
	// Scheduled are the scheduled invocations a month (the sweep).
	Scheduled float64
	// Models are the catalog's (a Model dimension's values).
	Models int
	// RecordDays and LogDays are the retentions of records and logs.
	RecordDays, LogDays float64
}

var insightsMetric = regexp.MustCompile(`SUM\((\w+)\)`)

// StackOf reads a template's fixed costs.
func StackOf(t *samlocal.Template) (Stack, error) {
	s := Stack{Dashboards: len(t.OfType("AWS::CloudWatch::Dashboard")), Keys: len(t.OfType("AWS::KMS::Key"))}
	for _, id := range t.OfType("AWS::CloudWatch::Alarm") {
		metrics, _ := t.Resources[id].Properties["Metrics"].([]any)
		if len(metrics) == 0 {
			s.Alarms++
			continue
		}
		for _, m := range metrics {
			if e, _ := m.(map[string]any)["Expression"].(string); e != "" {
				name := insightsMetric.FindStringSubmatch(e)
				if name == nil {
					return s, fmt.Errorf("alarm %s: no SUM(metric) in %q", id, e)
				}
				s.InsightsAlarms = append(s.InsightsAlarms, name[1])
			}
		}
	}
	for _, f := range t.Functions {
		for _, e := range f.Events {
			switch e.Type {
			case "SQS":
				s.Mappings++
			case "Schedule":
				every, ok := topology.Function{Schedule: fmt.Sprint(e.Properties["Schedule"])}.Cadence()
				if !ok {
					return s, fmt.Errorf("%s: schedule %v is not a rate", f.LogicalID, e.Properties["Schedule"])
				}
				s.Scheduled += float64(month / every)
			}
		}
	}
	for _, id := range t.OfType("AWS::Logs::LogGroup") {
		d, _ := strconv.ParseFloat(fmt.Sprint(t.Resources[id].Properties["RetentionInDays"]), 64)
		s.LogDays = max(s.LogDays, d)
	}
	param := func(name string) string {
		if p, ok := t.Parameters[name]; ok && p.Default != nil {
			return *p.Default
		}
		return ""
	}
	var catalog map[string]any
	if err := json.Unmarshal([]byte(param("ModelCatalog")), &catalog); err != nil {
		return s, fmt.Errorf("ModelCatalog: %w", err)
	}
	s.Models = len(catalog)
	var err error
	if s.RecordDays, err = strconv.ParseFloat(param("RecordRetentionDays"), 64); err != nil {
		return s, fmt.Errorf("RecordRetentionDays: %w", err)
	}
	return s, nil
}

// Line is one item of a month's bill.
type Line struct {
	Item string
	USD  float64
	// Fixed: paid whatever the volume.
	Fixed bool
}

// Bill is a month's lines.
type Bill []Line

// Total is the bill's sum.
func (b Bill) Total() float64 {
	var t float64
	for _, l := range b {
		t += l.USD
	}
	return t
}

// Design is one way to run the renders (or the floor).
type Design struct {
	Name string
	// P99 is detection's 99th percentile; Basis says how it was got.
	P99   time.Duration
	Basis string
	// Floor marks the bound, Genjobs genjobs' own rows.
	Floor, Genjobs bool
	// Month is the bill of a month of renders.
	Month func(renders float64) Bill
}

// biller builds one month's bill.
type biller struct {
	p Prices
	a Assumptions
	u Usage
	s Stack
	n float64 // renders
	b Bill
}

func (b *biller) add(item string, usd float64) { b.b = append(b.b, Line{Item: item, USD: usd}) }
func (b *biller) fixed(item string, usd float64) {
	b.b = append(b.b, Line{Item: item, USD: usd, Fixed: true})
}

// record is the durable record's writes and reads (observeWRU, observeRRU
// per render on top of the path's) and its storage with backups.
func (b *biller) record(observeWRU, observeRRU float64) {
	b.add("DynamoDB writes", b.n*(b.u.Path.WRU+observeWRU)*b.p.WRU)
	b.add("DynamoDB reads", b.n*(b.u.Path.RRU+observeRRU)*b.p.RRU)
	stored := b.n * b.s.RecordDays / (float64(month) / float64(24*time.Hour)) * b.a.RecordBytes / 1e9
	b.add("DynamoDB storage and PITR", stored*(b.p.DynamoGBMonth+b.p.PITRGBMonth))
}

// outputs are the copies into S3 (and the HEAD before each, unless
// bound), the completion events, and the bytes sent to Genace for gets
// GETs.
func (b *biller) outputs(gets float64, bound bool) {
	head := b.u.Path.S3Head
	if bound {
		head = 0
	}
	b.add("S3 PUT and HEAD", b.n*(b.u.Path.S3Put*b.p.S3Put+head*b.p.S3Get))
	b.add("EventBridge events", b.n*max(b.u.Path.Events, 1)*b.p.Event)
	b.add("data out to Genace", b.n*(gets*b.a.GETOut+b.a.POSTOut+b.a.DeliverOut)/1e9*b.p.DataOutGB)
}

// lambda is invocations of gbs each, cold starts reading the secret.
func (b *biller) lambda(item string, invocations, gbs float64) {
	b.add(item+": Lambda requests and GB-s", invocations*(b.p.LambdaRequest+b.a.ColdStarts*b.p.SecretCall)+gbs*b.p.LambdaGBSecond)
}

// logs ingests bytes and keeps them LogDays.
func (b *biller) logs(item string, bytes float64) {
	gb := bytes / 1e9
	b.add(item+": CloudWatch Logs", gb*b.p.LogsGB+gb*b.s.LogDays/(float64(month)/float64(24*time.Hour))*b.p.LogsGBMonth)
}

func sqs(r Requests) float64 { return r.SQSSend + r.SQSReceive + r.SQSDelete + r.SQSChangeVisibility }

// path is the intake, submit and deliver, as genjobs runs them.
func (b *biller) path() {
	u, n := b.u, b.n
	b.add("SQS, submit and deliver", n*sqs(u.Path)*b.p.SQSRequest)
	// Every mapping but observe's serves the path (submit, deliver and
	// triage's), which every design keeps: their pollers' empty receives.
	b.idleAs("SQS idle receives, the path's mappings", float64(max(b.s.Mappings-1, 0))*b.a.Pollers)
	b.lambda("intake", n, n*b.a.Intake.Seconds()*0.125)
	b.lambda("submit and deliver", n*u.Path.LambdaInvocations, n*(u.SubmitGBs+u.DeliverGBs))
	b.logs("submit and deliver", n*u.PathLog)
}

// monitoring is what every design pays whatever the volume: the alarms,
// dashboard, custom metrics, key and secret of template.yaml, and the
// sweep's runs.
func (b *biller) monitoring() {
	p, s := b.p, b.s
	series := map[string]float64{}
	var metrics float64
	for _, m := range b.u.Series {
		name, _, _ := strings.Cut(m, "{")
		k := 1.0
		if strings.Contains(m, "Model=*") {
			k = float64(s.Models)
		}
		series[name] += k
		metrics += k
	}
	analyzed := 0.0
	for _, m := range s.InsightsAlarms {
		analyzed += max(series[m], 1)
	}
	b.fixed("CloudWatch alarms", float64(s.Alarms)*p.Alarm+analyzed*p.InsightsAlarmMetric)
	b.fixed("CloudWatch dashboard", float64(s.Dashboards)*p.Dashboard)
	b.fixed("CloudWatch custom metrics", metrics*p.Metric)
	b.fixed("KMS key and Secrets Manager secret", float64(s.Keys)*p.KMSKey+b.a.KMSRequests*p.KMSRequest+p.Secret)
	b.fixed("sweep", s.Scheduled*(p.LambdaRequest+b.a.Sweep.Seconds()*0.125*p.LambdaGBSecond+dynamo.StatusShards*p.RRU))
}

// idle is pollers' empty receives, each a long poll of IdleWait.
func (b *biller) idle(pollers float64) { b.idleAs("SQS idle receives", pollers) }

// idleAs is idle's bill under its own line.
func (b *biller) idleAs(item string, pollers float64) {
	b.fixed(item, pollers*float64(month/b.a.IdleWait)*b.p.SQSRequest)
}

// units is how many always-on units, each holding perUnit renders, the
// month's peak needs (one at least).
func (b *biller) units(perUnit float64) float64 {
	inFlight := b.n * b.u.meanRender().Seconds() / month.Seconds()
	return max(1, math.Ceil(b.a.PeakFactor*inFlight/perUnit))
}

// Designs are the floor, genjobs (measured, then at each hypothetical
// observe GB-s per render) and its rivals. Each volume's bill, every
// design's alike, is on the renders measured for that volume (u.At), or
// on u's: the comparison is on the same renders at each volume.
func Designs(p Prices, a Assumptions, u Usage, s Stack, hypothetical ...float64) []Design {
	ds := designs(p, a, u, s, hypothetical...)
	for i := range ds {
		ds[i].Month = func(n float64) Bill { return designs(p, a, u.at(n), s, hypothetical...)[i].Month(n) }
	}
	return ds
}

// designs are Designs on u's renders at every volume.
func designs(p Prices, a Assumptions, u Usage, s Stack, hypothetical ...float64) []Design {
	bill := func(f func(b *biller)) func(float64) Bill {
		return func(n float64) Bill {
			b := &biller{p: p, a: a, u: u, s: s, n: n}
			f(b)
			return b.b
		}
	}
	polls := u.perRender(longPolls) + 1 // and delivery's read
	changeWRU := u.Observe.WRU / max(u.Observe.DynamoPut, 1) * min(u.Observe.DynamoPut, a.StateChanges)
	// rival is every rival's common part: the record (its writes on the
	// job's changes), the path, the outputs, monitoring, and observation's
	// logs as one observe action's.
	rival := func(b *biller, gets float64) {
		b.record(changeWRU, 0)
		b.path()
		b.outputs(gets, false)
		b.monitoring()
		b.logs("observation", b.n*u.ObserveLog/max(u.ObserveActions, 1))
	}
	// genjobs' bill at a fixed observe GB-s per render (>0), or at each
	// volume's measured one.
	genjobs := func(observeGBs float64) func(b *biller) {
		return func(b *biller) {
			v := u.at(b.n)
			gbs := observeGBs
			if gbs <= 0 {
				gbs = v.ObserveGBs
			}
			b.record(v.Observe.WRU, v.Observe.RRU)
			b.path()
			b.outputs(v.GETs, false)
			b.monitoring()
			b.idle(a.Pollers) // observe's mapping; the path's are in path
			b.add("SQS, observe", b.n*sqs(v.Observe)*p.SQSRequest)
			b.lambda("observe", b.n*v.Observe.LambdaInvocations, b.n*gbs)
			b.logs("observe", b.n*v.ObserveLog)
		}
	}
	lat := a.Latency
	rtt := lat.RTT.Median.Seconds()
	longPoll := lat.Wake.P99 + lat.RTT.P99/2
	lpBasis := fmt.Sprintf("by construction: a long poll is out when the job ends; Genace's wake p99 %s + the answer's way back (RTT p99/2) %s", lat.Wake.P99, lat.RTT.P99/2)
	waitP99 := func(w, resume time.Duration) (time.Duration, string) {
		d := w + resume + 3*lat.RTT.P99/2
		return d, fmt.Sprintf("by construction: a change just after a GET waits that GET's way back, W %s, the resume %s, the next GET there and back (1.5 RTT p99 %s)", w, resume, 3*lat.RTT.P99/2)
	}
	// mux is a multiplexing poller's per-render part: its intake queue's
	// receives and deletes in batches of ten, the send to deliver; an
	// execution per render (durable, Step Functions) has only the send.
	mux := func(b *biller) { b.add("SQS, poller intake and deliver send", b.n*1.2*p.SQSRequest) }
	send := func(b *biller) { b.add("SQS, deliver send", b.n*p.SQSRequest) }
	meanPoll := u.meanRender().Seconds() / max(polls-1, 1)
	cycles := func(r RenderResult) float64 { return math.Ceil(r.Length.Seconds() / (a.Wait.Seconds() + rtt)) }
	ds := []Design{
		{Name: "floor (bounds every design; not a design)", Floor: true, Basis: "—",
			Month: bill(func(b *biller) { b.record(changeWRU, 0); b.outputs(polls, true) })},
		{Name: "genjobs (measured)", Genjobs: true, P99: u.P99, Basis: "measured (virtual pipeline)", Month: bill(genjobs(0))},
	}
	for _, g := range hypothetical {
		ds = append(ds, Design{Name: fmt.Sprintf("genjobs at %g observe GB-s per render (hypothetical)", g), Genjobs: true,
			P99: u.P99, Basis: "measured (virtual pipeline)", Month: bill(genjobs(g))})
	}
	hours := month.Hours()
	ds = append(ds,
		Design{Name: "multiplexing poller, Fargate", P99: longPoll, Basis: lpBasis, Month: bill(func(b *biller) {
			rival(b, polls)
			tasks := b.units(a.TaskGETs * meanPoll)
			b.fixed("Fargate tasks and public IPv4", tasks*hours*(a.TaskVCPU*p.FargateVCPUHour+a.TaskGB*p.FargateGBHour+p.IPv4Hour))
			b.idle(tasks)
			mux(b)
		})},
		Design{Name: "multiplexing poller, EC2 t4g.nano", P99: longPoll, Basis: lpBasis, Month: bill(func(b *biller) {
			rival(b, polls)
			boxes := b.units(a.NanoGETs * meanPoll)
			b.fixed("t4g.nano, 8 GB gp3, public IPv4", boxes*(hours*(p.NanoHour+p.IPv4Hour)+8*p.EBSGBMonth))
			b.idle(boxes)
			mux(b)
		})},
		Design{Name: "long Lambda per shard (15 min back to back)", P99: longPoll, Basis: lpBasis, Month: bill(func(b *biller) {
			rival(b, polls)
			shards := b.units(a.ShardGETs * meanPoll)
			b.lambda("shards", shards*month.Seconds()/900, shards*month.Seconds()*a.ShardGB)
			b.idle(shards)
			mux(b)
		})},
	)
	// Durable functions and Step Functions run one execution per render.
	dwP99, dwBasis := waitP99(a.Wait, lat.Start.P99)
	swP99, swBasis := waitP99(a.Wait, 3*a.Step)
	retained := a.Retention.Hours() / hours
	ds = append(ds,
		Design{Name: "Lambda durable functions: wait W, short GET step", P99: dwP99, Basis: dwBasis, Month: bill(func(b *biller) {
			c := u.perRender(cycles)
			rival(b, c+1)
			b.add("durable operations (start, wait and step per cycle, last step)", b.n*(2*c+2)*p.DurableOperation)
			b.add("durable data written and retained", b.n*c*a.StepBytes/1e9*(p.DurableWrittenGB+retained*p.DurableRetainedGBMon))
			b.lambda("durable resumes", b.n*(c+1), b.n*(c+1)*a.Call.Seconds()*0.125)
			send(b)
		})},
		Design{Name: "Lambda durable functions: long poll in a step", P99: longPoll + a.Step, Basis: lpBasis + ", + a checkpoint", Month: bill(func(b *biller) {
			rival(b, polls)
			steps := polls - 1 // delivery's read is not the execution's
			b.add("durable operations (start, a step per poll, last step)", b.n*(steps+2)*p.DurableOperation)
			b.add("durable data written and retained", b.n*steps*a.StepBytes/1e9*(p.DurableWrittenGB+retained*p.DurableRetainedGBMon))
			inv := u.perRender(func(r RenderResult) float64 { return math.Ceil(r.Length.Seconds() / 840) })
			b.lambda("durable executions held through polls", b.n*inv, b.n*(u.meanRender().Seconds()+rtt)*0.125)
			send(b)
		})},
	)
	for _, lambdaTask := range []bool{false, true} {
		name := "Step Functions Standard: Wait W, short GET (HTTP Task)"
		if lambdaTask {
			name = "Step Functions Standard: Wait W, short GET (Lambda task)"
		}
		ds = append(ds, Design{Name: name, P99: swP99, Basis: swBasis, Month: bill(func(b *biller) {
			c := u.perRender(cycles)
			rival(b, c+1)
			b.add("state transitions (Wait, GET, Choice per cycle; 2 writes, send, end)", b.n*(3*c+4)*p.Transition)
			if lambdaTask {
				b.lambda("GET task", b.n*c, b.n*c*a.Call.Seconds()*0.125)
			} else {
				b.fixed("EventBridge connection's secret", p.Secret)
			}
			send(b)
		})})
	}
	ds = append(ds,
		Design{Name: "Step Functions Standard: HTTP Task long poll", P99: longPoll + 3*a.Step, Basis: lpBasis + ", + 3 transitions", Month: bill(func(b *biller) {
			rival(b, polls)
			b.add("state transitions (HTTP Task, Choice per poll; 2 writes, send, end)", b.n*(2*(polls-1)+4)*p.Transition)
			b.fixed("EventBridge connection's secret", p.Secret)
			send(b)
		})},
		Design{Name: "fixed 5 s poller (Lambda, 1 min schedule)", P99: a.Tick + 3*lat.RTT.P99/2,
			Basis: fmt.Sprintf("by construction: tick %s + a GET there and back (1.5 RTT p99 %s)", a.Tick, 3*lat.RTT.P99/2), Month: bill(func(b *biller) {
				gets := u.perRender(func(r RenderResult) float64 { return math.Ceil(r.Length.Seconds()/a.Tick.Seconds()) + 1 })
				rival(b, gets)
				shards := b.units(a.ShardGETs * a.Tick.Seconds())
				b.lambda("pollers", shards*month.Seconds()/60, shards*month.Seconds()*a.ShardGB)
				ticks := month.Seconds() / a.Tick.Seconds()
				b.fixed("due-index queries", ticks*dynamo.StatusShards*p.RRU)
				b.add("due-index keys read", b.n*u.meanRender().Seconds()/a.Tick.Seconds()*100/4096*p.RRU)
				send(b)
			})},
	)
	return ds
}

// Volumes are the months the comparison prices: renders a month.
var Volumes = []float64{1e4, 1e6, 1e8}

// Target is genjobs' cost per render over the cheapest rival's with
// detection p99 within TargetP99.
const (
	Target    = 1.2
	TargetP99 = time.Second
)

// cheapest is the cheapest rival within TargetP99 at n renders.
func cheapest(ds []Design, n float64) (Design, bool) {
	var best Design
	found := false
	for _, d := range ds {
		if d.Floor || d.Genjobs || d.P99 > TargetP99 {
			continue
		}
		if !found || d.Month(n).Total() < best.Month(n).Total() {
			best, found = d, true
		}
	}
	return best, found
}

func fmtUSD(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 1:
		return fmt.Sprintf("%.2f", x)
	}
	return fmt.Sprintf("%.4f", x)
}

// WriteCost writes the comparison of designs priced on u as Markdown:
// each design's month at each volume, genjobs' ratio to it, and the
// target's check.
func WriteCost(w io.Writer, u Usage, ds []Design) error {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	var ref Design
	for _, d := range ds {
		if d.Genjobs {
			ref = d
			break
		}
	}
	p("Usage measured: %s.\n\n", u.Summary())
	if len(u.At) > 0 {
		p("genjobs' rows take observe's part at each volume's own renders in flight (Little's law on the standard renders):\n\n")
		for _, n := range Volumes {
			if v, ok := u.At[n]; ok {
				p("- %s a month, %d in flight: observe %.3f GB-s, %.2f Lambda invocations and %.2f SQS requests per render; %s\n",
					fmtVolume(n), InFlight(n, standardMean), v.ObserveGBs, v.Observe.LambdaInvocations, sqs(v.Observe), v.Summary())
			}
		}
		p("\n")
	}
	p("Prices: us-east-1 list prices checked %s, no free tier. Per volume: $/month, $ per 1,000 renders, and %s's cost over the design's.\n\n", PriceDate, ref.Name)
	p("| design | p99 detection |")
	for _, n := range Volumes {
		p(" %s/month: $/month | $/1k | ratio |", fmtVolume(n))
	}
	p("\n|---|---|%s\n", strings.Repeat("---|---|---|", len(Volumes)))
	for _, d := range ds {
		p99 := "—"
		if !d.Floor {
			p99 = fmt.Sprintf("%.2f s", d.P99.Seconds())
		}
		p("| %s | %s |", d.Name, p99)
		for _, n := range Volumes {
			t := d.Month(n).Total()
			p(" %s | %s | %.2f |", fmtUSD(t), fmtUSD(t/n*1000), ref.Month(n).Total()/t)
		}
		p("\n")
	}
	p("\nTarget: genjobs' cost per render ≤ %.1f× the cheapest rival's with p99 detection ≤ %s.\n\n", Target, TargetP99)
	for _, g := range ds {
		if !g.Genjobs {
			continue
		}
		for _, n := range Volumes {
			c, ok := cheapest(ds, n)
			if !ok {
				p("- %s, %s/month: no rival within %s\n", g.Name, fmtVolume(n), TargetP99)
				continue
			}
			r := g.Month(n).Total() / c.Month(n).Total()
			p("- %s, %s/month: cheapest rival %s; ratio %.2f: %s\n", g.Name, fmtVolume(n), c.Name, r, verdict(r <= Target, fmt.Sprintf("(> %.1f)", Target)))
		}
	}
	p("\nNot priced: the outputs' S3 storage ($%g/GB-month: the application's to keep, the same in every design, and the bucket does not expire them); Step Functions Express ($%g per million requests, $%g/GB-s: its 5-minute limit is shorter than a render's tail); Genace's own charges.\n", CurrentPrices.S3GBMonth, CurrentPrices.ExpressRequest*1e6, CurrentPrices.ExpressGBSecond)
	p("\nDetection p99 bases:\n\n")
	for _, d := range ds {
		if !d.Floor {
			p("- %s: %s\n", d.Name, d.Basis)
		}
	}
	p("\n%s's bill ($/month):\n\n| item |", ref.Name)
	for _, n := range Volumes {
		p(" %s |", fmtVolume(n))
	}
	p("\n|---|%s\n", strings.Repeat("---|", len(Volumes)))
	bills := make([]Bill, len(Volumes))
	for i, n := range Volumes {
		bills[i] = ref.Month(n)
	}
	for j, l := range bills[0] {
		p("| %s |", l.Item)
		for i := range Volumes {
			p(" %s |", fmtUSD(bills[i][j].USD))
		}
		p("\n")
	}
	return nil
}

func fmtVolume(n float64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%gM", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%gk", n/1e3)
	}
	return fmt.Sprintf("%g", n)
}
