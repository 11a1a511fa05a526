// Package templatecheck checks what no schema can know about the SAM template
// (template.yaml): how it meets the Go code. AWS's published SAM and
// CloudFormation resource schemas check the rest (schema.go). The rules
// hold the template against the code: which queue feeds which function
// and the variables each reads, visibility timeouts against function
// timeouts and the lease, partial batch failures, each role's actions
// against the SDK calls its function makes, the table against
// dynamo.TableDefinition and its expiry attribute, the build targets SAM's
// makefile build method calls, parameters against internal/config's
// bounds, the secret, and the alarms and dashboard against the metrics
// and log lines the code emits.
//
// The template is read twice. For the rules, goformation's intrinsics
// processor runs with the Ref, Fn::GetAtt and Fn::Sub handlers replaced,
// so that references survive as tokens (see Ref, GetAtt, Sub) instead of
// being resolved to sample values. For the schema, the same processor
// only turns short-form tags into their long form ({"Ref": ...}), which
// is the template as CloudFormation reads it.
package templatecheck

import (
	"encoding/json"
	"fmt"
	"github.com/genjobs/genjobs/internal/dev/samlocal"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/awslabs/goformation/v7/intrinsics"
)

// Ref is the token a `!Ref name` becomes.
func Ref(name string) string { return "Ref(" + name + ")" }

// GetAtt is the token a `!GetAtt resource.attribute` becomes.
func GetAtt(resource, attribute string) string { return "GetAtt(" + resource + "." + attribute + ")" }

// Sub is the token a `!Sub s` becomes. The list form's variables are
// written back into s as ${Resource} or ${Resource.Attribute}, so both
// forms of the same substitution give the same token.
func Sub(s string) string { return "Sub(" + s + ")" }

func invalid(fn string, input any) string { return fmt.Sprintf("Invalid(%s %v)", fn, input) }

func refHandler(_ string, input, _ any) any {
	if name, ok := input.(string); ok {
		return Ref(name)
	}
	return invalid("Ref", input)
}

func getAttHandler(_ string, input, _ any) any {
	switch v := input.(type) {
	case string: // short form: !GetAtt Resource.Attribute
		if res, attr, ok := strings.Cut(v, "."); ok {
			return GetAtt(res, attr)
		}
	case []any: // long form: Fn::GetAtt: [Resource, Attribute]
		if len(v) == 2 {
			res, ok1 := v[0].(string)
			attr, ok2 := v[1].(string)
			if ok1 && ok2 {
				return GetAtt(res, attr)
			}
		}
	}
	return invalid("Fn::GetAtt", input)
}

func subHandler(_ string, input, _ any) any {
	switch v := input.(type) {
	case string:
		return Sub(v)
	case []any:
		if len(v) != 2 {
			break
		}
		s, ok := v[0].(string)
		vars, ok2 := v[1].(map[string]any)
		if !ok || !ok2 {
			break
		}
		for name, val := range vars {
			repl := fmt.Sprint(val)
			if str, ok := val.(string); ok {
				if inner, ok := unwrap(str, "Ref"); ok {
					repl = "${" + inner + "}"
				} else if inner, ok := unwrap(str, "GetAtt"); ok {
					repl = "${" + inner + "}"
				}
			}
			s = strings.ReplaceAll(s, "${"+name+"}", repl)
		}
		return Sub(s)
	}
	return invalid("Fn::Sub", input)
}

// unwrap returns the argument of a token such as Ref(x).
func unwrap(token, fn string) (string, bool) {
	if strings.HasPrefix(token, fn+"(") && strings.HasSuffix(token, ")") {
		return token[len(fn)+1 : len(token)-1], true
	}
	return "", false
}

// goformationMu serialises intrinsics.ProcessYAML: it registers its YAML
// tag resolvers in a package-level map on every call, which races.
var goformationMu sync.Mutex

// doc is one parsed template.
type doc struct {
	path string
	// raw is the whole template as plain data, intrinsics as tokens.
	raw map[string]any
	// plain is the template as CloudFormation reads it, intrinsics as
	// their long-form objects ({"Ref": ...}), for the schema rule.
	plain map[string]any
	// resources are raw["Resources"], by logical id.
	resources map[string]map[string]any
	// globalFunction is Globals.Function (nil when absent).
	globalFunction map[string]any
}

// load reads and parses the template.
func load(path string) (*doc, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	opts := &intrinsics.ProcessorOptions{IntrinsicHandlerOverrides: map[string]intrinsics.IntrinsicHandler{
		"Ref": refHandler, "Fn::GetAtt": getAttHandler, "Fn::Sub": subHandler,
	}}
	goformationMu.Lock()
	processed, err := intrinsics.ProcessYAML(data, opts)
	var plain []byte
	if err == nil {
		plain, err = intrinsics.ProcessYAML(data, &intrinsics.ProcessorOptions{NoProcess: true})
	}
	goformationMu.Unlock()
	if err != nil {
		return nil, err
	}
	d := &doc{path: path, resources: map[string]map[string]any{}}
	if err := json.Unmarshal(processed, &d.raw); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(plain, &d.plain); err != nil {
		return nil, err
	}
	if len(mapOf(d.raw["Resources"])) == 0 {
		return nil, fmt.Errorf("no Resources")
	}
	for id, v := range mapOf(d.raw["Resources"]) {
		d.resources[id] = mapOf(v)
	}
	d.globalFunction = mapOf(mapOf(d.raw["Globals"])["Function"])
	return d, nil
}

// ofType lists the logical ids of resources of type typ, sorted.
func (d *doc) ofType(typ string) []string {
	var ids []string
	for id, r := range d.resources {
		if str(r["Type"]) == typ {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// props is a resource's raw Properties.
func (d *doc) props(id string) map[string]any { return mapOf(d.resources[id]["Properties"]) }

// functionProp is a function's property merged with Globals.Function the
// way SAM merges them: scalars (and intrinsics) and mismatched types take
// the function's value, maps merge key by key, lists concatenate.
func (d *doc) functionProp(id, key string) (any, bool) {
	local, hasLocal := d.props(id)[key]
	global, hasGlobal := d.globalFunction[key]
	switch {
	case hasLocal && hasGlobal:
		return samlocal.MergeGlobal(global, local), true
	case hasLocal:
		return local, true
	default:
		return global, hasGlobal
	}
}

// env is a function's environment after the Globals merge.
func (d *doc) env(id string) map[string]any {
	e, _ := d.functionProp(id, "Environment")
	return mapOf(mapOf(e)["Variables"])
}

// event is one SAM event source of a function, from the plain tree.
type event struct {
	name, typ string
	props     map[string]any
}

func (d *doc) events(id string) []event {
	var out []event
	for name, v := range mapOf(d.props(id)["Events"]) {
		e := mapOf(v)
		out = append(out, event{name: name, typ: str(e["Type"]), props: mapOf(e["Properties"])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// timeout is a function's Timeout in seconds: its own, else Globals', else
// SAM's default of 3.
func (d *doc) timeout(id string) int {
	if v, ok := d.functionProp(id, "Timeout"); ok {
		if n, ok := d.num(v); ok {
			return n
		}
	}
	return 3
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// num reads a whole number as num does, or a parameter's default through
// its !Ref (what a deployment without overrides takes).
func (d *doc) num(v any) (int, bool) {
	if ref, ok := unwrap(str(v), "Ref"); ok {
		p := mapOf(mapOf(d.raw["Parameters"])[ref])
		return num(p["Default"])
	}
	return num(v)
}

// num reads a whole number from a decoded JSON number or numeric string.
func num(v any) (int, bool) {
	switch n := v.(type) {
	case float64:
		if n == float64(int(n)) {
			return int(n), true
		}
	case string:
		var i int
		if _, err := fmt.Sscanf(n, "%d", &i); err == nil && fmt.Sprint(i) == n {
			return i, true
		}
	}
	return 0, false
}

// stringList reads a string or a list of strings (IAM's Action, Resource).
func stringList(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			out = append(out, fmt.Sprint(e))
		}
		return out
	}
	return nil
}
