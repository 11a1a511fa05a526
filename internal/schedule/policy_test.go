package schedule_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/schedule"
)

// fixed returns an rnd that always yields r: 0 is the low edge of the
// jitter range, 0.5 its middle, and just under 1 its high edge.
func fixed(r float64) func() float64 { return func() float64 { return r } }

const almostOne = 0.9999999999

func testPolicy() schedule.Policy {
	return schedule.Policy{
		LongPoll:   25 * time.Second,
		Immediate:  15 * time.Minute,
		Base:       30 * time.Second,
		Cap:        30 * time.Minute,
		Multiplier: 2,
		Jitter:     0.2,
	}
}

func TestPolicyNext(t *testing.T) {
	t.Parallel()
	p := testPolicy()
	noJitter := p
	noJitter.Jitter = 0
	cases := []struct {
		name  string
		p     schedule.Policy
		since time.Duration
		n     int
		r     float64
		want  time.Duration
	}{
		{"just accepted: back to back", p, 0, 0, 0.5, 0},
		{"young job ignores n", p, 14 * time.Minute, 7, 0.9, 0},
		{"last instant of Immediate", p, 15*time.Minute - time.Nanosecond, 0, 0.5, 0},
		{"Immediate over: base", noJitter, 15 * time.Minute, 0, 0.5, 30 * time.Second},
		{"doubles", noJitter, time.Hour, 1, 0.5, time.Minute},
		{"doubles again", noJitter, time.Hour, 3, 0.5, 4 * time.Minute},
		{"reaches cap", noJitter, time.Hour, 6, 0.5, 30 * time.Minute},
		{"stays at cap", noJitter, time.Hour, 1000, 0.5, 30 * time.Minute},
		{"negative n counts as 0", noJitter, time.Hour, -3, 0.5, 30 * time.Second},
		{"jitter middle is nominal", p, time.Hour, 0, 0.5, 30 * time.Second},
		{"jitter low edge", p, time.Hour, 0, 0, 24 * time.Second},
		{"jitter high edge", p, time.Hour, 0, almostOne, 36 * time.Second},
		{"cap is a hard bound", p, time.Hour, 10, almostOne, 30 * time.Minute},
		{"at cap jitter only goes down", p, time.Hour, 10, 0, 24 * time.Minute},
		{"at cap middle of [0.8, 1]·cap", p, time.Hour, 10, 0.5, 27 * time.Minute},
		{"rnd out of range is clamped", p, time.Hour, 0, 7, 36 * time.Second},
		{"negative rnd is clamped", p, time.Hour, 0, -1, 24 * time.Second},
		{"multiplier 1 is a fixed interval", schedule.Policy{Base: time.Minute, Cap: time.Hour, Multiplier: 1}, 0, 9, 0.5, time.Minute},
		{"no Immediate phase", schedule.Policy{Base: time.Minute, Cap: time.Hour, Multiplier: 2}, 0, 0, 0.5, time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := tc.p.Next(tc.since, tc.n, fixed(tc.r))
			// A nanosecond of float rounding is not a behaviour.
			if diff := got - tc.want; diff < -time.Microsecond || diff > time.Microsecond {
				t.Errorf("Next(%v, %d, %v) = %v, want %v", tc.since, tc.n, tc.r, got, tc.want)
			}
		})
	}
}

// TestPolicyNextDeterministicAndBounded: the same seed gives the same
// delays, and no draw leaves [nominal·(1−J), min(nominal·(1+J), Cap)].
func TestPolicyNextDeterministicAndBounded(t *testing.T) {
	t.Parallel()
	p := testPolicy()
	a := rand.New(rand.NewPCG(1, 2))
	b := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 2000; n++ {
		k := n % 12
		da, db := p.Next(time.Hour, k, a.Float64), p.Next(time.Hour, k, b.Float64)
		if da != db {
			t.Fatalf("same seed, n=%d: %v vs %v", k, da, db)
		}
		nominal := min(p.Base<<k, p.Cap)
		lo := time.Duration(float64(nominal) * (1 - p.Jitter))
		hi := min(time.Duration(float64(nominal)*(1+p.Jitter)), p.Cap)
		if da < lo-time.Microsecond || da > hi {
			t.Fatalf("n=%d: %v outside [%v, %v]", k, da, lo, hi)
		}
	}
	// nil rnd draws from the global source and stays in range too.
	if d := p.Next(time.Hour, 0, nil); d < 24*time.Second || d > 36*time.Second {
		t.Errorf("nil rnd gave %v", d)
	}
}

func TestBackoffAccountingDelay(t *testing.T) {
	t.Parallel()
	b := schedule.DefaultPolicies().Accounting
	b.Jitter = 0
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	for n, w := range want {
		if got := b.Delay(n, fixed(0.5)); got != w {
			t.Errorf("Delay(%d) = %v, want %v", n, got, w)
		}
	}
}

func TestPolicyRetryAfter(t *testing.T) {
	t.Parallel()
	p := testPolicy() // Jitter 0.2, Base 30 s
	cases := []struct {
		name  string
		after time.Duration
		r     float64
		want  time.Duration
	}{
		{"never earlier than asked", 10 * time.Second, 0, 10 * time.Second},
		{"spread of at least a second", 2 * time.Second, 0.5, 2*time.Second + 500*time.Millisecond},
		{"spread is Jitter of a long wait", 100 * time.Second, 0.5, 110 * time.Second},
		{"server beats Cap", 2 * time.Hour, 0, 2 * time.Hour},
		{"no usable Retry-After: Base", 0, 0, 30 * time.Second},
		{"negative Retry-After: Base", -time.Second, 0.5, 33 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := p.RetryAfter(tc.after, fixed(tc.r))
			if diff := got - tc.want; diff < -time.Microsecond || diff > time.Microsecond {
				t.Errorf("RetryAfter(%v) = %v, want %v", tc.after, got, tc.want)
			}
			if tc.after > 0 && got < tc.after {
				t.Errorf("RetryAfter(%v) = %v, earlier than the server asked", tc.after, got)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	mod := func(f func(*schedule.Policy)) schedule.Policy { p := testPolicy(); f(&p); return p }
	cases := []struct {
		name    string
		p       schedule.Policy
		problem string // "" means valid
	}{
		{"defaults", schedule.DefaultPolicies().Default, ""},
		{"no immediate phase, no long poll", mod(func(p *schedule.Policy) { p.Immediate, p.LongPoll = 0, 0 }), ""},
		{"long poll at Genace's limit", mod(func(p *schedule.Policy) { p.LongPoll = 30 * time.Second }), ""},
		{"jitter 0", mod(func(p *schedule.Policy) { p.Jitter = 0 }), ""},
		{"cap equals base", mod(func(p *schedule.Policy) { p.Cap = p.Base }), ""},
		{"long poll over 30 s", mod(func(p *schedule.Policy) { p.LongPoll = 31 * time.Second }), "long_poll 31s outside"},
		{"negative long poll", mod(func(p *schedule.Policy) { p.LongPoll = -time.Second }), "long_poll -1s outside"},
		{"negative immediate", mod(func(p *schedule.Policy) { p.Immediate = -time.Second }), "immediate -1s is negative"},
		{"immediate without long poll", mod(func(p *schedule.Policy) { p.LongPoll = 0 }), "hammer Genace"},
		{"zero base", mod(func(p *schedule.Policy) { p.Base = 0 }), "base 0s must be positive"},
		{"negative base", mod(func(p *schedule.Policy) { p.Base = -time.Second }), "base -1s must be positive"},
		{"cap below base", mod(func(p *schedule.Policy) { p.Cap = 10 * time.Second }), "cap 10s is less than base 30s"},
		{"multiplier below 1", mod(func(p *schedule.Policy) { p.Multiplier = 0.5 }), "multiplier 0.5"},
		{"negative jitter", mod(func(p *schedule.Policy) { p.Jitter = -0.1 }), "jitter -0.1 outside [0, 1)"},
		{"jitter 1", mod(func(p *schedule.Policy) { p.Jitter = 1 }), "jitter 1 outside [0, 1)"},
		{"zero value", schedule.Policy{}, "base 0s must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.p.Validate()
			if tc.problem == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Fatalf("Validate() = %v, want an error mentioning %q", err, tc.problem)
			}
		})
	}
	// Every problem is reported at once.
	err := schedule.Policy{LongPoll: time.Minute, Jitter: 2, Multiplier: 0}.Validate()
	for _, want := range []string{"long_poll", "base", "multiplier", "jitter"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("combined error %v lacks %q", err, want)
		}
	}
}

func TestDefaultPolicies(t *testing.T) {
	t.Parallel()
	ps := schedule.DefaultPolicies()
	if err := ps.Validate(); err != nil {
		t.Fatal(err)
	}
	want := testPolicy()
	// Genace's whole window, chained back to back for the whole polling
	// budget: a long render is seen as soon as a short one.
	want.Immediate = operation.DefaultBudgets.Polling
	want.LongPoll = schedule.MaxLongPoll
	if b := operation.DefaultBudgets; float64(b.MaxObservations) < 1.05*float64(b.Polling/want.LongPoll) {
		t.Errorf("MaxObservations %d would park a job long-polled within its %v budget", b.MaxObservations, b.Polling)
	}
	if ps.Default != want {
		t.Errorf("Default = %+v, want %+v", ps.Default, want)
	}
	if ps.For("any-model") != ps.Default {
		t.Error("a model without an entry must get Default")
	}
}

func TestParsePolicies(t *testing.T) {
	t.Parallel()
	def := schedule.DefaultPolicies()

	t.Run("empty text gives the defaults", func(t *testing.T) {
		t.Parallel()
		for _, text := range []string{"", "  \n"} {
			ps, err := schedule.ParsePolicies(text)
			if err != nil || ps.Default != def.Default || ps.Accounting != def.Accounting || len(ps.Models) != 0 {
				t.Errorf("ParsePolicies(%q) = %+v, %v", text, ps, err)
			}
		}
	})

	t.Run("fields inherit: default over defaults, models over default", func(t *testing.T) {
		t.Parallel()
		ps, err := schedule.ParsePolicies(`{
			"default": {"immediate": "10m", "jitter": 0.1},
			"models": {
				"genace-video-2": {"base": "1m", "cap": "1h", "long_poll": "30s"},
				"genace-image-1": {}
			},
			"accounting": {"base": "2m"}
		}`)
		if err != nil {
			t.Fatal(err)
		}
		wantDefault := def.Default
		wantDefault.Immediate, wantDefault.Jitter = 10*time.Minute, 0.1
		if ps.Default != wantDefault {
			t.Errorf("Default = %+v, want %+v", ps.Default, wantDefault)
		}
		wantVideo := wantDefault
		wantVideo.Base, wantVideo.Cap, wantVideo.LongPoll = time.Minute, time.Hour, 30*time.Second
		if got := ps.For("genace-video-2"); got != wantVideo {
			t.Errorf("video = %+v, want %+v", got, wantVideo)
		}
		if got := ps.For("genace-image-1"); got != wantDefault {
			t.Errorf("image = %+v, want the default", got)
		}
		if got := ps.For("unlisted"); got != wantDefault {
			t.Errorf("unlisted = %+v, want the default", got)
		}
		wantAcc := def.Accounting
		wantAcc.Base = 2 * time.Minute
		if ps.Accounting != wantAcc {
			t.Errorf("Accounting = %+v, want %+v", ps.Accounting, wantAcc)
		}
	})

	bad := []struct {
		name, text, problem string
	}{
		{"unknown top-level field", `{"defaults": {}}`, `unknown field "defaults"`},
		{"unknown policy field", `{"default": {"longpoll": "25s"}}`, `unknown field "longpoll"`},
		{"unknown accounting field", `{"accounting": {"immediate": "1m"}}`, `unknown field "immediate"`},
		{"duration as a number", `{"default": {"base": 30}}`, `want a string such as "25s"`},
		{"unparseable duration", `{"default": {"base": "30 seconds"}}`, `duration "30 seconds"`},
		{"not JSON", `base=30s`, "schedule policies"},
		{"trailing data", `{} {}`, "trailing data"},
		{"invalid default", `{"default": {"jitter": 1.5}}`, "default: jitter 1.5 outside [0, 1)"},
		{"invalid model names it", `{"models": {"slow": {"long_poll": "45s"}}}`, `models["slow"]: long_poll 45s outside`},
		{"cap below base after inheriting", `{"models": {"m": {"base": "1h"}}}`, `models["m"]: cap 30m0s is less than base 1h0m0s`},
		{"empty model name", `{"models": {"": {}}}`, "empty model name"},
		{"invalid accounting", `{"accounting": {"multiplier": 0}}`, "accounting: multiplier 0"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := schedule.ParsePolicies(tc.text)
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Fatalf("ParsePolicies(%s) = %v, want an error mentioning %q", tc.text, err, tc.problem)
			}
		})
	}
}

func BenchmarkPolicyNext(b *testing.B) {
	p := schedule.DefaultPolicies().Default
	rnd := rand.New(rand.NewPCG(1, 2)).Float64
	b.ReportAllocs()
	var sink time.Duration
	for i := 0; b.Loop(); i++ {
		sink += p.Next(time.Hour, i%16, rnd)
	}
	_ = sink
}

func TestWaitOut(t *testing.T) {
	t.Parallel()
	cases := []struct {
		after  time.Duration
		jitter float64
		limit  time.Duration
		r      float64
		want   time.Duration
	}{
		{time.Second, 0.2, time.Hour, 0, time.Second},
		{time.Second, 0.2, time.Hour, 0.99, 2 * time.Second},
		{300 * time.Millisecond, 0.2, time.Hour, 0, time.Second}, // never under a second
		{0, 0.2, time.Hour, 0, time.Second},                      // no hint
		{30 * time.Second, 0.2, time.Hour, 0.99, 36 * time.Second},
		{30 * time.Second, 0.2, time.Hour, 0.5, 33 * time.Second},
		{30 * time.Second, 0, time.Hour, 0.99, 30 * time.Second}, // no jitter: exactly Retry-After
		{time.Hour, 0.2, 15 * time.Minute, 0, 15 * time.Minute},  // the sender's limit
	}
	for _, c := range cases {
		if got := schedule.WaitOut(c.after, c.jitter, c.limit, func() float64 { return c.r }); got != c.want {
			t.Errorf("WaitOut(%s, %v, %s) at %v = %s, want %s", c.after, c.jitter, c.limit, c.r, got, c.want)
		}
	}
}
