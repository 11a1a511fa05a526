// Package samlocal is the one reader of template.yaml: Parse gives the
// whole document as plain data (Template.Doc, for
// internal/dev/templatecheck) and each function with Globals merged as SAM
// merges them (Template.Prop). It resolves each function's Environment
// onto a local stack, writes it as SAM's --env-vars file and
// --parameter-overrides (`make sam-env`) and reads it back with SAM's
// precedence for the emulator (`make invoke`, the integration tests), so
// the template is the one place a function's configuration is written.
package samlocal

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// TemplateFile is the SAM template, relative to the module root.
const TemplateFile = "template.yaml"

// FunctionType is the resource type of a SAM function.
const FunctionType = "AWS::Serverless::Function"

// Parameter is one of the template's Parameters.
type Parameter struct {
	Type string
	// Default is the default value, when the parameter has one.
	Default *string
}

// Resource is one of the template's Resources.
type Resource struct {
	Type string
	// Properties keep intrinsics in their long form: {"Ref": name},
	// {"Fn::GetAtt": [resource, attribute]}, {"Fn::Sub": ...}.
	Properties map[string]any
}

// Event is one event source of a function.
type Event struct {
	Name, Type string
	Properties map[string]any
}

// Function is one AWS::Serverless::Function with Globals.Function merged
// in, as SAM merges it.
type Function struct {
	// LogicalID is the resource's id (what `sam local invoke` names).
	LogicalID string
	// Env is Environment.Variables, values unresolved.
	Env map[string]any
	// Timeout and MemoryMB are SAM's defaults (3 s, 128 MB) when neither
	// the function nor Globals sets them.
	Timeout  time.Duration
	MemoryMB int
	// LogFormat and LogLevel are LoggingConfig's LogFormat and
	// ApplicationLogLevel ("" when unset).
	LogFormat, LogLevel string
	Events              []Event
}

// Dir is the folder under functions/ the function is built from: its
// logical id without "Function", in lower case (SubmitFunction: submit),
// as the Makefile's build-<LogicalId> targets build them (internal/dev/templatecheck
// checks those).
func (f Function) Dir() string { return strings.ToLower(strings.TrimSuffix(f.LogicalID, "Function")) }

// Names returns the function's variable names, sorted.
func (f Function) Names() []string {
	return slices.Sorted(maps.Keys(f.Env))
}

// Template is the part of a SAM template that configures functions.
type Template struct {
	Parameters map[string]Parameter
	Resources  map[string]Resource
	// Order lists the resources' logical ids in the template's order.
	Order []string
	// Functions are the AWS::Serverless::Function resources, in the
	// template's order.
	Functions []Function
	// Doc is the whole template as plain data: mappings, lists, scalars
	// as their text, intrinsics in their long form.
	Doc map[string]any
	// Globals is Globals.Function.
	Globals map[string]any
}

// Prop is a function's property with Globals.Function merged in the way
// SAM merges them (mergeGlobal), and whether either sets it.
func (t *Template) Prop(id, key string) (any, bool) {
	local, hasLocal := t.Resources[id].Properties[key]
	global, hasGlobal := t.Globals[key]
	switch {
	case hasLocal && hasGlobal:
		return mergeGlobal(global, local), true
	case hasLocal:
		return local, true
	}
	return global, hasGlobal
}

// Function returns the function with the logical id.
func (t *Template) Function(id string) (Function, bool) {
	for _, f := range t.Functions {
		if f.LogicalID == id {
			return f, true
		}
	}
	return Function{}, false
}

// OfType lists the logical ids of the resources of a type, sorted.
func (t *Template) OfType(typ string) []string {
	var ids []string
	for id, r := range t.Resources {
		if r.Type == typ {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Load reads and parses a template file.
func Load(path string) (*Template, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse parses a template.
func Parse(data []byte) (*Template, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, err
	}
	if len(root.Content) == 0 {
		return nil, errors.New("empty template")
	}
	tree, err := value(root.Content[0])
	if err != nil {
		return nil, err
	}
	doc, ok := tree.(map[string]any)
	if !ok {
		return nil, errors.New("the template is not a mapping")
	}
	t := &Template{Parameters: map[string]Parameter{}, Resources: map[string]Resource{}, Doc: doc,
		Globals: mapOf(mapOf(doc["Globals"])["Function"])}
	for name, v := range mapOf(doc["Parameters"]) {
		p := mapOf(v)
		param := Parameter{Type: scalar(p["Type"])}
		if d, ok := p["Default"]; ok {
			s := scalar(d)
			param.Default = &s
		}
		t.Parameters[name] = param
	}
	resources := mapOf(doc["Resources"])
	if len(resources) == 0 {
		return nil, errors.New("no Resources")
	}
	for id, v := range resources {
		r := mapOf(v)
		t.Resources[id] = Resource{Type: scalar(r["Type"]), Properties: mapOf(r["Properties"])}
	}
	t.Order = resourceOrder(root.Content[0])
	for _, id := range t.Order {
		if t.Resources[id].Type != FunctionType {
			continue
		}
		f, err := t.function(id)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		t.Functions = append(t.Functions, f)
	}
	return t, nil
}

// resourceOrder lists the Resources' logical ids in the order written.
func resourceOrder(doc *yaml.Node) []string {
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value != "Resources" {
			continue
		}
		var ids []string
		res := doc.Content[i+1]
		for j := 0; j+1 < len(res.Content); j += 2 {
			ids = append(ids, res.Content[j].Value)
		}
		return ids
	}
	return nil
}

func (t *Template) function(id string) (Function, error) {
	prop := func(key string) any {
		v, _ := t.Prop(id, key)
		return v
	}
	f := Function{LogicalID: id, Env: map[string]any{}, Timeout: 3 * time.Second, MemoryMB: 128}
	maps.Copy(f.Env, mapOf(mapOf(prop("Environment"))["Variables"]))
	if v := prop("Timeout"); v != nil {
		// A parameter's !Ref takes its default, as a deployment without
		// overrides does.
		s, _ := t.Resolve(v, Locals{})
		n, err := strconv.Atoi(s)
		if err != nil {
			return f, fmt.Errorf("property Timeout %v is not a whole number of seconds", v)
		}
		f.Timeout = time.Duration(n) * time.Second
	}
	if v := prop("MemorySize"); v != nil {
		n, err := strconv.Atoi(scalar(v))
		if err != nil {
			return f, fmt.Errorf("property MemorySize %v is not a whole number", v)
		}
		f.MemoryMB = n
	}
	logging := mapOf(prop("LoggingConfig"))
	f.LogFormat = scalar(logging["LogFormat"])
	if f.LogFormat == "JSON" {
		// Lambda applies ApplicationLogLevel to JSON logs only.
		f.LogLevel = scalar(logging["ApplicationLogLevel"])
	}
	events := mapOf(t.Resources[id].Properties["Events"])
	for _, name := range slices.Sorted(maps.Keys(events)) {
		e := mapOf(events[name])
		f.Events = append(f.Events, Event{Name: name, Type: scalar(e["Type"]), Properties: mapOf(e["Properties"])})
	}
	return f, nil
}

// mergeGlobal merges a Globals value with the function's own, the way
// SAM does: maps key by key, lists concatenated, anything else (and
// mismatched kinds, and intrinsic calls) the function's.
func mergeGlobal(global, local any) any {
	switch g := global.(type) {
	case map[string]any:
		l, ok := local.(map[string]any)
		if !ok || isIntrinsic(l) || isIntrinsic(g) {
			return local
		}
		out := maps.Clone(g)
		for k, v := range l {
			if gv, ok := g[k]; ok {
				v = mergeGlobal(gv, v)
			}
			out[k] = v
		}
		return out
	case []any:
		if l, ok := local.([]any); ok {
			return slices.Concat(g, l)
		}
	}
	return local
}

// isIntrinsic reports whether m is one intrinsic function call.
func isIntrinsic(m map[string]any) bool {
	if len(m) != 1 {
		return false
	}
	for k := range m {
		return k == "Ref" || k == "Condition" || strings.HasPrefix(k, "Fn::")
	}
	return false
}

// value converts a YAML node into plain data: mappings, sequences and
// scalars (kept as their text: CloudFormation reads every scalar of these
// properties as a string), with short-form intrinsic tags (!Ref x,
// !GetAtt a.b, !Sub s, ...) turned into their long form.
func value(n *yaml.Node) (any, error) {
	var v any
	switch n.Kind {
	case yaml.AliasNode:
		return value(n.Alias)
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			v = nil
		} else {
			v = n.Value
		}
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			cv, err := value(c)
			if err != nil {
				return nil, err
			}
			list = append(list, cv)
		}
		v = list
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			cv, err := value(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[n.Content[i].Value] = cv
		}
		v = m
	default:
		return nil, fmt.Errorf("line %d: unexpected YAML node", n.Line)
	}
	tag, ok := strings.CutPrefix(n.Tag, "!")
	if !ok || strings.HasPrefix(tag, "!") {
		return v, nil // no tag, or a standard one (!!str, !!int, ...)
	}
	switch tag {
	case "Ref", "Condition":
		return map[string]any{tag: v}, nil
	case "GetAtt":
		if s, ok := v.(string); ok {
			res, attr, found := strings.Cut(s, ".")
			if !found {
				return nil, fmt.Errorf("line %d: !GetAtt %s: want Resource.Attribute", n.Line, s)
			}
			v = []any{res, attr}
		}
		return map[string]any{"Fn::GetAtt": v}, nil
	default:
		return map[string]any{"Fn::" + tag: v}, nil
	}
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// scalar is a scalar's text ("" for anything else).
func scalar(v any) string {
	s, _ := v.(string)
	return s
}
