// Package topology declares the shape of the genjobs stack once, for the
// developer tooling: its queues and dead-letter queues, which function
// consumes which queue and how (batch size, batching window, maximum
// concurrency), each function's timeout and the environment its handler
// reads. A test holds it against template.yaml, so the local pipeline, the
// fault simulation, the benchmarks and the emulator runner, which all wire
// the stack from here (Local), cannot drift from what is deployed.
//
// The deployed functions never read this package: they take their
// settings from the environment the template gives them.
package topology

import (
	"fmt"
	"time"

	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/stack"
	"github.com/genjobs/genjobs/internal/sweep"
)

// MaxReceiveCount is every main queue's redrive policy: a message received
// this many times without being deleted goes to the dead-letter queue.
const MaxReceiveCount = 5

// Function names: the composition table's (internal/stack).
const (
	Submit  = stack.Submit
	Observe = stack.Observe
	Deliver = stack.Deliver
	Triage  = stack.Triage
	Sweep   = stack.Sweep
	Intake  = stack.Intake
)

// Queue is one SQS queue of the stack.
type Queue struct {
	// ID is the queue's logical id in template.yaml.
	ID string
	// Name is the queue's name on a local stack (the deployed name is the
	// stack's name followed by the same suffix).
	Name string
	// Action is what the queue carries ("" for a dead-letter queue, which
	// carries whatever its main queue gave up on).
	Action message.Action
	// Visibility is the queue's visibility timeout.
	Visibility time.Duration
	// Retention is how long the queue keeps a message.
	Retention time.Duration
	// DeadLetter is the logical id of the queue's dead-letter queue ("" for
	// none); MaxReceiveCount goes with it.
	DeadLetter      string
	MaxReceiveCount int
}

// Mapping is one SQS event source mapping of a function.
type Mapping struct {
	// Queue is the logical id of the queue consumed.
	Queue string
	// BatchSize is the most records per invocation.
	BatchSize int
	// BatchingWindow is how long Lambda gathers records before invoking
	// with a batch that is not full (MaximumBatchingWindowInSeconds).
	BatchingWindow time.Duration
	// MaxConcurrency is the most invocations the mapping runs at once
	// (ScalingConfig.MaximumConcurrency).
	MaxConcurrency int
}

// Function is one Lambda function of the stack.
type Function struct {
	// ID is the function's logical id in template.yaml.
	ID string
	// Name is its folder under functions/.
	Name string
	// Timeout is the function's timeout, MemoryMB its MemorySize.
	Timeout  time.Duration
	MemoryMB int
	// Mappings are its SQS event sources, in the template's order.
	Mappings []Mapping
	// Schedule is its Schedule event's expression ("" for none).
	Schedule string
	// Env is what its handler reads of the environment, the table's
	// (stack.Function.Needs): the template must give it exactly these
	// variables (internal/dev/samlocal's tests).
	Env config.Spec
}

// Topology is the whole stack's shape.
type Topology struct {
	// Queues are main queues, each followed by its dead-letter queue.
	Queues []Queue
	// Functions are in the template's order.
	Functions []Function
	// Sweep is the sweep's configuration: its claim timeout and overdue
	// threshold as the template's parameters default them (the template's
	// SWEEP_* variables). Its cadence is the sweep function's Schedule.
	Sweep sweep.Config
}

const (
	mainRetention = 4 * 24 * time.Hour
	dlqRetention  = 14 * 24 * time.Hour
)

// Stack is the deployed stack's shape, as template.yaml declares it; each
// function's Env comes from the composition table.
var Stack = withEnv(Topology{
	Queues: []Queue{
		{ID: "DispatchQueue", Name: "genjobs-dispatch", Action: message.ActionSubmitGeneration, Visibility: 6 * time.Minute, Retention: mainRetention, DeadLetter: "DispatchDLQ", MaxReceiveCount: MaxReceiveCount},
		{ID: "DispatchDLQ", Name: "genjobs-dispatch-dlq", Visibility: 3 * time.Minute, Retention: dlqRetention},
		{ID: "ObserveQueue", Name: "genjobs-observe", Action: message.ActionObserveGeneration, Visibility: 90 * time.Minute, Retention: mainRetention, DeadLetter: "ObserveDLQ", MaxReceiveCount: MaxReceiveCount},
		{ID: "ObserveDLQ", Name: "genjobs-observe-dlq", Visibility: 3 * time.Minute, Retention: dlqRetention},
		{ID: "DeliverQueue", Name: "genjobs-deliver", Action: message.ActionDeliverArtifacts, Visibility: 12 * time.Minute, Retention: mainRetention, DeadLetter: "DeliverDLQ", MaxReceiveCount: MaxReceiveCount},
		{ID: "DeliverDLQ", Name: "genjobs-deliver-dlq", Visibility: 3 * time.Minute, Retention: dlqRetention},
	},
	Functions: []Function{
		{ID: "SubmitFunction", Name: Submit, Timeout: time.Minute, MemoryMB: 128,
			Mappings: []Mapping{{Queue: "DispatchQueue", BatchSize: 10, BatchingWindow: time.Second, MaxConcurrency: 5}}},
		{ID: "ObserveFunction", Name: Observe, Timeout: 15 * time.Minute, MemoryMB: 128,
			Mappings: []Mapping{{Queue: "ObserveQueue", BatchSize: 10, BatchingWindow: 0, MaxConcurrency: 8}}},
		{ID: "DeliverFunction", Name: Deliver, Timeout: 2 * time.Minute, MemoryMB: 512,
			Mappings: []Mapping{{Queue: "DeliverQueue", BatchSize: 10, BatchingWindow: time.Second, MaxConcurrency: 20}}},
		{ID: "TriageFunction", Name: Triage, Timeout: 30 * time.Second, MemoryMB: 128,
			Mappings: []Mapping{
				{Queue: "DispatchDLQ", BatchSize: 10, BatchingWindow: 5 * time.Second, MaxConcurrency: 2},
				{Queue: "ObserveDLQ", BatchSize: 10, BatchingWindow: 5 * time.Second, MaxConcurrency: 2},
				{Queue: "DeliverDLQ", BatchSize: 10, BatchingWindow: 5 * time.Second, MaxConcurrency: 2},
			}},
		{ID: "SweepFunction", Name: Sweep, Timeout: time.Minute, MemoryMB: 128, Schedule: "rate(5 minutes)"},
		// Invoked through its function URL: no event source.
		{ID: "IntakeFunction", Name: Intake, Timeout: 10 * time.Second, MemoryMB: 128},
	},
	Sweep: sweep.Config{ClaimTimeout: 2 * time.Minute, OverdueAfter: 5 * time.Minute},
})

// withEnv fills each function's Env from the table (a function the table
// lacks keeps none, and TestFunctionsAreTheTable names it).
func withEnv(t Topology) Topology {
	for i, f := range t.Functions {
		if fn, ok := stack.Lookup(f.Name); ok {
			t.Functions[i].Env = fn.Needs
		}
	}
	return t
}

// Cadence is how often the function's Schedule, a rate expression
// ("rate(5 minutes)"), runs it; false for none or another expression.
func (f Function) Cadence() (time.Duration, bool) {
	var n int
	var unit string
	if _, err := fmt.Sscanf(f.Schedule, "rate(%d %s", &n, &unit); err != nil || n < 1 {
		return 0, false
	}
	per, ok := map[string]time.Duration{"minute)": time.Minute, "minutes)": time.Minute, "hour)": time.Hour, "hours)": time.Hour, "day)": 24 * time.Hour, "days)": 24 * time.Hour}[unit]
	return time.Duration(n) * per, ok
}

// Queue returns the queue with the logical id.
func (t Topology) Queue(id string) (Queue, bool) {
	for _, q := range t.Queues {
		if q.ID == id {
			return q, true
		}
	}
	return Queue{}, false
}

// Function returns the function with the name (its folder under
// functions/).
func (t Topology) Function(name string) (Function, bool) {
	for _, f := range t.Functions {
		if f.Name == name {
			return f, true
		}
	}
	return Function{}, false
}

// MaxConcurrency is the function's first event source mapping's
// MaximumConcurrency (0: it has none): for observe, the ceiling the sweep
// fits its concurrency under.
func (t Topology) MaxConcurrency(function string) int {
	if f, ok := t.Function(function); ok && len(f.Mappings) > 0 {
		return f.Mappings[0].MaxConcurrency
	}
	return 0
}
