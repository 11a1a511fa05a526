package templatecheck

// The schema rule validates the template against AWS's published SAM and
// CloudFormation resource schemas, so this package need not know what a
// valid property looks like: only how the template meets the Go code.
//
// The unified schema is built here the way the SAM repository's own
// `make schema` builds samtranslator/schema/schema.json
// (samtranslator/internal/schema_source/schema.py, extend_with_cfn_schema):
// the SAM part is the pinned testdata/schema/sam.schema.json (see the
// README beside it); the CloudFormation part is the resource schema that
// goformation v7 ships (its schema package, pinned by go.mod), generated
// from the CloudFormation resource specification by the generator SAM's
// cfn_schema_generator.py is a port of. Where SAM passes a property
// through to CloudFormation, that CloudFormation property's schema is
// substituted in, as SAM does; passThroughGaps lists the few that
// goformation's older specification lacks.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	cfnschema "github.com/awslabs/goformation/v7/schema"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// DefaultSchema is the pinned SAM schema (testdata/schema/sam.schema.json
// at the repository root).
var DefaultSchema = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "testdata", "schema", "sam.schema.json")
}()

// passThroughGaps are the SAM pass-through properties whose
// CloudFormation schema goformation v7.14.9 lacks: properties added to
// CloudFormation after its specification. They fall back to SAM's own
// PassThroughProp, which accepts any value, as the SAM-only schema does;
// CloudFormation checks them at deploy time (and cfn-lint, where
// installed, before: TestCfnLint). The template uses one, RecursiveLoop,
// whose value the wiring rule checks. TestPassThroughGaps keeps this list
// equal to what is missing, so an entry goes once goformation has it.
var passThroughGaps = []string{
	"definitions/AWS::ApiGateway::DomainName/properties/Properties/properties/EndpointAccessMode",
	"definitions/AWS::ApiGateway::DomainNameAccessAssociation/properties/Properties/properties/AccessAssociationSource",
	"definitions/AWS::ApiGateway::RestApi/properties/Properties/properties/EndpointAccessMode",
	"definitions/AWS::ApiGateway::RestApi/properties/Properties/properties/SecurityPolicy",
	"definitions/AWS::Lambda::CapacityProvider/properties/Properties/properties/CapacityProviderName",
	"definitions/AWS::Lambda::CapacityProvider/properties/Properties/properties/KmsKeyArn",
	"definitions/AWS::Lambda::EventSourceMapping/properties/Properties/properties/KmsKeyArn",
	"definitions/AWS::Lambda::Function.Code/properties/SourceKMSKeyArn",
	"definitions/AWS::Lambda::Function/properties/Properties/properties/DurableConfig",
	"definitions/AWS::Lambda::Function/properties/Properties/properties/FunctionScalingConfig",
	"definitions/AWS::Lambda::Function/properties/Properties/properties/PublishToLatestPublished",
	"definitions/AWS::Lambda::Function/properties/Properties/properties/RecursiveLoop",
	"definitions/AWS::Lambda::Function/properties/Properties/properties/TenancyConfig",
}

const (
	schemaURL = "file:///genjobs/sam-unified.schema.json"
	// rootDef is the unified schema's root without Resources, which are
	// validated one by one against their type's definition.
	rootDef = "genjobs__TemplateWithoutResources"
)

// unified is the unified schema, built once per schema file.
type unified struct {
	doc map[string]any
	// defs maps a resource Type to its definition's name.
	defs map[string]string
	// gaps are the pass-through paths that did not resolve.
	gaps []string

	mu sync.Mutex
	// compiled holds, per set of definitions a template needs, those
	// definitions compiled. The compiler compiles a whole document at
	// once, and all of CloudFormation takes seconds, so each set is
	// compiled from a document pruned to what it references.
	compiled map[string]map[string]*jsonschema.Schema
}

var (
	unifiedMu    sync.Mutex
	unifiedCache = map[string]*unified{}
)

// loadUnified builds (once) the unified schema from the SAM schema file.
func loadUnified(samPath string) (*unified, error) {
	unifiedMu.Lock()
	defer unifiedMu.Unlock()
	if u, ok := unifiedCache[samPath]; ok {
		return u, nil
	}
	data, err := os.ReadFile(samPath)
	if err != nil {
		return nil, err
	}
	sam, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", samPath, err)
	}
	cfn, err := jsonschema.UnmarshalJSON(strings.NewReader(cfnschema.CloudformationSchema))
	if err != nil {
		return nil, fmt.Errorf("goformation's CloudFormation schema: %w", err)
	}
	doc, gaps, err := extendWithCFN(mapOf(sam), mapOf(cfn))
	if err != nil {
		return nil, err
	}
	u := &unified{doc: doc, defs: map[string]string{}, gaps: gaps, compiled: map[string]map[string]*jsonschema.Schema{}}
	for _, alt := range listOf(mapOf(mapOf(mapOf(doc["properties"])["Resources"])["additionalProperties"])["anyOf"]) {
		name := strings.TrimPrefix(str(mapOf(alt)["$ref"]), "#/definitions/")
		def := mapOf(mapOf(doc["definitions"])[name])
		for _, typ := range listOf(mapOf(mapOf(def["properties"])["Type"])["enum"]) {
			u.defs[str(typ)] = name
		}
	}
	if len(u.defs) == 0 {
		return nil, errors.New("unified schema: no resource definitions")
	}
	unifiedCache[samPath] = u
	return u, nil
}

// extendWithCFN is SAM's extend_with_cfn_schema applied to the SAM-only
// schema (SamModel): the catch-all for non-SAM resources is replaced by
// the CloudFormation resource definitions (which makes it SAM's Model),
// the CloudFormation template sections and definitions are added, and
// each pass-through property takes the CloudFormation property's schema.
func extendWithCFN(sam, cfn map[string]any) (map[string]any, []string, error) {
	samDefs, cfnDefs := mapOf(sam["definitions"]), mapOf(cfn["definitions"])
	samProps, cfnProps := mapOf(sam["properties"]), mapOf(cfn["properties"])
	if samDefs == nil || cfnDefs == nil || samProps == nil || cfnProps == nil {
		return nil, nil, errors.New("unified schema: a schema lacks definitions or properties")
	}
	const anyCFN = "#/definitions/samtranslator__internal__schema_source__any_cfn_resource__Resource"
	resources := mapOf(mapOf(samProps["Resources"])["additionalProperties"])
	alts := slices.DeleteFunc(listOf(resources["anyOf"]), func(a any) bool { return str(mapOf(a)["$ref"]) == anyCFN })
	delete(samDefs, strings.TrimPrefix(anyCFN, "#/definitions/"))
	cfnResources := listOf(mapOf(mapOf(mapOf(cfnProps["Resources"])["patternProperties"])["^[a-zA-Z0-9]+$"])["anyOf"])
	if len(cfnResources) == 0 {
		return nil, nil, errors.New("unified schema: no CloudFormation resources")
	}
	resources["anyOf"] = append(alts, cfnResources...)
	for k, v := range cfnProps {
		if _, ok := samProps[k]; !ok {
			samProps[k] = v
		}
	}
	for k, v := range cfnDefs {
		if _, ok := samDefs[k]; ok {
			return nil, nil, fmt.Errorf("unified schema: definition %s is in both schemas", k)
		}
		samDefs[k] = v
	}
	gaps := map[string]bool{}
	var replace func(v any) any
	replace = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			if pt, ok := x["__samPassThrough"].(map[string]any); ok {
				var path []string
				for _, p := range listOf(pt["schemaPath"]) {
					path = append(path, str(p))
				}
				target, found := any(cfn), true
				for _, p := range path {
					m, ok := target.(map[string]any)
					if !ok {
						found = false
						break
					}
					if target, ok = m[p]; !ok {
						found = false
						break
					}
				}
				if !found {
					gaps[strings.Join(path, "/")] = true
					return map[string]any{"title": x["title"]} // SAM's PassThroughProp: anything
				}
				out := deepCopy(target).(map[string]any)
				out["title"] = x["title"]
				return out
			}
			for k, e := range x {
				x[k] = replace(e)
			}
		case []any:
			for i, e := range x {
				x[i] = replace(e)
			}
		}
		return v
	}
	replace(sam)
	root := map[string]any{"type": "object", "additionalProperties": false, "required": []any{"Resources"}}
	rootProps := map[string]any{}
	for k, v := range samProps {
		rootProps[k] = v
	}
	rootProps["Resources"] = map[string]any{"type": "object"}
	root["properties"] = rootProps
	samDefs[rootDef] = root
	sam["additionalProperties"] = false
	return sam, sortedKeys(gaps), nil
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

// schemas compiles the definitions named (once per set).
func (u *unified) schemas(defs []string) (map[string]*jsonschema.Schema, error) {
	defs = slices.Compact(slices.Sorted(slices.Values(defs)))
	key := strings.Join(defs, "\n")
	u.mu.Lock()
	defer u.mu.Unlock()
	if s, ok := u.compiled[key]; ok {
		return s, nil
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft4)
	if err := c.AddResource(schemaURL, u.pruned(defs)); err != nil {
		return nil, err
	}
	out := map[string]*jsonschema.Schema{}
	for _, def := range defs {
		sch, err := c.Compile(schemaURL + "#/definitions/" + jsonPointerEscape(def))
		if err != nil {
			return nil, fmt.Errorf("compile %s: %w", def, err)
		}
		out[def] = sch
	}
	u.compiled[key] = out
	return out, nil
}

// pruned is the unified document with only the definitions that defs
// reach through $ref.
func (u *unified) pruned(defs []string) map[string]any {
	all := mapOf(u.doc["definitions"])
	keep := map[string]any{}
	var visit func(v any)
	visit = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				name := strings.NewReplacer("~1", "/", "~0", "~").Replace(strings.TrimPrefix(ref, "#/definitions/"))
				if _, seen := keep[name]; !seen && all[name] != nil {
					keep[name] = all[name]
					visit(all[name])
				}
			}
			for _, e := range x {
				visit(e)
			}
		case []any:
			for _, e := range x {
				visit(e)
			}
		}
	}
	for _, d := range defs {
		visit(map[string]any{"$ref": "#/definitions/" + d})
	}
	out := map[string]any{}
	for k, v := range u.doc {
		out[k] = v
	}
	out["definitions"] = keep
	// The root's own properties reference every resource: not needed, as
	// each resource is validated against its definition.
	delete(out, "properties")
	return out
}

func jsonPointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

var printer = message.NewPrinter(language.English)

// validateSchema checks the template (plain, intrinsics as objects)
// against the unified schema: the template's sections, then each
// resource against the definition of its Type.
func (c *checker) validateSchema() {
	path := c.opts.Schema
	if path == "" {
		path = DefaultSchema
	}
	u, err := loadUnified(path)
	if err != nil {
		c.add(RuleSchema, "schema", "cannot build the unified schema: %v", err)
		return
	}
	root := map[string]any{}
	for k, v := range c.plain {
		root[k] = v
	}
	resources := mapOf(root["Resources"])
	root["Resources"] = map[string]any{}
	needed := []string{rootDef}
	for _, id := range sortedKeys(resources) {
		if def, ok := u.defs[str(mapOf(resources[id])["Type"])]; ok {
			needed = append(needed, def)
		}
	}
	schemas, err := u.schemas(needed)
	if err != nil {
		c.add(RuleSchema, "schema", "%v", err)
		return
	}
	c.validateAgainst(schemas[rootDef], "template", root)
	for _, id := range sortedKeys(resources) {
		r := mapOf(resources[id])
		typ := str(r["Type"])
		def, ok := u.defs[typ]
		if !ok {
			c.add(RuleSchema, id, "resource type %q is in neither the SAM nor the CloudFormation schema", typ)
			continue
		}
		c.validateAgainst(schemas[def], id, r)
	}
}

func (c *checker) validateAgainst(sch *jsonschema.Schema, where string, v any) {
	// The schema validates JSON values: round-trip so numbers are what the
	// validator expects.
	data, err := json.Marshal(v)
	if err != nil {
		c.add(RuleSchema, where, "%v", err)
		return
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		c.add(RuleSchema, where, "%v", err)
		return
	}
	err = sch.Validate(inst)
	var ve *jsonschema.ValidationError
	if err == nil {
		return
	}
	if !errors.As(err, &ve) {
		c.add(RuleSchema, where, "%v", err)
		return
	}
	seen := map[string]bool{}
	for _, leaf := range relevant(ve, inst) {
		msg := fmt.Sprintf("at %s: %s", "/"+strings.Join(leaf.InstanceLocation, "/"), leaf.ErrorKind.LocalizedString(printer))
		if !seen[msg] {
			seen[msg] = true
			c.add(RuleSchema, where, "%s", msg)
		}
	}
}

// relevant returns the leaf errors that stand once intrinsic functions
// are accounted for. The published schemas do not model intrinsics (SAM's
// own tests say the unified schema "doesn't support intrinsic
// functions"): a !Ref, !GetAtt or !Sub where a number or list is expected
// resolves at deploy time, so an error at or under an intrinsic says
// nothing. An anyOf or oneOf with one alternative that fails only there
// counts as satisfied; of the alternatives that fail for real, those
// whose Type does not match are left out of the report.
func relevant(e *jsonschema.ValidationError, inst any) []*jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		if underIntrinsic(inst, e.InstanceLocation) {
			return nil
		}
		return []*jsonschema.ValidationError{e}
	}
	switch e.ErrorKind.(type) {
	case *kind.AnyOf, *kind.OneOf:
		var branches [][]*jsonschema.ValidationError
		for _, cause := range e.Causes {
			r := relevant(cause, inst)
			if len(r) == 0 {
				return nil
			}
			branches = append(branches, r)
		}
		var matching [][]*jsonschema.ValidationError
		for _, b := range branches {
			if !slices.ContainsFunc(b, wrongType) {
				matching = append(matching, b)
			}
		}
		if len(matching) == 0 {
			return []*jsonschema.ValidationError{e} // "matches none of the alternatives"
		}
		var out []*jsonschema.ValidationError
		for _, b := range matching {
			out = append(out, b...)
		}
		return out
	}
	var out []*jsonschema.ValidationError
	for _, cause := range e.Causes {
		out = append(out, relevant(cause, inst)...)
	}
	return out
}

// wrongType reports an alternative rejected for its resource or event
// Type, which is not the alternative the template meant.
func wrongType(e *jsonschema.ValidationError) bool {
	if n := len(e.InstanceLocation); n == 0 || e.InstanceLocation[n-1] != "Type" {
		return false
	}
	switch e.ErrorKind.(type) {
	case *kind.Enum, *kind.Const:
		return true
	}
	return false
}

// underIntrinsic reports whether the value at loc, or one that holds it,
// is an intrinsic function: an object with the single key Ref,
// Condition or Fn::*.
func underIntrinsic(inst any, loc []string) bool {
	v := inst
	for i := 0; ; i++ {
		if m, ok := v.(map[string]any); ok && len(m) == 1 {
			for k := range m {
				if k == "Ref" || k == "Condition" || strings.HasPrefix(k, "Fn::") {
					return true
				}
			}
		}
		if i == len(loc) {
			return false
		}
		switch x := v.(type) {
		case map[string]any:
			v = x[loc[i]]
		case []any:
			var n int
			if _, err := fmt.Sscanf(loc[i], "%d", &n); err != nil || n < 0 || n >= len(x) {
				return false
			}
			v = x[n]
		default:
			return false
		}
	}
}
