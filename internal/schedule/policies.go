package schedule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
)

// Policies holds the observation policy per Genace model, because models
// render at very different speeds (an image in seconds, a video in many
// minutes) and one schedule would either waste GETs on the slow ones or
// deliver the fast ones late.
type Policies struct {
	// Default applies to every model without an entry in Models.
	Default Policy
	// Models maps a model name to its policy.
	Models map[string]Policy
	// Accounting paces the observations of a failed job's refund: Genace
	// books it some time after the failure, with no "young job" phase
	// worth watching closely, so it is a plain backoff.
	Accounting Backoff
}

// For returns the policy for model, or Default when it has none.
func (ps Policies) For(model string) Policy {
	if p, ok := ps.Models[model]; ok {
		return p
	}
	return ps.Default
}

// DefaultPolicies are the values used where the configuration says
// nothing: long polls of Genace's whole 30 s window, chained back to back
// by the observe handler (one outstanding at every moment: a render is
// seen within a round trip of its change, however long it runs), for as
// long as the polling budget lets an active job run
// (operation.DefaultBudgets.Polling); a job still active then is parked
// for review. Backing off instead, as the defaults did after an hour,
// saved GETs only by seeing long renders late: a 2-hour render was
// detected up to 28 minutes after it finished (docs/benchmarks.md). The
// backoff (from 30 s, doubling up to 30 min, ±20 %) applies to a model
// whose policy sets a shorter Immediate, and a failed job's refund is
// re-read on Accounting's backoff.
func DefaultPolicies() Policies {
	return Policies{
		Default: Policy{
			LongPoll:   MaxLongPoll,
			Immediate:  operation.DefaultBudgets.Polling,
			Base:       30 * time.Second,
			Cap:        30 * time.Minute,
			Multiplier: 2,
			Jitter:     0.2,
		},
		Accounting: Backoff{
			Base:       time.Minute,
			Cap:        30 * time.Minute,
			Multiplier: 2,
			Jitter:     0.2,
		},
	}
}

// Validate checks every policy and names the one at fault.
func (ps Policies) Validate() error {
	var errs []error
	if err := ps.Default.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("default: %w", err))
	}
	names := make([]string, 0, len(ps.Models))
	for name := range ps.Models {
		names = append(names, name)
	}
	sort.Strings(names) // a stable message for the same configuration
	for _, name := range names {
		if strings.TrimSpace(name) == "" {
			errs = append(errs, errors.New("models: empty model name"))
			continue
		}
		if err := ps.Models[name].Validate(); err != nil {
			errs = append(errs, fmt.Errorf("models[%q]: %w", name, err))
		}
	}
	if err := ps.Accounting.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("accounting: %w", err))
	}
	return errors.Join(errs...)
}

// ParsePolicies reads the policies from JSON, typically an environment
// variable, so a model's schedule is changed by configuration, not a
// release. Durations are Go duration strings ("25s", "15m"). Every field
// is optional: "default" is laid over DefaultPolicies(), each model over
// the resulting default, and "accounting" over the default accounting, so
// a model entry names only what differs. Decoding is strict — an unknown
// field (a typo such as "longpoll") is an error, not silently ignored — and
// the result is validated. Empty or all-blank text gives DefaultPolicies().
//
//	{"default": {"immediate": "10m"},
//	 "models": {"genace-video-2": {"base": "1m", "cap": "1h"}},
//	 "accounting": {"base": "2m"}}
func ParsePolicies(jsonText string) (Policies, error) {
	ps := DefaultPolicies()
	if strings.TrimSpace(jsonText) == "" {
		return ps, nil
	}
	dec := json.NewDecoder(strings.NewReader(jsonText))
	dec.DisallowUnknownFields()
	var w policiesJSON
	if err := dec.Decode(&w); err != nil {
		return Policies{}, fmt.Errorf("schedule policies: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Policies{}, errors.New("schedule policies: trailing data after the JSON object")
	}
	ps.Default = w.Default.over(ps.Default)
	if len(w.Models) > 0 {
		ps.Models = make(map[string]Policy, len(w.Models))
		for name, m := range w.Models {
			ps.Models[name] = m.over(ps.Default)
		}
	}
	ps.Accounting = w.Accounting.over(ps.Accounting)
	if err := ps.Validate(); err != nil {
		return Policies{}, fmt.Errorf("schedule policies: %w", err)
	}
	return ps, nil
}

// The wire forms use pointers so an absent field inherits.
type policiesJSON struct {
	Default    *policyJSON            `json:"default"`
	Models     map[string]*policyJSON `json:"models"`
	Accounting *backoffJSON           `json:"accounting"`
}

type policyJSON struct {
	LongPoll   *duration `json:"long_poll"`
	Immediate  *duration `json:"immediate"`
	Base       *duration `json:"base"`
	Cap        *duration `json:"cap"`
	Multiplier *float64  `json:"multiplier"`
	Jitter     *float64  `json:"jitter"`
}

type backoffJSON struct {
	Base       *duration `json:"base"`
	Cap        *duration `json:"cap"`
	Multiplier *float64  `json:"multiplier"`
	Jitter     *float64  `json:"jitter"`
}

func (w *policyJSON) over(p Policy) Policy {
	if w == nil {
		return p
	}
	setDuration(&p.LongPoll, w.LongPoll)
	setDuration(&p.Immediate, w.Immediate)
	setDuration(&p.Base, w.Base)
	setDuration(&p.Cap, w.Cap)
	setFloat(&p.Multiplier, w.Multiplier)
	setFloat(&p.Jitter, w.Jitter)
	return p
}

func (w *backoffJSON) over(b Backoff) Backoff {
	if w == nil {
		return b
	}
	setDuration(&b.Base, w.Base)
	setDuration(&b.Cap, w.Cap)
	setFloat(&b.Multiplier, w.Multiplier)
	setFloat(&b.Jitter, w.Jitter)
	return b
}

func setDuration(dst *time.Duration, v *duration) {
	if v != nil {
		*dst = time.Duration(*v)
	}
}

func setFloat(dst *float64, v *float64) {
	if v != nil {
		*dst = *v
	}
}

// duration decodes only from a Go duration string: a bare number would be
// ambiguous (seconds? nanoseconds?), so it is refused.
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '"' {
		return fmt.Errorf("duration %s: want a string such as \"25s\"", bytes.TrimSpace(b))
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = duration(v)
	return nil
}
