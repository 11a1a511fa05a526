// Package benchmark produces genjobs' comparative figures (`genjobs
// bench`, `make bench`): observation in virtual time with sampled
// latencies, AWS requests and dollars per render against Step Functions,
// fixed pollers and the floor, the scale table and the simulation behind
// it, handler throughput and a real-time run through the local pipeline,
// and cold starts and peak memory under the Lambda Runtime Interface
// Emulator. The model figures are deterministic for a seed; the
// throughput, real-time and cold-start measurements are of this machine.
package benchmark

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/schedule"
)

// SigmaFor returns the log-normal shape parameter that puts the quantile
// q above ratio times the median: P(T > ratio·median) = 1−q. With 5 % of
// renders over 10 minutes and a median of 60 s that is ln(10)/1.645.
func SigmaFor(ratio, z float64) float64 { return math.Log(ratio) / z }

// Z95 is the standard normal's 95th percentile.
const Z95 = 1.6448536269514722

// Workload describes the render times of a benchmark workload: log-normal
// with the given median and shape.
type Workload struct {
	// Renders is how many renders the workload holds.
	Renders int
	// Median is the median render time, from acceptance to finish.
	Median time.Duration
	// Sigma is the log-normal shape parameter.
	Sigma float64
	// QueueFor is how long a job stays queued before it runs (clipped to
	// its render time): the queued→running transition is a state change
	// that ends a long poll early, as the simulator's does.
	QueueFor time.Duration
}

// DefaultWorkload is the workload: 2,000 renders, median 60 s,
// 5 % over 10 minutes, queued for the simulator's default 2 s.
func DefaultWorkload() Workload {
	return Workload{Renders: 2000, Median: time.Minute, Sigma: SigmaFor(10, Z95), QueueFor: 2 * time.Second}
}

// Sample draws the render times of w, deterministic for seed.
func (w Workload) Sample(seed uint64) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, 0x6a0b5e))
	out := make([]time.Duration, w.Renders)
	for i := range out {
		out[i] = time.Duration(float64(w.Median) * math.Exp(w.Sigma*rng.NormFloat64()))
	}
	return out
}

// Observer plays the observation of one render.
type Observer interface {
	// Name labels the design in the tables and plots.
	Name() string
	// Observe plays a render of renderTime, queued for queueFor (clipped
	// to it), drawing every latency from lat with rng.
	Observe(renderTime, queueFor time.Duration, lat Latencies, rng *rand.Rand) Render
}

// epoch anchors the records handed to the real policy; only differences
// from it matter.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// benchModel is the model name on the synthetic records.
const benchModel = "bench-model"

// Chains is the observe handler as it runs: an invocation chains long
// polls of Wait for up to Chain, each sent Overlap before the previous
// one's window ends; a changed answer is written at once and the next
// poll leaves at once; the chain hands over to a fresh message when the
// next poll would not fit, and the real schedule.Policy decides when the
// next chain starts (at once while the job is younger than Immediate,
// backed off after). Orchestrated replaces the hand-over through
// DynamoDB and SQS by a Step Functions loop calling the same Lambda.
type Chains struct {
	// Label names the design.
	Label string
	// Chain, Wait and Overlap shape a chain (observe.DefaultChain,
	// genace.MaxWait, overlap).
	Chain, Wait, Overlap time.Duration
	// Policy paces the chains (schedule.DefaultPolicies().Default).
	Policy schedule.Policy
	// Orchestrated: the next chain starts one Lambda start after the
	// last answer, with no record write, message or GetItem between
	// chains (a Step Functions Task → Choice loop; the transitions'
	// own latency is taken as zero, which favours it).
	Orchestrated bool
}

// GenjobsChains is the observe handler with its defaults.
func GenjobsChains() Chains {
	return Chains{Label: "genjobs", Chain: observe.DefaultChain, Wait: genace.MaxWait, Overlap: observe.DefaultOverlap, Policy: schedule.DefaultPolicies().Default}
}

// Name implements Observer.
func (c Chains) Name() string { return c.Label }

// Render is the outcome of observing one render.
type Render struct {
	// Time is the render time: acceptance to remote finish.
	Time time.Duration
	// GETs counts every GET, overlapped ones answered twice included.
	GETs int
	// InVain counts long polls that reached Genace after the job had
	// finished: held for the whole window (the job never changes again).
	InVain int
	// Detect is the time from remote finish to the record holding the
	// terminal snapshot; Never when it was never seen finished.
	Detect time.Duration
	// Invocations counts the observe function's invocations (one per
	// chain or poll), Writes its record writes, Sends its SendMessage
	// calls (hand-overs, and the one to delivery), Schedules the
	// follow-ups delayed past SQS's longest delay.
	Invocations, Writes, Sends, Schedules int
	// Busy is the observe function's summed running time; BilledMS the
	// same rounded up per invocation to 1 ms (Lambda) and Billed100ms
	// to 100 ms units (Step Functions Express).
	Busy        time.Duration
	BilledMS    int64
	Billed100ms int64
	// Stalled is set when a budget ran out before the job finished.
	Stalled bool
}

func (r *Render) bill(d time.Duration) {
	r.Invocations++
	r.Busy += d
	r.BilledMS += int64((d + time.Millisecond - 1) / time.Millisecond)
	r.Billed100ms += int64((d + 100*time.Millisecond - 1) / (100 * time.Millisecond))
}

// Never is the detection latency of a render that was never seen
// finished.
const Never = time.Duration(math.MaxInt64)

// job is Genace's view of one render: queued until queued, running until
// finish, then finished for good.
type job struct{ queued, finish time.Duration }

// answer is when a GET with wait that arrives at Genace at arrive
// answers: at once without wait; else at the first change after arrive
// (changed), or after the whole wait — in vain if the job was already
// finished at arrive.
func (j job) answer(arrive, wait time.Duration) (at time.Duration, changed, inVain bool) {
	if wait <= 0 {
		return arrive, false, false
	}
	next := j.finish
	switch {
	case arrive < j.queued:
		next = j.queued
	case arrive >= j.finish:
		return arrive + wait, false, true
	}
	if next < arrive+wait {
		return next, true, false
	}
	return arrive + wait, false, false
}

// Observe implements Observer.
func (c Chains) Observe(renderTime, queueFor time.Duration, lat Latencies, rng *rand.Rand) Render {
	j := job{queued: min(queueFor, renderTime), finish: renderTime}
	r := Render{Time: renderTime, Detect: Never}
	ps := schedule.DefaultPolicies()
	ps.Default = c.Policy
	obs := schedule.NewObservation(ps)
	obs.Rand = rng.Float64
	budgets := obs.BudgetsFor(benchModel)
	accepted := epoch
	rec := operation.Record{Model: benchModel, Timestamps: operation.Timestamps{Accepted: &accepted}}
	delayAt := func(age time.Duration) time.Duration { return obs.Next(&rec, epoch.Add(age)) }
	maxPolls := 1 + int(c.Chain/max(c.Wait, genace.MaxWait))

	// The submit handler saved the 202's snapshot at acceptance; its
	// write precedes the first message (or, orchestrated, the Submit
	// task returns and the loop's first task starts).
	observed, t, delay := time.Duration(0), time.Duration(0), time.Duration(0)
	if !c.Orchestrated {
		t = lat.Dynamo.Sample(rng)
	}
	looks := 0
	for {
		var invoke, start time.Duration
		if c.Orchestrated {
			invoke = t + delay + lat.Start.Sample(rng)
			start = invoke
		} else {
			if delay > schedule.DefaultMaxQueueDelay {
				r.Schedules++
			}
			invoke = t + delay + lat.Pickup.Sample(rng) + lat.Start.Sample(rng)
			start = invoke + lat.Dynamo.Sample(rng) // GetItem of the record
		}
		end := start + c.Chain
		polls := 0
		fits := func(at time.Duration) bool {
			return polls < maxPolls && at+c.Wait <= end && delayAt(at) == 0
		}
		send := start
		for {
			polls++
			looks++
			r.GETs++
			// observe's window(): a long poll only after a fresh look.
			wait := c.Wait
			if send-observed > c.Wait {
				wait = 0
			}
			rtt := lat.RoundTrip.Sample(rng)
			arrive := send + rtt/2
			at, changed, inVain := j.answer(arrive, wait)
			if inVain {
				r.InVain++
			}
			back := at + rtt/2
			observed = back
			// The overlapped next poll, if it left before this answer came
			// back: it answers the same change (a duplicate) or is
			// cancelled, but it was sent.
			next := back
			if wait > 0 && c.Overlap > 0 {
				next = send + wait - c.Overlap
			}
			overlapped := next < back && fits(next)
			if at >= j.finish {
				if overlapped {
					r.GETs++
				}
				w := lat.Dynamo.Sample(rng)
				r.Detect = back + w - j.finish
				if c.Orchestrated {
					// The Deliver task writes the record.
					r.bill(back - invoke)
					return r
				}
				r.Writes++
				r.Sends++ // to delivery
				r.bill(back + w - invoke)
				return r
			}
			if (budgets.MaxObservations > 0 && looks >= budgets.MaxObservations) || (budgets.Polling > 0 && back >= budgets.Polling) {
				r.Stalled = true
				r.Writes++
				r.bill(back + lat.Dynamo.Sample(rng) - invoke)
				return r
			}
			if changed {
				if !c.Orchestrated {
					r.Writes++ // written at once, after the next poll left
				}
				switch {
				case overlapped && next+rtt/2 > at:
					// Already on its way when the job changed: it watches
					// the new state.
					send = next
					continue
				case overlapped:
					// It saw the old state and answers the same change.
					r.GETs++
					polls++
				}
				if fits(back) {
					send = back
					continue
				}
			} else if wait > 0 && fits(next) {
				send = next
				continue
			} else if wait == 0 && fits(back) {
				send = back
				continue
			}
			// Hand over: the record is written with the follow-up.
			delay = delayAt(back)
			if c.Orchestrated {
				r.bill(back - invoke)
				t = back
				break
			}
			w := lat.Dynamo.Sample(rng)
			r.Writes++
			r.Sends++
			r.bill(back + w - invoke)
			t = back + w
			break
		}
	}
}

// Fixed polls at a fixed interval through genjobs' queues, without long
// polling: each poll is one message delayed by Interval, one invocation,
// a GetItem, one GET, a record write and the next message.
type Fixed struct {
	// Interval is the delay between polls (SQS delays are whole seconds).
	Interval time.Duration
}

// Name implements Observer.
func (f Fixed) Name() string { return "fixed " + fmtDuration(f.Interval) + " poller" }

// Observe implements Observer.
func (f Fixed) Observe(renderTime, _ time.Duration, lat Latencies, rng *rand.Rand) Render {
	r := Render{Time: renderTime, Detect: Never}
	t := lat.Dynamo.Sample(rng)
	for {
		if f.Interval > schedule.DefaultMaxQueueDelay {
			r.Schedules++
		}
		invoke := t + f.Interval + lat.Pickup.Sample(rng) + lat.Start.Sample(rng)
		rtt := lat.RoundTrip.Sample(rng)
		arrive := invoke + lat.Dynamo.Sample(rng) + rtt/2
		back := arrive + rtt/2
		w := lat.Dynamo.Sample(rng)
		r.GETs++
		r.Writes++
		r.Sends++
		r.bill(back + w - invoke)
		if arrive >= renderTime {
			r.Detect = back + w - renderTime
			return r
		}
		if back >= operation.DefaultBudgets.Polling {
			r.Stalled = true
			return r
		}
		t = back + w
	}
}

// FloorGETs is the fewest GETs any client of this API needs for a render
// of renderTime queued for queueFor: a long poll outstanding at every
// change, each waiting the full window, and the queued→running change
// ending one of them early: 1 + ⌈(T − q)/window⌉.
func FloorGETs(renderTime, queueFor time.Duration) float64 {
	q := min(queueFor, renderTime)
	return 1 + math.Ceil(float64(renderTime-q)/float64(genace.MaxWait))
}

// Outcome summarises a design over a workload.
type Outcome struct {
	// Strategy is the design's name.
	Strategy string
	// Renders holds each render's result, in workload order.
	Renders []Render
	// Per-render means of the Render counts.
	GETsPerRender, InvocationsPerRender, WritesPerRender, SendsPerRender, SchedulesPerRender float64
	// InVainShare is the share of renders with a long poll held in vain.
	InVainShare float64
	// BusyPerRender is the mean observe running time per render;
	// BilledSecondsPerRender and Billed100msPerRender its billed time.
	BusyPerRender          time.Duration
	BilledSecondsPerRender float64
	Billed100msPerRender   float64
	// P50, P99 and Max are detection latency percentiles (Never counts as
	// the largest).
	P50, P99, Max time.Duration
	// Stalled counts renders parked by a budget.
	Stalled int
}

// Simulate plays every render time of times against o, its latencies
// drawn from a source seeded with seed.
func Simulate(o Observer, times []time.Duration, queueFor time.Duration, lat Latencies, seed uint64) Outcome {
	rng := rngFor(seed)
	out := Outcome{Strategy: o.Name(), Renders: make([]Render, len(times))}
	detect := make([]time.Duration, len(times))
	var sum Render
	vain := 0
	for i, t := range times {
		r := o.Observe(t, queueFor, lat, rng)
		out.Renders[i] = r
		detect[i] = r.Detect
		sum.GETs += r.GETs
		sum.Invocations += r.Invocations
		sum.Writes += r.Writes
		sum.Sends += r.Sends
		sum.Schedules += r.Schedules
		sum.Busy += r.Busy
		sum.BilledMS += r.BilledMS
		sum.Billed100ms += r.Billed100ms
		if r.InVain > 0 {
			vain++
		}
		if r.Stalled {
			out.Stalled++
		}
	}
	if n := float64(len(times)); n > 0 {
		out.GETsPerRender = float64(sum.GETs) / n
		out.InvocationsPerRender = float64(sum.Invocations) / n
		out.WritesPerRender = float64(sum.Writes) / n
		out.SendsPerRender = float64(sum.Sends) / n
		out.SchedulesPerRender = float64(sum.Schedules) / n
		out.InVainShare = float64(vain) / n
		out.BusyPerRender = sum.Busy / time.Duration(len(times))
		out.BilledSecondsPerRender = float64(sum.BilledMS) / 1000 / n
		out.Billed100msPerRender = float64(sum.Billed100ms) / n
	}
	slices.Sort(detect)
	out.P50, out.P99 = Percentile(detect, 0.50), Percentile(detect, 0.99)
	if len(detect) > 0 {
		out.Max = detect[len(detect)-1]
	}
	return out
}

// Floor is the floor's observation of a workload: FloorGETs per render,
// and detection at a poll always outstanding (half a round trip and the
// record write after the finish).
func Floor(times []time.Duration, queueFor time.Duration, lat Latencies, seed uint64) Outcome {
	rng := rand.New(rand.NewPCG(seed, 0xf1002))
	out := Outcome{Strategy: "floor", Renders: make([]Render, len(times))}
	detect := make([]time.Duration, len(times))
	gets := 0.0
	for i, t := range times {
		g := FloorGETs(t, queueFor)
		gets += g
		d := lat.RoundTrip.Sample(rng)/2 + lat.Dynamo.Sample(rng)
		out.Renders[i] = Render{Time: t, GETs: int(g), Detect: d}
		detect[i] = d
	}
	if len(times) > 0 {
		out.GETsPerRender = gets / float64(len(times))
	}
	slices.Sort(detect)
	out.P50, out.P99 = Percentile(detect, 0.50), Percentile(detect, 0.99)
	if len(detect) > 0 {
		out.Max = detect[len(detect)-1]
	}
	return out
}

// Percentile returns the nearest-rank q-quantile of sorted (0 < q ≤ 1):
// the smallest value with at least q of the values at or below it.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
