package persistent_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/operation"
)

// A Genace that allows 6 API requests (POST or GET) per second and
// answers the rest 429 with Retry-After: 100 operations whose renders
// finish at once need 300 requests (a POST, observe's GET, deliver's GET),
// so the limit allows them 50 s. Every 429 is waited out for its
// Retry-After (plus jitter) and counts towards no failure cap, so all are
// delivered within 1.3 times that, none parked. Before, observation
// retried after 5 s doubling and delivery after 10 s doubling, ignoring
// the header, and counted the 429s as failures: 2.8 times the time.
func TestReadRateLimitIsWaitedOut(t *testing.T) {
	t.Parallel()
	const ops, perSecond = 100, 6
	cfg := genacesim.Config{RateLimitPerSecond: perSecond, DefaultModel: genacesim.ModelConfig{Price: 10, OutputCount: 1}}
	s := newStack(t, cfg, new(atomic.Bool))
	for i := range ops {
		s.submit(t, fmt.Sprintf("op-%03d", i))
	}
	allowed := time.Duration(3*ops/perSecond) * time.Second
	delivered := func() bool {
		for i := range ops {
			if s.rec(t, fmt.Sprintf("op-%03d", i)).Phase != operation.PhaseDelivered {
				return false
			}
		}
		return true
	}
	took := s.run(t, 10*allowed, delivered)
	parked := 0
	for i := range ops {
		rec := s.rec(t, fmt.Sprintf("op-%03d", i))
		if rec.Parked != nil {
			parked++
		}
		if rec.Counters.ReadFailures != 0 {
			t.Errorf("%s counts %d read failures after 429s only", rec.OperationID, rec.Counters.ReadFailures)
		}
	}
	ratio := float64(took) / float64(allowed)
	t.Logf("%d operations, %d requests/s: delivered in %s virtual, %.2f× the %s the limit allows; %d parked", ops, perSecond, took, ratio, allowed, parked)
	if !delivered() || parked != 0 || ratio > 1.3 {
		t.Fatalf("after %s (%.2f× the %s the limit allows): all delivered %t, %d parked; want all within 1.3×", took, ratio, allowed, delivered(), parked)
	}
}
