package topology

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/dev/samlocal"
	"github.com/genjobs/genjobs/internal/observe"
)

// sqsQueueType is the CloudFormation type of a queue.
const sqsQueueType = "AWS::SQS::Queue"

// Check compares the topology with a parsed template.yaml and returns
// every difference: a queue or function one has and the other lacks, a
// visibility timeout, retention or redrive policy, a function's timeout,
// schedule or event source mapping that differs, or a sweep threshold
// whose template default differs from Sweep. The rest of the environment is
// checked by internal/dev/samlocal's tests, which start each function's
// configuration from what the template gives it.
func (t Topology) Check(tmpl *samlocal.Template) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	consumed := map[string]bool{}
	for _, f := range tmpl.Functions {
		for _, e := range f.Events {
			if e.Type == "SQS" {
				consumed[getAtt(e.Properties["Queue"])] = true
			}
		}
	}
	for _, id := range tmpl.OfType(sqsQueueType) {
		if _, ok := t.Queue(id); !ok && consumed[id] {
			bad("queue %s: a function consumes it in the template, the topology lacks it", id)
		}
	}
	for _, q := range t.Queues {
		r, ok := tmpl.Resources[q.ID]
		if !ok || r.Type != sqsQueueType {
			bad("queue %s: not an %s in the template", q.ID, sqsQueueType)
			continue
		}
		// SQS's default visibility timeout is 30 s.
		if got := seconds(r.Properties["VisibilityTimeout"], 30*time.Second); got != q.Visibility {
			bad("queue %s: VisibilityTimeout %v in the template, %v in the topology", q.ID, got, q.Visibility)
		}
		// SQS's default retention is 4 days.
		if got := seconds(r.Properties["MessageRetentionPeriod"], 4*24*time.Hour); got != q.Retention {
			bad("queue %s: MessageRetentionPeriod %v in the template, %v in the topology", q.ID, got, q.Retention)
		}
		rp, _ := r.Properties["RedrivePolicy"].(map[string]any)
		dlq, receives := getAtt(rp["deadLetterTargetArn"]), 0
		if rp != nil {
			receives, _ = strconv.Atoi(fmt.Sprint(rp["maxReceiveCount"]))
		}
		if dlq != q.DeadLetter || receives != q.MaxReceiveCount {
			bad("queue %s: redrives to %q after %d receives in the template, to %q after %d in the topology", q.ID, dlq, receives, q.DeadLetter, q.MaxReceiveCount)
		}
	}

	var ids, want []string
	for _, f := range tmpl.Functions {
		ids = append(ids, f.LogicalID)
	}
	for _, f := range t.Functions {
		want = append(want, f.ID)
	}
	if !slices.Equal(ids, want) {
		bad("functions: %v in the template, %v in the topology", ids, want)
	}
	for _, f := range t.Functions {
		tf, ok := tmpl.Function(f.ID)
		if !ok {
			continue
		}
		if tf.Dir() != f.Name {
			bad("function %s: built from functions/%s, named %s in the topology", f.ID, tf.Dir(), f.Name)
		}
		if tf.Timeout != f.Timeout {
			bad("function %s: Timeout %v in the template, %v in the topology", f.ID, tf.Timeout, f.Timeout)
		}
		if tf.MemoryMB != f.MemoryMB {
			bad("function %s: MemorySize %d in the template, %d in the topology", f.ID, tf.MemoryMB, f.MemoryMB)
		}
		// Local runs and the benchmarks observe with the handler's default
		// hold, which must be the one the template deploys.
		if v, ok := tf.Env[config.EnvObserveHold]; ok && fmt.Sprint(v) != strconv.Itoa(observe.DefaultHold) {
			bad("function %s: %s %v in the template, observe.DefaultHold %d", f.ID, config.EnvObserveHold, v, observe.DefaultHold)
		}
		// The sweep fits observe's concurrency within the ceiling and with
		// the hold that observe's mapping and function deploy.
		if v, ok := tf.Env[config.EnvObserveMaxConcurrency]; ok {
			if ceiling := t.MaxConcurrency(Observe); fmt.Sprint(v) != strconv.Itoa(ceiling) {
				bad("function %s: %s %v in the template, observe's MaximumConcurrency %d", f.ID, config.EnvObserveMaxConcurrency, v, ceiling)
			}
		}
		var schedules []string
		mappings := map[string]Mapping{}
		for _, e := range tf.Events {
			switch e.Type {
			case "Schedule":
				schedules = append(schedules, fmt.Sprint(e.Properties["Schedule"]))
			case "SQS":
				scaling, _ := e.Properties["ScalingConfig"].(map[string]any)
				batch, _ := tmpl.Resolve(e.Properties["BatchSize"], samlocal.Locals{}) // a parameter's default
				if e.Properties["BatchSize"] == nil {
					batch = "10"
				}
				m := Mapping{Queue: getAtt(e.Properties["Queue"]), BatchSize: number(batch, 10),
					BatchingWindow: seconds(e.Properties["MaximumBatchingWindowInSeconds"], 0), MaxConcurrency: number(scaling["MaximumConcurrency"], 0)}
				mappings[m.Queue] = m
			default:
				bad("function %s: event %s of type %s, which the topology cannot declare", f.ID, e.Name, e.Type)
			}
		}
		if want := []string{f.Schedule}; !slices.Equal(schedules, want) && (f.Schedule != "" || len(schedules) > 0) {
			bad("function %s: schedules %q in the template, %q in the topology", f.ID, schedules, f.Schedule)
		}
		for _, m := range f.Mappings {
			got, ok := mappings[m.Queue]
			delete(mappings, m.Queue)
			if !ok {
				bad("function %s: consumes %s in the topology, not in the template", f.ID, m.Queue)
			} else if got != m {
				bad("function %s: mapping %+v in the template, %+v in the topology", f.ID, got, m)
			}
		}
		for q := range mappings {
			bad("function %s: consumes %s in the template, not in the topology", f.ID, q)
		}
	}
	if sf, ok := t.Function(Sweep); ok {
		if tf, ok := tmpl.Function(sf.ID); ok {
			for _, s := range []struct {
				name string
				want time.Duration
			}{{config.EnvSweepClaim, t.Sweep.ClaimTimeout}, {config.EnvSweepOverdue, t.Sweep.OverdueAfter}} {
				v, err := tmpl.Resolve(tf.Env[s.name], samlocal.Locals{})
				if got := seconds(v, 0); err != nil || got != s.want {
					bad("function %s: %s is %q in the template, %v in the topology", sf.ID, s.name, v, s.want)
				}
			}
		}
	}
	return errs
}

// getAtt is the resource a {"Fn::GetAtt": [id, "Arn"]} names ("" for
// anything else).
func getAtt(v any) string {
	m, _ := v.(map[string]any)
	args, _ := m["Fn::GetAtt"].([]any)
	if len(args) == 2 && args[1] == "Arn" {
		id, _ := args[0].(string)
		return id
	}
	return ""
}

// number is a whole-number property, def when absent, -1 when malformed
// (so it differs from any topology).
func number(v any, def int) int {
	if v == nil {
		return def
	}
	n, err := strconv.Atoi(fmt.Sprint(v))
	if err != nil {
		return -1
	}
	return n
}

// seconds is a property in whole seconds.
func seconds(v any, def time.Duration) time.Duration {
	if v == nil {
		return def
	}
	return time.Duration(number(v, 0)) * time.Second
}
