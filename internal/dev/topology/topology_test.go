package topology_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/samlocal"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/stack"
)

func template(t *testing.T) *samlocal.Template {
	t.Helper()
	tmpl, err := samlocal.Load("../../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// TestStackMatchesTemplate: the declared topology is template.yaml's.
func TestStackMatchesTemplate(t *testing.T) {
	t.Parallel()
	for _, err := range topology.Stack.Check(template(t)) {
		t.Error(err)
	}
}

// TestFunctionsAreTheTable: the topology gives each function of the
// composition table (internal/stack), in its order, its deployed shape,
// and nothing else; so the table is the one list of functions, and
// TestStackMatchesTemplate holds both to template.yaml.
func TestFunctionsAreTheTable(t *testing.T) {
	t.Parallel()
	var table, topo []string
	for _, f := range stack.Functions {
		table = append(table, f.Name)
	}
	for _, f := range topology.Stack.Functions {
		topo = append(topo, f.Name)
		if fn, ok := stack.Lookup(f.Name); !ok || f.Env.Needs == nil || !slices.Equal(f.Env.Needs, fn.Needs.Needs) {
			t.Errorf("function %s: Env %v, the table's %v", f.Name, f.Env.Needs, fn.Needs.Needs)
		}
	}
	if !slices.Equal(table, topo) {
		t.Errorf("functions: %v in the table, %v in the topology", table, topo)
	}
}

// clone is a deep enough copy of the stack for one edit.
func clone() topology.Topology {
	c := topology.Topology{Queues: slices.Clone(topology.Stack.Queues), Functions: slices.Clone(topology.Stack.Functions), Sweep: topology.Stack.Sweep}
	for i, f := range c.Functions {
		c.Functions[i].Mappings = slices.Clone(f.Mappings)
	}
	return c
}

// TestCheckFindsDrift: each kind of drift between the topology and the
// template is reported, naming what drifted.
func TestCheckFindsDrift(t *testing.T) {
	t.Parallel()
	tmpl := template(t)
	cases := []struct {
		name string
		edit func(*topology.Topology)
		want string
	}{
		{"visibility", func(tp *topology.Topology) { tp.Queues[0].Visibility = time.Minute }, "queue DispatchQueue: VisibilityTimeout"},
		{"retention", func(tp *topology.Topology) { tp.Queues[1].Retention = time.Hour }, "queue DispatchDLQ: MessageRetentionPeriod"},
		{"receive count", func(tp *topology.Topology) { tp.Queues[2].MaxReceiveCount = 3 }, "queue ObserveQueue: redrives"},
		{"dead letter", func(tp *topology.Topology) { tp.Queues[4].DeadLetter = "ObserveDLQ" }, "queue DeliverQueue: redrives"},
		{"missing queue", func(tp *topology.Topology) { tp.Queues = tp.Queues[:5] }, "queue DeliverDLQ: a function consumes it"},
		{"unknown queue", func(tp *topology.Topology) { tp.Queues = append(tp.Queues, topology.Queue{ID: "Extra"}) }, "queue Extra: not an AWS::SQS::Queue"},
		{"timeout", func(tp *topology.Topology) { tp.Functions[2].Timeout = time.Minute }, "function DeliverFunction: Timeout"},
		{"batch size", func(tp *topology.Topology) { tp.Functions[0].Mappings[0].BatchSize = 5 }, "function SubmitFunction: mapping"},
		{"sweep overdue", func(tp *topology.Topology) { tp.Sweep.OverdueAfter = time.Minute }, "function SweepFunction: SWEEP_OVERDUE_SECONDS"},
		{"sweep claim", func(tp *topology.Topology) { tp.Sweep.ClaimTimeout = time.Minute }, "function SweepFunction: SWEEP_CLAIM_TIMEOUT_SECONDS"},
		{"window", func(tp *topology.Topology) { tp.Functions[1].Mappings[0].BatchingWindow = time.Second }, "function ObserveFunction: mapping"},
		{"concurrency", func(tp *topology.Topology) { tp.Functions[3].Mappings[1].MaxConcurrency = 1 }, "function TriageFunction: mapping"},
		{"unmapped queue", func(tp *topology.Topology) { tp.Functions[3].Mappings = tp.Functions[3].Mappings[:2] }, "consumes DeliverDLQ in the template, not in the topology"},
		{"extra mapping", func(tp *topology.Topology) {
			tp.Functions[4].Mappings = []topology.Mapping{{Queue: "DispatchQueue", BatchSize: 10}}
		}, "function SweepFunction: consumes DispatchQueue in the topology"},
		{"schedule", func(tp *topology.Topology) { tp.Functions[4].Schedule = "rate(1 minute)" }, "function SweepFunction: schedules"},
		{"name", func(tp *topology.Topology) { tp.Functions[0].Name = "dispatch" }, "function SubmitFunction: built from functions/submit"},
		{"missing function", func(tp *topology.Topology) { tp.Functions = tp.Functions[:4] }, "functions: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tp := clone()
			tc.edit(&tp)
			errs := tp.Check(tmpl)
			for _, err := range errs {
				if strings.Contains(err.Error(), tc.want) {
					return
				}
			}
			t.Errorf("drift not reported as %q; got %v", tc.want, errs)
		})
	}
}

// TestDeadLettersRedriveOnce: every main queue redrives after
// MaxReceiveCount receives to a dead-letter queue of the topology that a
// function consumes.
func TestDeadLettersRedriveOnce(t *testing.T) {
	t.Parallel()
	for _, q := range topology.Stack.Queues {
		if q.Action == "" {
			continue
		}
		if q.MaxReceiveCount != topology.MaxReceiveCount {
			t.Errorf("%s: MaxReceiveCount %d", q.ID, q.MaxReceiveCount)
		}
		if _, ok := topology.Stack.Queue(q.DeadLetter); !ok {
			t.Errorf("%s: dead-letter queue %q not declared", q.ID, q.DeadLetter)
		}
		consumes := func(f topology.Function) bool {
			return slices.ContainsFunc(f.Mappings, func(m topology.Mapping) bool { return m.Queue == q.DeadLetter })
		}
		if !slices.ContainsFunc(topology.Stack.Functions, consumes) {
			t.Errorf("%s: nothing consumes its dead-letter queue %q", q.ID, q.DeadLetter)
		}
	}
}

// TestObserveFunctionHoldsAChain: one observe invocation chains long
// polls until its deadline allows no more, writing every observe's Chain
// while nothing changes, then hands over; a timeout shorter than a Chain
// and its write would make every chain hand over before its first
// renewal, so the timeout must cover them, and every
// record of a batch must be observed at once (BATCH_CONCURRENCY's default
// is the mapping's batch size). The deployed settings pass the bounds
// the functions check at cold start (a chain and its last write end
// before the sweep's overdue threshold; the claim timeout exceeds
// submit's timeout).
func TestObserveFunctionHoldsAChain(t *testing.T) {
	t.Parallel()
	obs := observe.Config{}.Defaults()
	f, ok := topology.Stack.Function(topology.Observe)
	if !ok || len(f.Mappings) != 1 {
		t.Fatalf("observe function %+v", f)
	}
	if need := obs.Chain + obs.Overhead; f.Timeout < need {
		t.Errorf("observe timeout %s; a chain of %s and its last write need %s", f.Timeout, obs.Chain, need)
	}
	b := template(t).Parameters["BatchConcurrency"].Default
	if b == nil || *b != strconv.Itoa(f.Mappings[0].BatchSize) {
		t.Errorf("BATCH_CONCURRENCY default %v, batch size %d: keep them equal", b, f.Mappings[0].BatchSize)
	}
	// The deployed settings pass the functions' own cold-start checks.
	q, _ := topology.Stack.Queue(f.Mappings[0].Queue)
	concurrency, _ := strconv.Atoi(*b)
	if err := (observe.Config{Visibility: q.Visibility, Concurrency: concurrency, OverdueAfter: topology.Stack.Sweep.OverdueAfter}).Check(f.Mappings[0].BatchSize); err != nil {
		t.Error(err)
	}
	submit, _ := topology.Stack.Function(topology.Submit)
	if err := topology.Stack.Sweep.Check(submit.Timeout); err != nil {
		t.Error(err)
	}
}

// TestCadence reads a rate expression, and refuses anything else.
func TestCadence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		schedule string
		want     time.Duration
		ok       bool
	}{
		{"rate(5 minutes)", 5 * time.Minute, true},
		{"rate(1 hour)", time.Hour, true},
		{"rate(2 days)", 48 * time.Hour, true},
		{"cron(0 12 * * ? *)", 0, false},
		{"rate(0 minutes)", 0, false},
		{"", 0, false},
	} {
		t.Run(tc.schedule, func(t *testing.T) {
			t.Parallel()
			got, ok := topology.Function{Schedule: tc.schedule}.Cadence()
			if got != tc.want || ok != tc.ok {
				t.Fatalf("Cadence(%q) = %v, %t; want %v, %t", tc.schedule, got, ok, tc.want, tc.ok)
			}
		})
	}
	if f, _ := topology.Stack.Function(topology.Sweep); f.Schedule != "" {
		if _, ok := f.Cadence(); !ok {
			t.Fatalf("the sweep's schedule %q has no cadence", f.Schedule)
		}
	}
}
