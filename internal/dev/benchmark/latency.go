package benchmark

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Dist is a latency distribution: log-normal with the given median and
// shape, and with probability Tail a draw from a second log-normal
// instead (Lambda's cold starts). Sigma 0 is a constant.
type Dist struct {
	// Median and Sigma shape the usual draw.
	Median time.Duration
	Sigma  float64
	// Tail is the share of draws from the tail (0 ≤ Tail ≤ 1), whose
	// median and shape are TailMedian and TailSigma.
	Tail       float64
	TailMedian time.Duration
	TailSigma  float64
}

// Const is a distribution that always draws d.
func Const(d time.Duration) Dist { return Dist{Median: d} }

// Sample draws one latency.
func (d Dist) Sample(rng *rand.Rand) time.Duration {
	m, s := d.Median, d.Sigma
	if d.Tail > 0 && rng.Float64() < d.Tail {
		m, s = d.TailMedian, d.TailSigma
	}
	if s == 0 {
		return m
	}
	return time.Duration(float64(m) * math.Exp(s*rng.NormFloat64()))
}

// String describes the distribution for the report.
func (d Dist) String() string {
	s := fmtMS(d.Median)
	if d.Sigma > 0 {
		s = fmt.Sprintf("log-normal, median %s, σ %.2f", fmtMS(d.Median), d.Sigma)
	}
	if d.Tail > 0 {
		s += fmt.Sprintf("; %.1f %% from a log-normal of median %s, σ %.2f", 100*d.Tail, fmtMS(d.TailMedian), d.TailSigma)
	}
	return s
}

// Latencies are the model's sampled delays, each drawn per event.
type Latencies struct {
	// RoundTrip is the Lambda ↔ Genace round trip of one GET, besides
	// any long-poll hold: half of it before the GET reaches Genace, half
	// after the answer leaves.
	RoundTrip Dist
	// Pickup is the time from SendMessage (or a message's delay running
	// out) to the event source mapping handing the message to Lambda,
	// the SendMessage call itself included.
	Pickup Dist
	// Start is Lambda's start of an invocation: warm mostly, a cold start
	// now and then.
	Start Dist
	// Dynamo is one DynamoDB request (a conditional write or a strongly
	// consistent GetItem).
	Dynamo Dist
}

// DefaultLatencies are the model's defaults. Where each comes from:
//
//   - RoundTrip: median 50 ms (the figure for a same-continent
//     HTTPS call; Genace's location is not known), σ 0.3. The
//     sensitivity table runs 50, 200 and 500 ms.
//   - Pickup: median 20 ms, σ 0.5: the event source mapping long-polls
//     the queue, so a message is received as soon as it is visible. AWS
//     publishes no latency figure for SQS standard queues; the
//     sensitivity table runs 20, 500 and 1000 ms.
//   - Start: warm 5 ms (σ 0.3) in 99 % of invocations; 1 % cold with a
//     median of 200 ms (σ 0.6): "cold starts typically occur in under 1%
//     of invocations. The duration of a cold start varies from under
//     100 ms to over 1 second" — AWS Lambda Operator Guide, "Lambda
//     execution environments",
//     https://docs.aws.amazon.com/lambda/latest/operatorguide/execution-environments.html.
//   - Dynamo: median 5 ms, σ 0.4: DynamoDB's "single-digit millisecond
//     performance at any scale", https://aws.amazon.com/dynamodb/.
func DefaultLatencies() Latencies {
	return Latencies{
		RoundTrip: Dist{Median: 50 * time.Millisecond, Sigma: 0.3},
		Pickup:    Dist{Median: 20 * time.Millisecond, Sigma: 0.5},
		Start:     Dist{Median: 5 * time.Millisecond, Sigma: 0.3, Tail: 0.01, TailMedian: 200 * time.Millisecond, TailSigma: 0.6},
		Dynamo:    Dist{Median: 5 * time.Millisecond, Sigma: 0.4},
	}
}

// latencySources says where DefaultLatencies come from, for results.md.
var latencySources = []string{
	"Lambda cold starts: AWS Lambda Operator Guide, \"Lambda execution environments\" (https://docs.aws.amazon.com/lambda/latest/operatorguide/execution-environments.html): cold starts in under 1 % of invocations, from under 100 ms to over 1 s",
	"DynamoDB: \"single-digit millisecond performance at any scale\" (https://aws.amazon.com/dynamodb/)",
	"SQS pickup: no published latency figure for standard queues; the event source mapping long-polls, so the default is small and the sensitivity table carries the doubt",
	"Round trip to Genace: the issue's 50 ms; the sensitivity table runs 50 / 200 / 500 ms",
}

// rngFor is a seeded source for the model's draws.
func rngFor(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x1a7e)) }
