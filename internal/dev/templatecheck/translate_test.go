package templatecheck

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/samlocal"
	"github.com/genjobs/genjobs/internal/dev/testenv"
	"github.com/genjobs/genjobs/internal/dev/topology"
)

// translateScript runs SAM's own translator (the aws-sam-translator
// package, what CloudFormation's AWS::Serverless transform runs) on a
// template and prints the CloudFormation it generates. CodeUri becomes an
// s3:// location, as after `sam package`, which the translator requires.
// Exit status 3: samtranslator cannot be imported.
const translateScript = `
import json, sys
try:
    from samtranslator.translator.transform import transform
    from samtranslator.yaml_helper import yaml_parse
except ImportError as e:
    print(e, file=sys.stderr)
    sys.exit(3)

class NoManagedPolicies:
    # Every function has its own role: no SAM policy needs IAM's list.
    def load(self):
        return {}

with open(sys.argv[1]) as f:
    tmpl = yaml_parse(f.read())
for section in [tmpl.get("Globals", {}).get("Function", {})] + [
        r.get("Properties", {}) for r in tmpl["Resources"].values() if r.get("Type") == "AWS::Serverless::Function"]:
    if "CodeUri" in section:
        section["CodeUri"] = "s3://genjobs-translate/bootstrap.zip"
json.dump(transform(tmpl, {}, NoManagedPolicies()), sys.stdout)
`

// translate returns the template at path as SAM's translator turns it
// into CloudFormation, every scalar as its text (as samlocal reads them).
func translate(t *testing.T, path string) map[string]any {
	t.Helper()
	python := testenv.Python(t, "samtranslator")
	script := filepath.Join(t.TempDir(), "translate.py")
	if err := os.WriteFile(script, []byte(translateScript), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, script, path)
	cmd.Env = append(os.Environ(), "AWS_DEFAULT_REGION=us-east-1", "AWS_REGION=us-east-1")
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 3 {
		testenv.Skip(t, "python3 has no samtranslator (pip package aws-sam-translator): "+string(exit.Stderr))
	}
	if err != nil {
		t.Fatalf("SAM's translator refuses %s: %v\n%s", path, err, exitStderr(err))
	}
	var cfn map[string]any
	if err := json.Unmarshal(out, &cfn); err != nil {
		t.Fatal(err)
	}
	return mapOf(text(cfn))
}

// getAttArn is the resource a {"Fn::GetAtt": [id, "Arn"]} names.
func getAttArn(v any) string {
	if args := listOf(mapOf(v)["Fn::GetAtt"]); len(args) == 2 && args[1] == "Arn" {
		return str(args[0])
	}
	return ""
}

func exitStderr(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(exit.Stderr)
	}
	return ""
}

// text turns JSON numbers and booleans into their text.
func text(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = text(e)
		}
	case []any:
		for i, e := range x {
			x[i] = text(e)
		}
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	return v
}

// TestTranslate holds what SAM's translator generates from template.yaml
// against the topology, the allow-list and samlocal's reading: each
// function's event source mappings and schedule, each role's grants, and
// each function's properties after the Globals merge.
func TestTranslate(t *testing.T) {
	t.Parallel()
	for _, p := range translationProblems(t, realTemplate) {
		t.Error(p)
	}
}

// TestTranslateFindsDrift: broken copies whose translation differs from
// the topology, the allow-list or samlocal's merge are reported.
func TestTranslateFindsDrift(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ copy, want string }{
		{"batch-failures-deliver-unreported", "DeliverFunctionDeliver: FunctionResponseTypes"},
		{"visibility-globals-timeout", "TriageFunction: Timeout 45 s"},
		{"least-privilege-triage-sends", "grants sqs:SendMessage on GetAtt(DispatchQueue.Arn)"},
		{"cfnlint-triage-concurrency-below-2", "TriageFunction: event source mappings"},
	} {
		t.Run(tc.copy, func(t *testing.T) {
			t.Parallel()
			problems := translationProblems(t, filepath.Join(brokenDir, tc.copy+".yaml"))
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("no problem mentions %q:\n%s", tc.want, strings.Join(problems, "\n"))
			}
		})
	}
}

// translationProblems translates the template at path and lists where the
// result differs from what the stack must be.
func translationProblems(t *testing.T, path string) []string {
	t.Helper()
	cfn := translate(t, path)
	tmpl, err := samlocal.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	resources := map[string]map[string]any{}
	for id, r := range mapOf(cfn["Resources"]) {
		resources[id] = mapOf(r)
		if typ := str(mapOf(r)["Type"]); typ == "AWS::Serverless::Function" || typ == "" {
			bad("%s: type %q left after the transform", id, typ)
		}
	}
	ofType := func(typ string) []string {
		var ids []string
		for id, r := range resources {
			if str(r["Type"]) == typ {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		return ids
	}
	props := func(id string) map[string]any { return mapOf(resources[id]["Properties"]) }
	arn := func(id string) map[string]any { return map[string]any{"Fn::GetAtt": []any{id, "Arn"}} }
	// param reads a number, through a !Ref to the parameter's default.
	param := func(v any) string {
		if s, err := tmpl.Resolve(v, samlocal.Locals{}); err == nil {
			return s
		}
		return fmt.Sprint(v)
	}

	var ids []string
	for _, f := range topology.Stack.Functions {
		ids = append(ids, f.ID)
	}
	if got := ofType("AWS::Lambda::Function"); !slices.Equal(got, slices.Sorted(slices.Values(ids))) {
		bad("functions %v, the topology's %v", got, ids)
	}

	{
		got := map[string][]topology.Mapping{}
		for _, id := range ofType("AWS::Lambda::EventSourceMapping") {
			p := props(id)
			fn, _ := mapOf(p["FunctionName"])["Ref"].(string)
			queue := getAttArn(p["EventSourceArn"])
			if !reflect.DeepEqual(p["FunctionResponseTypes"], []any{"ReportBatchItemFailures"}) {
				bad("%s: FunctionResponseTypes %v, want [ReportBatchItemFailures]", id, p["FunctionResponseTypes"])
			}
			batch, _ := strconv.Atoi(param(p["BatchSize"]))
			window, _ := strconv.Atoi(str(p["MaximumBatchingWindowInSeconds"]))
			concurrency, _ := strconv.Atoi(str(mapOf(p["ScalingConfig"])["MaximumConcurrency"]))
			got[fn] = append(got[fn], topology.Mapping{Queue: queue, BatchSize: batch,
				BatchingWindow: time.Duration(window) * time.Second, MaxConcurrency: concurrency})
		}
		for _, f := range topology.Stack.Functions {
			want := slices.Clone(f.Mappings)
			byQueue := func(a, b topology.Mapping) int { return cmp.Compare(a.Queue, b.Queue) }
			slices.SortFunc(want, byQueue)
			slices.SortFunc(got[f.ID], byQueue)
			if !slices.Equal(got[f.ID], want) {
				bad("%s: event source mappings %+v, the topology's %+v", f.ID, got[f.ID], want)
			}
			delete(got, f.ID)
		}
		for fn, m := range got {
			bad("mappings %+v of %q, which the topology does not know", m, fn)
		}
	}

	{
		got := map[string][]string{}
		for _, id := range ofType("AWS::Events::Rule") {
			for _, target := range listOf(props(id)["Targets"]) {
				fn := getAttArn(mapOf(target)["Arn"])
				got[fn] = append(got[fn], str(props(id)["ScheduleExpression"]))
			}
		}
		for _, f := range topology.Stack.Functions {
			var want []string
			if f.Schedule != "" {
				want = []string{f.Schedule}
			}
			if !slices.Equal(got[f.ID], want) {
				bad("%s: schedules %q, the topology's %q", f.ID, got[f.ID], want)
			}
		}
		// Lambda drops a failed asynchronous run unless it has an
		// on-failure destination, which SAM moves to its own resource.
		sweep, _ := topology.Stack.Function(topology.Sweep)
		destination := false
		for _, id := range ofType("AWS::Lambda::EventInvokeConfig") {
			p := props(id)
			destination = destination || mapOf(p["FunctionName"])["Ref"] == sweep.ID &&
				getAttArn(mapOf(mapOf(p["DestinationConfig"])["OnFailure"])["Destination"]) == sweepFailuresID
		}
		if !destination {
			bad("no AWS::Lambda::EventInvokeConfig sends %s's failed runs to %s", sweep.ID, sweepFailuresID)
		}
	}

	{
		// The roles pass through the transform; SAM generates none (a
		// function without Role would get AWS's managed policies).
		if got, want := ofType("AWS::IAM::Role"), slices.Sorted(maps.Keys(allowed)); !slices.Equal(got, want) {
			bad("roles %v, the allow-list's %v", got, want)
		}
		for _, f := range topology.Stack.Functions {
			if got, want := props(f.ID)["Role"], arn(functions[f.ID].role); !reflect.DeepEqual(got, want) {
				bad("%s: Role %v, want %v", f.ID, got, want)
			}
		}
		d := &doc{raw: mapOf(tokens(cfn)), resources: map[string]map[string]any{}}
		for id, r := range mapOf(d.raw["Resources"]) {
			d.resources[id] = mapOf(r)
		}
		c := &checker{doc: d}
		c.leastPrivilege()
		for _, p := range c.problems {
			bad("%v", p)
		}
	}

	{
		for _, f := range topology.Stack.Functions {
			got := props(f.ID)
			for _, key := range []string{"Runtime", "Architectures", "Handler", "Timeout", "MemorySize", "Environment", "LoggingConfig", "RecursiveLoop", "Description", "FunctionName"} {
				want, ok := tmpl.Prop(f.ID, key)
				if !ok {
					want = nil
				}
				if !reflect.DeepEqual(got[key], want) {
					bad("%s %s: SAM makes it %v, samlocal reads %v", f.ID, key, got[key], want)
				}
			}
			sf, _ := tmpl.Function(f.ID)
			if timeout := param(got["Timeout"]); timeout != strconv.Itoa(int(f.Timeout.Seconds())) || sf.Timeout != f.Timeout {
				bad("%s: Timeout %s s (samlocal %v), the topology's %v", f.ID, timeout, sf.Timeout, f.Timeout)
			}
			if memory := str(got["MemorySize"]); memory != strconv.Itoa(sf.MemoryMB) {
				bad("%s: MemorySize %s, samlocal reads %d", f.ID, memory, sf.MemoryMB)
			}
		}
	}
	return problems
}
