// Package benchmark produces genjobs' comparative figures (`genjobs
// bench`, `make bench`): observation efficiency in virtual time, AWS
// requests and dollars per render against a Step Functions poller,
// handler throughput through the local pipeline, and cold starts under
// the Lambda Runtime Interface Emulator. The model figures are
// deterministic for a seed; the throughput and cold-start measurements
// are of this machine.
package benchmark

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"

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

// Overheads are the costs of one observation that are not the long poll.
type Overheads struct {
	// SQSLatency is the time from sending the message (or its delay
	// running out) to the handler starting: SQS delivery plus the event
	// source mapping's poll. Set it to include a batching window.
	SQSLatency time.Duration
	// RoundTrip is the handler's own time besides the long poll: the
	// Lambda invocation, the GET's two network legs, and the snapshot
	// write. Half of it runs before the GET reaches Genace, half after
	// the answer leaves.
	RoundTrip time.Duration
	// MaxQueueDelay is the longest delay SQS carries; a longer one is an
	// EventBridge Scheduler schedule.
	MaxQueueDelay time.Duration
}

// DefaultOverheads are the issue's: 20 ms SQS delivery, 50 ms Lambda and
// GET round trip.
func DefaultOverheads() Overheads {
	return Overheads{SQSLatency: 20 * time.Millisecond, RoundTrip: 50 * time.Millisecond, MaxQueueDelay: schedule.DefaultMaxQueueDelay}
}

// Strategy is how a client paces its GETs of one job.
type Strategy interface {
	// Name labels the strategy in the table and the plot.
	Name() string
	// First is the delay from acceptance to the first observation.
	First() time.Duration
	// Wait is the long poll the observation starting at age asks for,
	// sinceSnapshot after the previous snapshot was saved (0 means no
	// long poll).
	Wait(age, sinceSnapshot time.Duration) time.Duration
	// Next is the delay after the n-th observation (from 1), saved at age,
	// found the job still active.
	Next(age time.Duration, n int) time.Duration
	// Budgets bounds the observation of one job (zero: unbounded).
	Budgets() operation.Budgets
}

// epoch anchors the records the genjobs strategy hands to the real
// policy; only differences from it matter.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// benchModel is the model name on the synthetic records.
const benchModel = "bench-model"

// Genjobs is genjobs' own strategy: the delays of the real
// schedule.Observation (so schedule.Policy and its jitter) and the
// observe handler's long-poll rule (a long poll only when the previous
// snapshot is fresher than LongPoll, else an immediate read), with the
// observe handler's budgets.
type Genjobs struct {
	name    string
	obs     *schedule.Observation
	budgets operation.Budgets
}

// NewGenjobs returns the strategy for policy p, its jitter drawn from a
// source seeded with seed.
func NewGenjobs(name string, p schedule.Policy, seed uint64) *Genjobs {
	ps := schedule.DefaultPolicies()
	ps.Default = p
	obs := schedule.NewObservation(ps)
	obs.Rand = rand.New(rand.NewPCG(seed, 0x7177)).Float64
	return &Genjobs{name: name, obs: obs, budgets: obs.BudgetsFor(benchModel)}
}

// Name implements Strategy.
func (g *Genjobs) Name() string { return g.name }

// First implements Strategy: the submit handler schedules the first
// observation for right after acceptance.
func (g *Genjobs) First() time.Duration { return 0 }

// Wait implements Strategy with observe's window() rule: the model's long
// poll if the previous snapshot is at most that old, else 0; whole
// seconds, as the GET's wait parameter is. (window() also reads at once
// when the saved snapshot already shows success; here no observation
// follows a terminal snapshot, so that case never arises.)
func (g *Genjobs) Wait(_, sinceSnapshot time.Duration) time.Duration {
	w := g.obs.LongPoll(benchModel)
	if sinceSnapshot > w {
		w = 0
	}
	return max(0, w.Truncate(time.Second))
}

// Next implements Strategy with schedule.Observation.Next on a record
// accepted age ago.
func (g *Genjobs) Next(age time.Duration, _ int) time.Duration {
	accepted := epoch
	rec := operation.Record{Model: benchModel, Timestamps: operation.Timestamps{Accepted: &accepted}}
	return g.obs.Next(&rec, epoch.Add(age))
}

// Budgets implements Strategy with the observe handler's budgets.
func (g *Genjobs) Budgets() operation.Budgets { return g.budgets }

// Fixed polls at a fixed interval without long polling, the interval
// also before the first GET.
type Fixed struct {
	// Interval is the delay between GETs.
	Interval time.Duration
}

// Name implements Strategy.
func (f Fixed) Name() string { return "fixed " + fmtDuration(f.Interval) + " poller" }

// First implements Strategy.
func (f Fixed) First() time.Duration { return f.Interval }

// Wait implements Strategy: never a long poll.
func (Fixed) Wait(_, _ time.Duration) time.Duration { return 0 }

// Next implements Strategy.
func (f Fixed) Next(time.Duration, int) time.Duration { return f.Interval }

// Budgets implements Strategy: none.
func (Fixed) Budgets() operation.Budgets { return operation.Budgets{} }

// Exponential is the usual client's backoff without long polling: Base
// before the first GET, then doubling after each, capped at Cap.
type Exponential struct {
	// Base is the first delay.
	Base time.Duration
	// Cap bounds the delays.
	Cap time.Duration
}

// Name implements Strategy.
func (e Exponential) Name() string {
	return "backoff " + fmtDuration(e.Base) + " ×2 → " + fmtDuration(e.Cap) + " cap"
}

// First implements Strategy.
func (e Exponential) First() time.Duration { return e.Base }

// Wait implements Strategy: never a long poll.
func (Exponential) Wait(_, _ time.Duration) time.Duration { return 0 }

// Next implements Strategy: Base·2^n, at most Cap.
func (e Exponential) Next(_ time.Duration, n int) time.Duration {
	d := float64(e.Base) * math.Pow(2, float64(n))
	if !(d < float64(e.Cap)) {
		return e.Cap
	}
	return time.Duration(d)
}

// Budgets implements Strategy: none.
func (Exponential) Budgets() operation.Budgets { return operation.Budgets{} }

// Render is the outcome of observing one render.
type Render struct {
	// Time is the render time: acceptance to remote finish.
	Time time.Duration
	// GETs counts the observations' GETs (one each).
	GETs int
	// LongPolls counts GETs that asked for a wait; InVain those of them
	// that reached Genace after the job had finished, so they were held
	// for the whole wait (the job never changes again).
	LongPolls, InVain int
	// Detect is the time from remote finish to the local record holding
	// the terminal snapshot; +Inf when the job was never seen finished.
	Detect time.Duration
	// Busy is the observe function's summed running time: the round
	// trips and the long polls it held (what Lambda bills).
	Busy time.Duration
	// BilledMS is Busy as Lambda bills it: each invocation rounded up to
	// a whole millisecond.
	BilledMS int64
	// Schedules counts follow-ups delayed past MaxQueueDelay (EventBridge
	// Scheduler instead of SQS).
	Schedules int
	// Stalled is set when a budget ran out before the job finished (the
	// observe handler parks it for review).
	Stalled bool
}

// Never is the detection latency of a render that was never seen
// finished.
const Never = time.Duration(math.MaxInt64)

// Observe plays one render of length renderTime (queued for queueFor,
// clipped to it) against strategy s, event by event:
//
//   - an observation's message reaches the handler SQSLatency after it
//     was sent or its delay ran out; the GET reaches Genace RoundTrip/2
//     later;
//   - a GET with wait w that arrives at a answers at min(a+w, the next
//     state change after a) — and a job already finished at a never
//     changes again, so it is held for all of w; without wait it answers
//     at once;
//   - the snapshot is saved RoundTrip/2 after the answer; that is the
//     detection time of a terminal snapshot, and the moment the next
//     message is sent with the strategy's delay.
func Observe(s Strategy, renderTime, queueFor time.Duration, ov Overheads) Render {
	finish := renderTime
	queued := min(queueFor, renderTime)
	nextChange := func(t time.Duration) (time.Duration, bool) {
		switch {
		case t < queued:
			return queued, true
		case t < finish:
			return finish, true
		}
		return 0, false
	}
	half := ov.RoundTrip / 2
	b := s.Budgets()
	r := Render{Time: renderTime, Detect: Never}
	saved := time.Duration(0) // the submit handler saved the 202's snapshot at acceptance
	start := s.First() + ov.SQSLatency
	for n := 1; ; n++ {
		wait := s.Wait(start, start-saved)
		arrive := start + half
		answer := arrive
		if wait > 0 {
			r.LongPolls++
			answer = arrive + wait
			if at, ok := nextChange(arrive); ok {
				answer = min(answer, at)
			} else {
				r.InVain++
			}
		}
		saved = answer + half
		busy := saved - start
		r.GETs++
		r.Busy += busy
		r.BilledMS += int64((busy + time.Millisecond - 1) / time.Millisecond)
		if answer >= finish {
			r.Detect = saved - finish
			return r
		}
		if (b.MaxObservations > 0 && n >= b.MaxObservations) || (b.Polling > 0 && saved >= b.Polling) {
			r.Stalled = true
			return r
		}
		delay := s.Next(saved, n)
		if delay > ov.MaxQueueDelay {
			r.Schedules++
		}
		start = saved + delay + ov.SQSLatency
	}
}

// Outcome summarises a strategy over a workload.
type Outcome struct {
	// Strategy is the strategy's name.
	Strategy string
	// Renders holds each render's result, in workload order.
	Renders []Render
	// GETsPerRender, LongPollsPerRender, InVainPerRender and
	// SchedulesPerRender are means over the renders.
	GETsPerRender, LongPollsPerRender, InVainPerRender, SchedulesPerRender float64
	// BusyPerRender is the mean observe running time per render, and
	// BilledSecondsPerRender the mean billed time in seconds.
	BusyPerRender          time.Duration
	BilledSecondsPerRender float64
	// P50, P99 and Max are detection latency percentiles (Never counts as
	// the largest).
	P50, P99, Max time.Duration
	// Stalled counts renders parked by a budget.
	Stalled int
}

// Simulate plays every render time of times against s.
func Simulate(s Strategy, times []time.Duration, queueFor time.Duration, ov Overheads) Outcome {
	o := Outcome{Strategy: s.Name(), Renders: make([]Render, len(times))}
	detect := make([]time.Duration, len(times))
	var gets, lps, vain, sch int
	var busy time.Duration
	var billed int64
	for i, t := range times {
		r := Observe(s, t, queueFor, ov)
		o.Renders[i] = r
		detect[i] = r.Detect
		gets += r.GETs
		lps += r.LongPolls
		vain += r.InVain
		sch += r.Schedules
		busy += r.Busy
		billed += r.BilledMS
		if r.Stalled {
			o.Stalled++
		}
	}
	if n := float64(len(times)); n > 0 {
		o.GETsPerRender = float64(gets) / n
		o.LongPollsPerRender = float64(lps) / n
		o.InVainPerRender = float64(vain) / n
		o.SchedulesPerRender = float64(sch) / n
		o.BusyPerRender = busy / time.Duration(len(times))
		o.BilledSecondsPerRender = float64(billed) / 1000 / n
	}
	slices.Sort(detect)
	o.P50, o.P99 = Percentile(detect, 0.50), Percentile(detect, 0.99)
	if len(detect) > 0 {
		o.Max = detect[len(detect)-1]
	}
	return o
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
