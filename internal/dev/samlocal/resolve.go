package samlocal

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Locals are what the template's references mean on one local stack.
type Locals struct {
	// Region, AccountID, Partition, StackName and URLSuffix are the
	// pseudo parameters AWS::Region, AWS::AccountId, ...
	Region, AccountID, Partition, StackName, URLSuffix string
	// Parameters override the parameters' defaults, as
	// --parameter-overrides does.
	Parameters map[string]string
	// Resources give each resource's local values by logical id: "Ref" is
	// what !Ref returns, any other key is an attribute for !GetAtt.
	Resources map[string]map[string]string
	// Variables are local values of variables the template declares empty
	// for local runs to fill (the SDK's AWS_ENDPOINT_URL_* variables).
	Variables map[string]string
}

// Resolve turns a property value into the string it takes on the local
// stack l.
func (t *Template) Resolve(v any, l Locals) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case nil:
		return "", errors.New("null value")
	case map[string]any:
		if !isIntrinsic(x) {
			return "", fmt.Errorf("a mapping is not a string value: %v", x)
		}
		for fn, arg := range x {
			switch fn {
			case "Ref":
				name, ok := arg.(string)
				if !ok {
					return "", fmt.Errorf("!Ref %v: want a name", arg)
				}
				return t.ref(name, l)
			case "Fn::GetAtt":
				parts, ok := arg.([]any)
				if !ok || len(parts) != 2 {
					return "", fmt.Errorf("!GetAtt %v: want [Resource, Attribute]", arg)
				}
				return t.getAtt(scalar(parts[0]), scalar(parts[1]), l)
			case "Fn::Sub":
				return t.sub(arg, l)
			case "Fn::Join":
				parts, ok := arg.([]any)
				if !ok || len(parts) != 2 {
					return "", fmt.Errorf("!Join %v: want [delimiter, [values]]", arg)
				}
				items, ok := parts[1].([]any)
				if !ok {
					return "", fmt.Errorf("!Join %v: want a list of values", parts[1])
				}
				out := make([]string, len(items))
				for i, it := range items {
					s, err := t.Resolve(it, l)
					if err != nil {
						return "", err
					}
					out[i] = s
				}
				return strings.Join(out, scalar(parts[0])), nil
			default:
				return "", fmt.Errorf("%s is not resolved locally (only Ref, Fn::GetAtt, Fn::Sub and Fn::Join are)", fn)
			}
		}
	}
	return "", fmt.Errorf("%v is not a string value", v)
}

func (t *Template) ref(name string, l Locals) (string, error) {
	if pseudo, ok := strings.CutPrefix(name, "AWS::"); ok {
		v := map[string]string{"Region": l.Region, "AccountId": l.AccountID, "Partition": l.Partition,
			"StackName": l.StackName, "URLSuffix": l.URLSuffix}[pseudo]
		if v == "" {
			return "", fmt.Errorf("pseudo parameter %s has no local value", name)
		}
		return v, nil
	}
	if p, ok := t.Parameters[name]; ok { // its override, else its default
		if v, ok := l.Parameters[name]; ok {
			return v, nil
		}
		if p.Default == nil {
			return "", fmt.Errorf("parameter %s has no default and no local value", name)
		}
		return *p.Default, nil
	}
	r, ok := t.Resources[name]
	if !ok && t.mappings()[name] {
		r, ok = Resource{Type: mappingType}, true
	}
	if !ok {
		return "", fmt.Errorf("!Ref %s: no such parameter or resource", name)
	}
	v, ok := l.Resources[name]["Ref"]
	if !ok {
		return "", fmt.Errorf("!Ref %s (%s): no local value", name, r.Type)
	}
	return v, nil
}

func (t *Template) getAtt(res, attr string, l Locals) (string, error) {
	r, ok := t.Resources[res]
	if !ok {
		return "", fmt.Errorf("!GetAtt %s.%s: no such resource", res, attr)
	}
	v, ok := l.Resources[res][attr]
	if !ok {
		return "", fmt.Errorf("!GetAtt %s.%s (%s): no local value", res, attr, r.Type)
	}
	return v, nil
}

// sub resolves Fn::Sub: "${Name}" is a parameter, pseudo parameter or a
// resource's Ref, "${Resource.Attribute}" an attribute, "${!Text}" the
// literal "${Text}"; the list form adds variables of its own.
func (t *Template) sub(arg any, l Locals) (string, error) {
	text, vars := "", map[string]any{}
	switch a := arg.(type) {
	case string:
		text = a
	case []any:
		if len(a) != 2 {
			return "", fmt.Errorf("!Sub %v: want [text, {variables}]", arg)
		}
		text, vars = scalar(a[0]), mapOf(a[1])
	default:
		return "", fmt.Errorf("!Sub %v: want text", arg)
	}
	var b strings.Builder
	for {
		i := strings.Index(text, "${")
		if i < 0 {
			b.WriteString(text)
			return b.String(), nil
		}
		b.WriteString(text[:i])
		j := strings.IndexByte(text[i:], '}')
		if j < 0 {
			return "", fmt.Errorf("!Sub %q: unclosed ${", text)
		}
		name := text[i+2 : i+j]
		text = text[i+j+1:]
		if lit, ok := strings.CutPrefix(name, "!"); ok {
			b.WriteString("${" + lit + "}")
			continue
		}
		var s string
		var err error
		switch v, isVar := vars[name]; {
		case isVar:
			s, err = t.Resolve(v, l)
		case strings.Contains(name, ".") && !strings.HasPrefix(name, "AWS::"):
			res, attr, _ := strings.Cut(name, ".")
			s, err = t.getAtt(res, attr, l)
		default:
			s, err = t.ref(name, l)
		}
		if err != nil {
			return "", err
		}
		b.WriteString(s)
	}
}

// Environment resolves every variable of the function onto l. The error
// names each variable that could not be resolved, and why.
func (t *Template) Environment(id string, l Locals) (map[string]string, error) {
	f, ok := t.Function(id)
	if !ok {
		return nil, fmt.Errorf("no function %s in the template", id)
	}
	out := make(map[string]string, len(f.Env))
	var errs []error
	for _, name := range f.Names() {
		v, err := t.Resolve(f.Env[name], l)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", id, name, err))
			continue
		}
		if local, ok := l.Variables[name]; ok {
			if v != "" {
				errs = append(errs, fmt.Errorf("%s %s is %q in the template: a variable a local run fills must be empty there", id, name, v))
				continue
			}
			v = local
		}
		out[name] = v
	}
	return out, errors.Join(errs...)
}

// ParametersOf lists the parameters that variable name is a plain !Ref of
// in any function, sorted: a local value for the variable is given as an
// override of those parameters, so that every function reading them
// agrees, as in a deployment.
func (t *Template) ParametersOf(name string) []string {
	seen := map[string]bool{}
	for _, f := range t.Functions {
		m := mapOf(f.Env[name])
		if p, ok := m["Ref"].(string); ok && len(m) == 1 {
			if _, isParam := t.Parameters[p]; isParam {
				seen[p] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}
