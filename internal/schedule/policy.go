// Package schedule decides when the next look at an operation happens and
// delivers the message that triggers it: through SQS's own delay when the
// wait is short, through a one-time EventBridge Scheduler schedule when it
// is longer than SQS allows. Every delivery path is idempotent under retry,
// because a handler that fails after sending is run again with the same
// envelope.
package schedule

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// MaxLongPoll is the longest wait Genace grants a job GET; a longer
// LongPoll would be cut short by the server and mislead the arithmetic
// (observations per render ≈ render time / LongPoll).
const MaxLongPoll = 30 * time.Second

// Policy says how often a render job is observed. A young job is watched
// closely because most renders finish within minutes and a prompt
// delivery is the point; an old one is checked ever more rarely because it
// is either stuck or slow, and GETs cost quota.
type Policy struct {
	// LongPoll is how long each observation's GET waits on Genace for the
	// job to change state. The long poll returns early on any change, so
	// detection stays fast while GETs per render stay at about
	// render time / LongPoll. At most MaxLongPoll (Genace's limit).
	LongPoll time.Duration
	// Immediate is how long after acceptance (the moment Genace accepted
	// the job) observations run back to back, with delay 0 between them,
	// each holding a long poll of LongPoll.
	Immediate time.Duration
	// Base is the first delay once the job is older than Immediate.
	Base time.Duration
	// Cap bounds every delay, jitter included, so an old job is still
	// looked at regularly.
	Cap time.Duration
	// Multiplier grows the delay after each backed-off observation (at
	// least 1; 1 means a fixed interval of Base).
	Multiplier float64
	// Jitter spreads each delay uniformly over ±Jitter of its nominal
	// value (0 ≤ Jitter < 1), so operations accepted together do not
	// observe in lockstep forever.
	Jitter float64
}

// Next returns the delay before the next observation of a job accepted
// sinceAccepted ago. observationsSinceBackoff counts the observations
// already made after Immediate ran out (0 for the first backed-off one);
// the nominal delay is Base·Multiplier^n, capped at Cap. rnd supplies the
// jitter as a number in [0, 1) — pass rand.New(src).Float64 for a
// deterministic sequence; nil uses math/rand/v2's global source.
func (p Policy) Next(sinceAccepted time.Duration, observationsSinceBackoff int, rnd func() float64) time.Duration {
	if sinceAccepted < p.Immediate {
		return 0
	}
	return p.Backoff().Delay(observationsSinceBackoff, rnd)
}

// Backoff is the part of the policy that applies once Immediate has run
// out.
func (p Policy) Backoff() Backoff {
	return Backoff{Base: p.Base, Cap: p.Cap, Multiplier: p.Multiplier, Jitter: p.Jitter}
}

// RetryAfter returns how long to wait after Genace answered "busy, retry
// after `after`" (429 or 503 with Retry-After). Never less than the
// server asked — retrying earlier only earns another refusal — plus up to
// Jitter of it (at least up to a second) so the operations throttled
// together do not all come back in the same instant. Without a usable
// Retry-After (after ≤ 0) it waits Base instead. Cap does not apply: the
// server's word beats our preference.
func (p Policy) RetryAfter(after time.Duration, rnd func() float64) time.Duration {
	if after <= 0 {
		after = p.Base
	}
	spread := time.Duration(float64(after) * p.Jitter)
	if spread < time.Second {
		spread = time.Second
	}
	return after + time.Duration(draw(rnd)*float64(spread))
}

// Validate reports every problem with the policy at once, so a bad
// configuration is fixed in one round.
func (p Policy) Validate() error {
	var errs []error
	if p.LongPoll < 0 || p.LongPoll > MaxLongPoll {
		errs = append(errs, fmt.Errorf("long_poll %v outside 0..%v (Genace's longest wait)", p.LongPoll, MaxLongPoll))
	}
	if p.Immediate < 0 {
		errs = append(errs, fmt.Errorf("immediate %v is negative", p.Immediate))
	}
	if p.Immediate > 0 && p.LongPoll == 0 {
		errs = append(errs, errors.New("long_poll is 0 while immediate is positive: back-to-back observations without a long poll would hammer Genace"))
	}
	if err := p.Backoff().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Backoff is a capped exponential backoff with jitter: the nominal delay
// before attempt n (from 0) is Base·Multiplier^n, at most Cap, spread by
// ±Jitter. It serves the backed-off phase of Policy and the observation
// of a failed job's refund, where there is no "young job" phase.
type Backoff struct {
	// Base is the first delay.
	Base time.Duration
	// Cap bounds every delay, jitter included.
	Cap time.Duration
	// Multiplier grows the delay per attempt (at least 1).
	Multiplier float64
	// Jitter spreads each delay over ±Jitter of its nominal value.
	Jitter float64
}

// Delay returns the delay before attempt n (0 for the first). The nominal
// delay is min(Base·Multiplier^n, Cap); the result is drawn uniformly
// from [nominal·(1−Jitter), min(nominal·(1+Jitter), Cap)], so Cap is a hard
// bound and the delays at the cap still spread out instead of piling up on
// one value. rnd is as for Policy.Next. A negative n counts as 0.
func (b Backoff) Delay(n int, rnd func() float64) time.Duration {
	if n < 0 {
		n = 0
	}
	limit := float64(b.Cap)
	nominal := float64(b.Base) * math.Pow(b.Multiplier, float64(n))
	// Also catches +Inf from a large n, and NaN from a zero-value policy.
	if !(nominal < limit) {
		nominal = limit
	}
	lo := nominal * (1 - b.Jitter)
	hi := math.Min(nominal*(1+b.Jitter), limit)
	if hi < lo {
		hi = lo
	}
	return time.Duration(lo + draw(rnd)*(hi-lo))
}

// Validate reports every problem with the backoff at once.
func (b Backoff) Validate() error {
	var errs []error
	if b.Base <= 0 {
		errs = append(errs, fmt.Errorf("base %v must be positive: a zero delay would observe in a tight loop", b.Base))
	}
	if b.Cap < b.Base {
		errs = append(errs, fmt.Errorf("cap %v is less than base %v", b.Cap, b.Base))
	}
	if !(b.Multiplier >= 1) || math.IsInf(b.Multiplier, 0) {
		errs = append(errs, fmt.Errorf("multiplier %v must be a finite number ≥ 1: delays must not shrink", b.Multiplier))
	}
	if !(b.Jitter >= 0 && b.Jitter < 1) {
		errs = append(errs, fmt.Errorf("jitter %v outside [0, 1)", b.Jitter))
	}
	return errors.Join(errs...)
}

// draw returns a number in [0, 1) from rnd, or from the global source when
// rnd is nil. Out-of-range values from a careless rnd are clamped rather
// than trusted, so a bad source cannot produce a delay outside the policy.
func draw(rnd func() float64) float64 {
	if rnd == nil {
		return rand.Float64()
	}
	r := rnd()
	switch {
	case math.IsNaN(r) || r < 0:
		return 0
	case r >= 1:
		return math.Nextafter(1, 0)
	}
	return r
}

// WaitOut is the delay after a 429 whose Retry-After was after: never
// less than the server asked (an earlier retry only earns another 429),
// in whole seconds as SQS delays and Retry-After both are, plus a whole
// number of seconds drawn from 0 to jitter of it (at least 1 s; none when
// jitter is 0), so that operations throttled together come back spread
// over the next seconds rather than all in one: sub-second jitter would
// be rounded away by the queue's delay, every retry would land on the
// same second and the next would go idle. At most limit (the longest
// delay the caller's sender takes: waiting less than asked costs one more
// 429, which counts towards nothing). A missing hint (after ≤ 0) waits a
// second. rnd is as for Policy.Next.
func WaitOut(after time.Duration, jitter float64, limit time.Duration, rnd func() float64) time.Duration {
	secs := max(int64((after+time.Second-1)/time.Second), 1)
	spread := int64(0)
	if jitter > 0 {
		spread = max(int64(math.Round(jitter*float64(secs))), 1)
	}
	d := time.Duration(secs+int64(draw(rnd)*float64(spread+1))) * time.Second
	return min(d, limit)
}
