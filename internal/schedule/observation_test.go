package schedule_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/schedule"
)

// TestObservationLongestBoundsEveryDelay draws records of every age and
// every failure count, with jitter, and checks no delay the observer can
// ask for exceeds Longest: the observe function's dispatcher asks for the
// scheduler's settings from that bound alone.
func TestObservationLongestBoundsEveryDelay(t *testing.T) {
	t.Parallel()
	slow, err := schedule.ParsePolicies(`{"models":{"video":{"base":"2m","cap":"2h"}},"accounting":{"cap":"45m"}}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		ps      schedule.Policies
		longest time.Duration
	}{
		{"defaults", schedule.DefaultPolicies(), 30 * time.Minute},
		{"a slow model and a long accounting cap", slow, 2 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := schedule.NewObservation(tc.ps)
			r := rand.New(rand.NewPCG(7, 11))
			o.Rand = r.Float64
			if got := o.Longest(); got != tc.longest {
				t.Fatalf("Longest() = %v, want %v", got, tc.longest)
			}
			now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			for i := range 20000 {
				age := time.Duration(r.Int64N(int64(72 * time.Hour)))
				at := now.Add(-age)
				rec := &operation.Record{Model: []string{"image", "video"}[i%2],
					Timestamps: operation.Timestamps{Accepted: &at, RemoteFailed: &at}}
				for _, d := range []time.Duration{o.Next(rec, now), o.Accounting(rec, now), o.ReadRetry(1 + r.IntN(40))} {
					if d < 0 || d > o.Longest() {
						t.Fatalf("record aged %v: delay %v outside [0, %v]", age, d, o.Longest())
					}
				}
			}
		})
	}
}
