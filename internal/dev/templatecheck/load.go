// Package templatecheck checks what no linter can know about the SAM
// template (template.yaml): how it meets the Go code. cfn-lint and SAM's
// own translator check that it is valid SAM and CloudFormation (TestCfnLint,
// TestTranslate); these rules hold it against the code: which queue feeds
// which function and the variables each reads, visibility timeouts against
// function timeouts and the lease, partial batch failures, each role's
// actions against the SDK calls its function makes, the table against
// dynamo.TableDefinition and its expiry attribute, the build targets SAM's
// makefile build method calls, parameters against internal/config's
// bounds, the secret, and the alarms and dashboard against the metrics and
// log lines the code emits.
//
// The template is read by internal/dev/samlocal, the one reader, whose
// long-form intrinsics are turned into tokens (see Ref, GetAtt, Sub) so the
// rules compare references as strings.
package templatecheck

import (
	"fmt"
	"slices"
	"strings"

	"github.com/genjobs/genjobs/internal/dev/samlocal"
)

// Ref is the token a `!Ref name` becomes.
func Ref(name string) string { return "Ref(" + name + ")" }

// GetAtt is the token a `!GetAtt resource.attribute` becomes.
func GetAtt(resource, attribute string) string { return "GetAtt(" + resource + "." + attribute + ")" }

// Sub is the token a `!Sub s` becomes. The list form's variables are
// written back into s as ${Resource} or ${Resource.Attribute}, so both
// forms of the same substitution give the same token.
func Sub(s string) string { return "Sub(" + s + ")" }

// tokens is v with every Ref, Fn::GetAtt and Fn::Sub (samlocal's long
// form) replaced by its token; anything malformed stays as it was, and so
// matches no rule's expectation.
func tokens(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 1 {
			if t, ok := tokenOf(x); ok {
				return t
			}
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = tokens(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = tokens(e)
		}
		return out
	}
	return v
}

func tokenOf(call map[string]any) (string, bool) {
	if name, ok := call["Ref"].(string); ok {
		return Ref(name), true
	}
	if args, ok := call["Fn::GetAtt"].([]any); ok && len(args) == 2 {
		res, ok1 := args[0].(string)
		attr, ok2 := args[1].(string)
		return GetAtt(res, attr), ok1 && ok2
	}
	switch arg := tokens(call["Fn::Sub"]).(type) {
	case string:
		return Sub(arg), true
	case []any:
		s, ok := arg[0].(string)
		vars, ok2 := arg[len(arg)-1].(map[string]any)
		if len(arg) != 2 || !ok || !ok2 {
			return "", false
		}
		for name, val := range vars {
			repl := fmt.Sprint(val)
			if inner, ok := unwrap(str(val), "Ref"); ok {
				repl = "${" + inner + "}"
			} else if inner, ok := unwrap(str(val), "GetAtt"); ok {
				repl = "${" + inner + "}"
			}
			s = strings.ReplaceAll(s, "${"+name+"}", repl)
		}
		return Sub(s), true
	}
	return "", false
}

// unwrap returns the argument of a token such as Ref(x).
func unwrap(token, fn string) (string, bool) {
	if strings.HasPrefix(token, fn+"(") && strings.HasSuffix(token, ")") {
		return token[len(fn)+1 : len(token)-1], true
	}
	return "", false
}

// doc is one parsed template.
type doc struct {
	path string
	tmpl *samlocal.Template
	// raw is the whole template, intrinsics as tokens.
	raw map[string]any
	// resources are raw["Resources"], by logical id.
	resources map[string]map[string]any
}

// load reads and parses the template.
func load(path string) (*doc, error) {
	t, err := samlocal.Load(path)
	if err != nil {
		return nil, err
	}
	d := &doc{path: path, tmpl: t, raw: mapOf(tokens(t.Doc)), resources: map[string]map[string]any{}}
	for id, v := range mapOf(d.raw["Resources"]) {
		d.resources[id] = mapOf(v)
	}
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
	slices.Sort(ids)
	return ids
}

// props is a resource's Properties.
func (d *doc) props(id string) map[string]any { return mapOf(d.resources[id]["Properties"]) }

// functionProp is a function's property merged with Globals.Function
// (samlocal's merge, which TestTranslate holds against SAM's).
func (d *doc) functionProp(id, key string) (any, bool) {
	v, ok := d.tmpl.Prop(id, key)
	return tokens(v), ok
}

// env is a function's environment after the Globals merge.
func (d *doc) env(id string) map[string]any {
	e, _ := d.functionProp(id, "Environment")
	return mapOf(mapOf(e)["Variables"])
}

// event is one SAM event source of a function.
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
	slices.SortFunc(out, func(a, b event) int { return strings.Compare(a.name, b.name) })
	return out
}

// timeout is a function's Timeout in seconds (Globals merged, a
// parameter's default, SAM's default of 3).
func (d *doc) timeout(id string) int {
	f, _ := d.tmpl.Function(id)
	return int(f.Timeout.Seconds())
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// isTrue reads a YAML boolean (samlocal keeps scalars as their text).
func isTrue(v any) bool { return str(v) == "true" }

// num reads a whole number as num does, or a parameter's default through
// its !Ref (what a deployment without overrides takes).
func (d *doc) num(v any) (int, bool) {
	if ref, ok := unwrap(str(v), "Ref"); ok {
		p := mapOf(mapOf(d.raw["Parameters"])[ref])
		return num(p["Default"])
	}
	return num(v)
}

// num reads a whole number from a scalar's text (or a JSON number, in a
// policy written as a JSON string).
func num(v any) (int, bool) {
	var i int
	n := fmt.Sprint(v)
	if _, err := fmt.Sscanf(n, "%d", &i); err == nil && fmt.Sprint(i) == n {
		return i, true
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
