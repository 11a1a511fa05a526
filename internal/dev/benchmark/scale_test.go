package benchmark

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/operation"
)

// scalePerRender are a render's requests as the counting run gives them
// (about), for the table's arithmetic.
var scalePerRender = Requests{SQSSend: 3.4, SQSReceive: 3.4, SQSDelete: 3.4, DynamoGet: 3.4, DynamoPut: 6.4, RRU: 5.4, WRU: 12, IndexWRU: 5}

// TestScaleTableFollowsTheStack holds the paper table to the stack it
// reads: observe's need is one invocation per batch of renders in
// flight, the caps are the template's, the rates grow with the load, and
// what breaks first moves when a cap is raised.
func TestScaleTableFollowsTheStack(t *testing.T) {
	t.Parallel()
	in := DefaultScaleInputs(templateFunctions(t), scalePerRender)
	obs, _ := in.Topology.Function(topology.Observe)
	m := obs.Mappings[0]

	raised := DefaultScaleInputs(templateFunctions(t), scalePerRender)
	raised.Topology.Functions = append([]topology.Function(nil), in.Topology.Functions...)
	for i, f := range raised.Topology.Functions {
		if f.Name == topology.Observe {
			f.Mappings = []topology.Mapping{m}
			f.Mappings[0].MaxConcurrency = 100000
			raised.Topology.Functions[i] = f
		}
	}
	// deliver as the template once capped it: 5 × 10 copies of 200 ms.
	capped := DefaultScaleInputs(templateFunctions(t), scalePerRender)
	capped.Topology.Functions = append([]topology.Function(nil), in.Topology.Functions...)
	for i, f := range capped.Topology.Functions {
		if f.Name == topology.Deliver {
			f.Mappings = append([]topology.Mapping(nil), f.Mappings...)
			f.Mappings[0].MaxConcurrency = 5
			capped.Topology.Functions[i] = f
		}
	}
	tests := []struct {
		name     string
		in       ScaleInputs
		inFlight int
		breaks   []string // each must appear
		holds    []string // none may appear
	}{
		{"100 fits", in, 100, nil, []string{"MaximumConcurrency", "edge", "account", "delivery", "shards"}},
		{"1k fits", in, 1000, nil, []string{"MaximumConcurrency", "edge", "account", "delivery", "shards"}},
		{"5k is at observe's edge", in, 5000, []string{"at the edge", "hold 10 of 10 records"}, []string{"MaximumConcurrency", "account", "delivery", "shards"}},
		{"10k hits observe's cap", in, 10000, []string{"MaximumConcurrency", "account's 1000"}, []string{"delivery", "shards"}},
		{"100k hits observe and the account", in, 100000, []string{"MaximumConcurrency", "account's 1000"}, []string{"delivery needs", "shards"}},
		{"10k with observe uncapped still needs the account", raised, 10000, []string{"account's 1000"}, []string{"MaximumConcurrency"}},
		{"100k outruns a delivery capped at 5", capped, 100000, []string{"delivery needs 13 invocations, capped at 5"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := ScaleTable(tc.in, tc.inFlight)[0]
			if want := (tc.inFlight + m.BatchSize - 1) / m.BatchSize; r.ObserveNeed != want {
				t.Errorf("observe needs %d invocations, want %d (one per batch of %d)", r.ObserveNeed, want, m.BatchSize)
			}
			if r.LongPolls != tc.inFlight || r.AccountLimit != 1000 {
				t.Errorf("long polls %d, account limit %d", r.LongPolls, r.AccountLimit)
			}
			for _, s := range tc.breaks {
				if !strings.Contains(r.Breaks, s) {
					t.Errorf("breaks %q, want it to name %q", r.Breaks, s)
				}
			}
			for _, s := range tc.holds {
				if strings.Contains(r.Breaks, s) {
					t.Errorf("breaks %q names %q, which holds", r.Breaks, s)
				}
			}
		})
	}
	rows := ScaleTable(in, 1000, 100000)
	for _, f := range []struct {
		name       string
		small, big float64
	}{{"GET/s", rows[0].GetsPerSec, rows[1].GetsPerSec}, {"SQS/s", rows[0].SQSPerSec, rows[1].SQSPerSec}, {"WCU/s", rows[0].WCUPerSec, rows[1].WCUPerSec}, {"$/h", rows[0].DollarsPerHour, rows[1].DollarsPerHour}} {
		if math.Abs(f.big/f.small-100) > 0.5 {
			t.Errorf("%s: %.1f at 1k, %.1f at 100k: not linear in the load", f.name, f.small, f.big)
		}
	}
	// Every render holds a long poll and a POST: GETs per render above
	// the floor's queued poll, one delivery read and one window.
	if g := rows[0].GetsPerSec / rows[0].PostsPerSec; g < 3 || g > 12 {
		t.Errorf("%.2f GETs per render", g)
	}
}

// TestScaleSimulationCounts runs the scale simulation at 500 renders in
// flight and holds its counters to what must be true: every render
// delivered once with one POST, submit's batches full (all dispatched at
// once), observe batching many records per invocation, all renders under
// observation at once.
func TestScaleSimulationCounts(t *testing.T) {
	t.Parallel()
	const n = 500
	res, err := RunScaleSimulation(context.Background(), n, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Scale
	if s == nil {
		t.Fatal("no scale figures")
	}
	if len(res.Violations) > 0 || res.Phases[operation.PhaseDelivered] != n || s.Delivered != n {
		t.Fatalf("delivered %d (phases %v, counted %d), violations %v", res.Phases[operation.PhaseDelivered], res.Phases, s.Delivered, res.Violations)
	}
	if s.Posts != n || res.Posts != n {
		t.Errorf("%d POSTs counted, %d at Genace, want %d", s.Posts, res.Posts, n)
	}
	if s.Gets != int64(res.Gets) || s.Gets < 2*n {
		t.Errorf("%d GETs counted, %d at Genace", s.Gets, res.Gets)
	}
	sub, _ := topology.Stack.Function(topology.Submit)
	if got := s.Functions[topology.Submit]; got.Quantile(0.5) != sub.Mappings[0].BatchSize || got.Records != n {
		t.Errorf("submit: p50 %d records per invocation, %d records; want full batches of %d", got.Quantile(0.5), got.Records, sub.Mappings[0].BatchSize)
	}
	if obs := s.Functions[topology.Observe]; obs.Mean() <= 1 || obs.Quantile(0.99) < 2 {
		t.Errorf("observe: %.2f records per invocation (p99 %d) with %d in flight", obs.Mean(), obs.Quantile(0.99), n)
	}
	if s.PeakObserving != n {
		t.Errorf("peak renders under observation %d, want all %d (accepted at once)", s.PeakObserving, n)
	}
	if s.Writes != res.Writes || s.Writes < 5*n {
		t.Errorf("%d writes counted, %d recorded", s.Writes, res.Writes)
	}
	if sqs := s.SQSSend + s.SQSReceive + s.SQSDelete; s.SQSReceive != res.Invocations[topology.Submit]+res.Invocations[topology.Observe]+res.Invocations[topology.Deliver] || sqs < 3*n {
		t.Errorf("SQS: %d receives for invocations %v, %d requests", s.SQSReceive, res.Invocations, sqs)
	}
	if s.PeakPostsPerSec != n {
		t.Errorf("peak %d POSTs/s, want all %d in the first second", s.PeakPostsPerSec, n)
	}
	if s.LastDelivered <= 0 || s.DeliveredP50 > s.DeliveredP99 || s.DeliveredP99 > s.LastDelivered {
		t.Errorf("delivery times p50 %s p99 %s last %s", s.DeliveredP50, s.DeliveredP99, s.LastDelivered)
	}
}
