package topology_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/samlocal"
	"github.com/genjobs/genjobs/internal/dev/topology"
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
	c := topology.Topology{Queues: slices.Clone(topology.Stack.Queues), Functions: slices.Clone(topology.Stack.Functions)}
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
