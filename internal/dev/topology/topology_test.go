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
	"github.com/genjobs/genjobs/internal/sweep"
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
		{"window", func(tp *topology.Topology) { tp.Functions[1].Mappings[0].BatchingWindow = time.Second }, "function ObserveFunction: mapping"},
		{"concurrency", func(tp *topology.Topology) { tp.Functions[3].Mappings[1].MaxConcurrency = 1 }, "function TriageFunction: mapping"},
		{"unmapped queue", func(tp *topology.Topology) { tp.Functions[3].Mappings = tp.Functions[3].Mappings[:2] }, "consumes DeliverDLQ in the template, not in the topology"},
		{"extra mapping", func(tp *topology.Topology) {
			tp.Functions[4].Mappings = []topology.Mapping{{Queue: "DispatchQueue", BatchSize: 10}}
		}, "function SweepFunction: consumes DispatchQueue in the topology"},
		{"schedule", func(tp *topology.Topology) { tp.Functions[4].Schedule = "rate(1 minute)" }, "function SweepFunction: schedules"},
		{"name", func(tp *topology.Topology) { tp.Functions[0].Name = "dispatch" }, "function SubmitFunction: built from functions/submit"},
		{"missing function", func(tp *topology.Topology) { tp.Functions = tp.Functions[:4] }, "functions: "},
		{"claim timeout", func(tp *topology.Topology) { tp.Sweep.ClaimTimeout = time.Minute }, "parameter SweepClaimTimeoutSeconds: default"},
		{"overdue", func(tp *topology.Topology) { tp.Sweep.OverdueAfter = time.Minute }, "parameter SweepOverdueSeconds: default"},
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
		if _, ok := topology.Stack.Consumer(q.DeadLetter); !ok {
			t.Errorf("%s: nothing consumes its dead-letter queue %q", q.ID, q.DeadLetter)
		}
	}
}

// TestObserveFunctionHoldsAChain: one observe invocation chains long
// polls for up to observe's Chain, then writes and hands over, so the
// function's timeout must cover a chain and its last write, and every
// record of a batch must be observed at once (BATCH_CONCURRENCY's default
// is the mapping's batch size). The record is not written while a chain
// sees nothing change, so the chain must end before the sweep's default
// overdue threshold would re-arm it.
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
	if overdue := (sweep.Config{}).Defaults().OverdueAfter; obs.Chain >= overdue {
		t.Errorf("observe chains for %s, the sweep re-arms after %s", obs.Chain, overdue)
	}
	b := template(t).Parameters["BatchConcurrency"].Default
	if b == nil || *b != strconv.Itoa(f.Mappings[0].BatchSize) {
		t.Errorf("BATCH_CONCURRENCY default %v, batch size %d: keep them equal", b, f.Mappings[0].BatchSize)
	}
}

// TestSweepEvery: the sweep's cadence is read from its rate schedule,
// and a schedule that is not one is refused, naming it.
func TestSweepEvery(t *testing.T) {
	t.Parallel()
	if got, err := topology.Stack.SweepEvery(); err != nil || got != 5*time.Minute {
		t.Errorf("SweepEvery = %v, %v; want 5m", got, err)
	}
	for _, s := range []string{"rate(0 minutes)", "cron(0 * * * ? *)", "rate(5 fortnights)", ""} {
		if _, err := (topology.Function{Name: "sweep", Schedule: s}).Every(); err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("schedule %q: err %v, want one naming it", s, err)
		}
	}
}
