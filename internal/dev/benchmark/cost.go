package benchmark

import (
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/genjobs/genjobs/internal/dev/samlocal"
)

// Prices are AWS list prices for the services a render touches.
type Prices struct {
	// Region and AsOf say where and when the prices apply.
	Region, AsOf string
	// SQSPerMillion is per million requests (each 64 KB chunk of payload
	// is a request; genjobs' messages are far below one chunk).
	SQSPerMillion float64
	// DynamoWRUPerMillion and DynamoRRUPerMillion are on-demand request
	// unit prices.
	DynamoWRUPerMillion, DynamoRRUPerMillion float64
	// LambdaGBSecond (arm64) and LambdaPerMillion (requests).
	LambdaGBSecond, LambdaPerMillion float64
	// SFNPerThousand is per thousand Standard workflow state transitions.
	SFNPerThousand float64
	// SchedulerPerMillion is per million EventBridge Scheduler
	// invocations.
	SchedulerPerMillion float64
	// ExpressPerMillion is per million Step Functions Express requests
	// (executions started), ExpressGBSecond per GB-s of Express duration
	// (billed in 100 ms and 64 MB units).
	ExpressPerMillion, ExpressGBSecond float64
}

// ListPrices are the us-east-1 list prices, free tiers ignored. DynamoDB
// on-demand is at the prices of AWS's November 2024 cut (50 %: from
// $1.25 to $0.625 per million WRU and from $0.25 to $0.125 per million
// RRU). Step Functions Express: $1.00 per million requests and $0.06 per
// GB-hour (= $0.00001667 per GB-s) for the first 1,000 GB-hours a month,
// duration rounded up to 100 ms and memory billed in 64 MB chunks — "AWS
// Step Functions Pricing", https://aws.amazon.com/step-functions/pricing/.
func ListPrices() Prices {
	return Prices{
		Region: "us-east-1", AsOf: "2024-11-01 (DynamoDB on-demand after the 1 Nov 2024 price cut)",
		SQSPerMillion: 0.40, DynamoWRUPerMillion: 0.625, DynamoRRUPerMillion: 0.125,
		LambdaGBSecond: 0.0000133334, LambdaPerMillion: 0.20,
		SFNPerThousand: 0.025, SchedulerPerMillion: 1.00,
		ExpressPerMillion: 1.00, ExpressGBSecond: 0.06 / 3600,
	}
}

// Dollars prices r.
func (p Prices) Dollars(r Requests) float64 {
	return r.SQS()*p.SQSPerMillion/1e6 +
		r.WRU*p.DynamoWRUPerMillion/1e6 + r.RRU*p.DynamoRRUPerMillion/1e6 +
		r.LambdaGBSeconds*p.LambdaGBSecond + r.LambdaInvocations*p.LambdaPerMillion/1e6 +
		r.SFNTransitions*p.SFNPerThousand/1e3 + r.Schedules*p.SchedulerPerMillion/1e6 +
		r.ExpressRequests*p.ExpressPerMillion/1e6 + r.ExpressGBSeconds*p.ExpressGBSecond
}

// Breakdown prices r per service.
func (p Prices) Breakdown(r Requests) map[string]float64 {
	return map[string]float64{
		"SQS":            r.SQS() * p.SQSPerMillion / 1e6,
		"DynamoDB":       r.WRU*p.DynamoWRUPerMillion/1e6 + r.RRU*p.DynamoRRUPerMillion/1e6,
		"Lambda":         r.LambdaGBSeconds*p.LambdaGBSecond + r.LambdaInvocations*p.LambdaPerMillion/1e6,
		"Step Functions": r.SFNTransitions*p.SFNPerThousand/1e3 + r.ExpressRequests*p.ExpressPerMillion/1e6 + r.ExpressGBSeconds*p.ExpressGBSecond,
		"Scheduler":      r.Schedules * p.SchedulerPerMillion / 1e6,
	}
}

// Functions are the Lambda settings and the non-observation action
// durations the cost model charges, the same for both designs.
type Functions struct {
	// MemoryMB per function: template.yaml's MemorySize
	// (TemplateFunctions reads it); Memory has every function's, by
	// folder name.
	SubmitMB, ObserveMB, DeliverMB int
	Memory                         map[string]int
	// SubmitBusy and DeliverBusy are the running times of one submit (the
	// claim, the POST, the accept write) and one delivery (a GET, one
	// output's copy, the write).
	SubmitBusy, DeliverBusy time.Duration
}

// TemplateFunctions are the memory sizes template.yaml under root gives
// the functions, with a 50 ms submit and a 200 ms delivery.
func TemplateFunctions(root string) (Functions, error) {
	t, err := samlocal.Load(filepath.Join(root, samlocal.TemplateFile))
	if err != nil {
		return Functions{}, err
	}
	mb := map[string]int{}
	for _, fn := range t.Functions {
		mb[fn.Dir()] = fn.MemoryMB
	}
	f := Functions{SubmitMB: mb[FnSubmit], ObserveMB: mb[FnObserve], DeliverMB: mb[FnDeliver], Memory: mb, SubmitBusy: 50 * time.Millisecond, DeliverBusy: 200 * time.Millisecond}
	if f.SubmitMB == 0 || f.ObserveMB == 0 || f.DeliverMB == 0 {
		return Functions{}, fmt.Errorf("%s: no submit, observe or deliver function", samlocal.TemplateFile)
	}
	return f, nil
}

// memoryMB is a function's memory by folder name (0 when unknown).
func (f Functions) memoryMB(fn string) int { return f.Memory[fn] }

func gbSeconds(mb int, d time.Duration) float64 {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return float64(mb) / 1024 * float64(ms) / 1000
}

// expressMB is Step Functions Express's memory billing unit.
const expressMB = 64

// floorMB is Lambda's smallest memory size, the floor's.
const floorMB = 128

// lambdaMaxRun is Lambda's longest invocation (a 900 s timeout).
const lambdaMaxRun = 15 * time.Minute

// batched charges a per-action count's share of its event source
// mapping's batch: one receive, one delete and one invocation per batch
// of perBatch records (1: an action alone in its batch, the usual case
// at low traffic and the most expensive one).
func batched(r Requests, perBatch float64) Requests {
	perBatch = max(perBatch, 1)
	r.SQSReceive, r.SQSDelete, r.LambdaInvocations = 1/perBatch, 1/perBatch, 1/perBatch
	return r
}

// Occupancy is the records per invocation a design is priced at: Submit,
// Observe and Deliver for each function (1 = one record per invocation).
type Occupancy struct{ Submit, Observe, Deliver float64 }

// OneRecord prices every invocation at one record: the worst case.
var OneRecord = Occupancy{1, 1, 1}

// Measured is the counting run's records per invocation.
func (pr *PipelineResult) Measured() Occupancy {
	per := func(fn string) float64 {
		f := pr.Functions[fn]
		if f.Batches == 0 {
			return 1
		}
		return max(1, float64(f.Actions)/float64(f.Batches))
	}
	return Occupancy{per(FnSubmit), per(FnObserve), per(FnDeliver)}
}

// unit is a measured request's mean capacity units (at least one).
func unit(units, requests float64) float64 {
	if requests == 0 {
		return 1
	}
	return max(1, units/requests)
}

// submitAndDeliver is one submit and one delivery as the counting run
// measured them, at occupancy occ.
func submitAndDeliver(pr *PipelineResult, fns Functions, occ Occupancy) Requests {
	sub := batched(pr.PerAction(FnSubmit), occ.Submit)
	sub.LambdaGBSeconds = gbSeconds(fns.SubmitMB, fns.SubmitBusy) / occ.Submit
	del := batched(pr.PerAction(FnDeliver), occ.Deliver)
	del.LambdaGBSeconds = gbSeconds(fns.DeliverMB, fns.DeliverBusy) / occ.Deliver
	return sub.Plus(del)
}

// PerRender is a design through genjobs' queues (genjobs, or a fixed
// poller): the application's record and dispatch, one submit and one
// delivery as the counting run measured them, and the observations as
// the model played them — per invocation the event source mapping's
// receive and delete, a GetItem and the lease's ChangeMessageVisibility
// (per message, as measured), per record write the measured observe
// write's WRU, per hand-off a SendMessage. occ.Observe records share an
// invocation, which lasts about as long as one chain: its GB-s are
// shared too.
func PerRender(pr *PipelineResult, o Outcome, fns Functions, occ Occupancy) Requests {
	app := pr.App.Times(1 / float64(pr.Operations))
	m := pr.PerAction(FnObserve)
	inv := o.InvocationsPerRender
	obs := Requests{
		SQSReceive: inv / max(occ.Observe, 1), SQSDelete: inv / max(occ.Observe, 1), LambdaInvocations: inv / max(occ.Observe, 1),
		SQSChangeVisibility: inv * m.SQSChangeVisibility,
		DynamoGet:           inv, RRU: inv * unit(m.RRU, m.DynamoGet),
		DynamoPut: o.WritesPerRender, WRU: o.WritesPerRender * unit(m.WRU, m.DynamoPut), ItemBytes: o.WritesPerRender * m.ItemBytes / max(m.DynamoPut, 1),
		SQSSend: o.SendsPerRender, Schedules: o.SchedulesPerRender,
		LambdaGBSeconds: float64(fns.ObserveMB) / 1024 * o.BilledSecondsPerRender / max(occ.Observe, 1),
	}
	return app.Plus(submitAndDeliver(pr, fns, occ)).Plus(obs)
}

// sfnBase is what a Step Functions design pays besides observing: the
// application's record (StartExecution replaces the dispatch message),
// and the submit's and delivery's DynamoDB requests and Lambda time; the
// execution holds the polling state, so no record write between them,
// which favours it.
func sfnBase(pr *PipelineResult, fns Functions) Requests {
	app := pr.App.Times(1 / float64(pr.Operations))
	app.SQSSend = 0
	sub, del := pr.PerAction(FnSubmit), pr.PerAction(FnDeliver)
	return app.Plus(Requests{
		DynamoGet: sub.DynamoGet + del.DynamoGet, DynamoPut: sub.DynamoPut + del.DynamoPut,
		RRU: sub.RRU + del.RRU, WRU: sub.WRU + del.WRU, S3Head: del.S3Head, S3Put: del.S3Put,
		LambdaInvocations: 2,
		LambdaGBSeconds:   gbSeconds(fns.SubmitMB, fns.SubmitBusy) + gbSeconds(fns.DeliverMB, fns.DeliverBusy),
	})
}

// StandardPerRender is a Step Functions Standard workflow: Submit task →
// loop {Task: the observe Lambda (one chain or one poll, as o played it)
// → Choice} → Deliver task → Succeed. Transitions: Submit, two per loop
// round, Deliver and Succeed.
func StandardPerRender(pr *PipelineResult, o Outcome, fns Functions) Requests {
	r := sfnBase(pr, fns)
	r.LambdaInvocations += o.InvocationsPerRender
	r.LambdaGBSeconds += float64(fns.ObserveMB) / 1024 * o.BilledSecondsPerRender
	r.SFNTransitions = 3 + 2*o.InvocationsPerRender
	return r
}

// ExpressPerRender is the same loop in Step Functions Express, which
// runs at most 5 minutes: one execution holds one chain of up to
// observe.DefaultChain (two would not fit), so a render needs one
// execution (a request) per chain — the restarts are counted, what
// restarts them is not priced, which favours it. Duration is billed in
// 100 ms units at 64 MB, besides the Lambda's own time.
func ExpressPerRender(pr *PipelineResult, o Outcome, fns Functions) Requests {
	r := sfnBase(pr, fns)
	r.LambdaInvocations += o.InvocationsPerRender
	r.LambdaGBSeconds += float64(fns.ObserveMB) / 1024 * o.BilledSecondsPerRender
	r.ExpressRequests = o.InvocationsPerRender
	r.ExpressGBSeconds = float64(expressMB) / 1024 * o.Billed100msPerRender / 10
	return r
}

// FloorPerRender is the fewest requests and GB-seconds any design on
// Lambda, SQS and DynamoDB needs for one render at one render per
// invocation: three hand-offs by message (dispatch → submit, submit →
// observe, observe → deliver: SendMessage, ReceiveMessage and
// DeleteMessage each), one record write of at most 1 KB and no index per
// phase change (accepted, terminal, delivered), no reads (each message
// carries what its handler needs), one invocation per function plus one
// per further 15 minutes a long poll must be held, and 128 MB for the
// render time (a long poll held from acceptance to the finish) plus the
// submit's and delivery's running time.
func FloorPerRender(times []time.Duration, fns Functions) Requests {
	if len(times) == 0 {
		return Requests{}
	}
	var held time.Duration
	extra := 0.0
	for _, t := range times {
		held += t
		extra += math.Max(0, math.Ceil(float64(t)/float64(lambdaMaxRun))-1)
	}
	n := float64(len(times))
	mean := held / time.Duration(len(times))
	return Requests{
		SQSSend: 3, SQSReceive: 3, SQSDelete: 3,
		DynamoPut: 3, WRU: 3,
		LambdaInvocations: 3 + extra/n,
		LambdaGBSeconds:   float64(floorMB) / 1024 * (mean + fns.SubmitBusy + fns.DeliverBusy).Seconds(),
	}
}
