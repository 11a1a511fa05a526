package benchmark

import "time"

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
}

// ListPrices are the us-east-1 list prices, free tiers ignored. DynamoDB
// on-demand is at the prices of AWS's November 2024 cut (50 %: from
// $1.25 to $0.625 per million WRU and from $0.25 to $0.125 per million
// RRU).
func ListPrices() Prices {
	return Prices{
		Region: "us-east-1", AsOf: "2024-11-01 (DynamoDB on-demand after the 1 Nov 2024 price cut)",
		SQSPerMillion: 0.40, DynamoWRUPerMillion: 0.625, DynamoRRUPerMillion: 0.125,
		LambdaGBSecond: 0.0000133334, LambdaPerMillion: 0.20,
		SFNPerThousand: 0.025, SchedulerPerMillion: 1.00,
	}
}

// Dollars prices r.
func (p Prices) Dollars(r Requests) float64 {
	return r.SQS()*p.SQSPerMillion/1e6 +
		r.WRU*p.DynamoWRUPerMillion/1e6 + r.RRU*p.DynamoRRUPerMillion/1e6 +
		r.LambdaGBSeconds*p.LambdaGBSecond + r.LambdaInvocations*p.LambdaPerMillion/1e6 +
		r.SFNTransitions*p.SFNPerThousand/1e3 + r.Schedules*p.SchedulerPerMillion/1e6
}

// Breakdown prices r per service.
func (p Prices) Breakdown(r Requests) map[string]float64 {
	return map[string]float64{
		"SQS":            r.SQS() * p.SQSPerMillion / 1e6,
		"DynamoDB":       r.WRU*p.DynamoWRUPerMillion/1e6 + r.RRU*p.DynamoRRUPerMillion/1e6,
		"Lambda":         r.LambdaGBSeconds*p.LambdaGBSecond + r.LambdaInvocations*p.LambdaPerMillion/1e6,
		"Step Functions": r.SFNTransitions * p.SFNPerThousand / 1e3,
		"Scheduler":      r.Schedules * p.SchedulerPerMillion / 1e6,
	}
}

// Functions are the Lambda settings and the non-observation action
// durations the cost model charges, the same for both designs.
type Functions struct {
	// MemoryMB per function (template.yaml: 256 for submit and observe,
	// 512 for deliver).
	SubmitMB, ObserveMB, DeliverMB int
	// SubmitBusy and DeliverBusy are the running times of one submit (the
	// claim, the POST, the accept write) and one delivery (a GET, one
	// output's copy, the write).
	SubmitBusy, DeliverBusy time.Duration
}

// DefaultFunctions are template.yaml's memory sizes with a 50 ms submit
// and a 200 ms delivery.
func DefaultFunctions() Functions {
	return Functions{SubmitMB: 256, ObserveMB: 256, DeliverMB: 512, SubmitBusy: 50 * time.Millisecond, DeliverBusy: 200 * time.Millisecond}
}

func gbSeconds(mb int, d time.Duration) float64 {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return float64(mb) / 1024 * float64(ms) / 1000
}

// oneBatch sets a per-action count's event source mapping share to one
// receive, one delete and one invocation: an action alone in its batch,
// the usual case for a render's chain at low traffic and the most
// expensive one.
func oneBatch(r Requests) Requests {
	r.SQSReceive, r.SQSDelete, r.LambdaInvocations = 1, 1, 1
	return r
}

// PerRender is genjobs' requests per render: the application's record and
// dispatch, one submit, the observations of o (each priced as the
// pipeline's observe action, alone in its batch, running as long as the
// model says, schedules as the model counts them) and one delivery.
func PerRender(pr *PipelineResult, o Outcome, fns Functions) Requests {
	app := pr.App.Times(1 / float64(pr.Operations))
	sub := oneBatch(pr.PerAction(FnSubmit))
	sub.LambdaGBSeconds = gbSeconds(fns.SubmitMB, fns.SubmitBusy)
	obs := oneBatch(pr.PerAction(FnObserve))
	obs.Schedules = 0
	obsAll := obs.Times(o.GETsPerRender)
	obsAll.Schedules = o.SchedulesPerRender
	obsAll.LambdaGBSeconds = float64(fns.ObserveMB) / 1024 * o.BilledSecondsPerRender
	del := oneBatch(pr.PerAction(FnDeliver))
	del.LambdaGBSeconds = gbSeconds(fns.DeliverMB, fns.DeliverBusy)
	return app.Plus(sub).Plus(obsAll).Plus(del)
}

// StepFunctionsPerRender is a Step Functions Standard poller doing the
// same job: Submit (Lambda task) → Wait 5 s → GetStatus (Lambda task) →
// Choice → back to Wait, until terminal → Deliver (Lambda task) →
// Succeed. Transitions: Submit, then Wait + GetStatus + Choice per poll,
// then Deliver and Succeed. Its tasks cost what genjobs' actions cost in
// Lambda (a GetStatus task is one round trip, no long poll), and in
// DynamoDB it pays only for the record, the submit and the delivery: the
// execution holds the polling state, which favours it. polls is the
// fixed 5 s poller's outcome on the same workload.
func StepFunctionsPerRender(pr *PipelineResult, polls Outcome, fns Functions, ov Overheads) Requests {
	app := pr.App.Times(1 / float64(pr.Operations))
	app.SQSSend = 0 // StartExecution instead of a dispatch message
	sub, del := pr.PerAction(FnSubmit), pr.PerAction(FnDeliver)
	r := Requests{
		DynamoGet: sub.DynamoGet + del.DynamoGet, DynamoPut: sub.DynamoPut + del.DynamoPut,
		RRU: sub.RRU + del.RRU, WRU: sub.WRU + del.WRU, S3Head: del.S3Head, S3Put: del.S3Put,
		LambdaInvocations: 2 + polls.GETsPerRender,
		LambdaGBSeconds: gbSeconds(fns.SubmitMB, fns.SubmitBusy) + gbSeconds(fns.DeliverMB, fns.DeliverBusy) +
			polls.GETsPerRender*gbSeconds(fns.ObserveMB, ov.RoundTrip),
		SFNTransitions: 3 + 3*polls.GETsPerRender,
	}
	return app.Plus(r)
}
