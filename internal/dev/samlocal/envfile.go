package samlocal

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// sharedKey is the --env-vars file's section whose values apply to every
// function (SAM: "CloudFormation parameter file format").
const sharedKey = "Parameters"

// EnvFile is SAM's --env-vars document: values under a function's logical
// id apply to that function, values under "Parameters" to every function,
// the function's own winning. Either way only variables the template
// declares for the function reach it.
type EnvFile struct {
	// Functions are the values per function, by logical id.
	Functions map[string]map[string]string
	// Shared is the "Parameters" section.
	Shared map[string]string
}

// EnvFile resolves every function's environment onto l. A variable with
// the same value in every function that declares it goes under
// "Parameters", once; the others under their function.
func (t *Template) EnvFile(l Locals) (EnvFile, error) {
	all := map[string]map[string]string{}
	var errs []error
	for _, f := range t.Functions {
		env, err := t.Environment(f.LogicalID, l)
		errs = append(errs, err)
		all[f.LogicalID] = env
	}
	if err := errors.Join(errs...); err != nil {
		return EnvFile{}, err
	}
	first, differs := map[string]string{}, map[string]bool{}
	for _, env := range all {
		for k, v := range env {
			if w, seen := first[k]; !seen {
				first[k] = v
			} else if w != v {
				differs[k] = true
			}
		}
	}
	out := EnvFile{Functions: map[string]map[string]string{}, Shared: map[string]string{}}
	for id, env := range all {
		own := map[string]string{}
		for k, v := range env {
			if !differs[k] {
				out.Shared[k] = v
			} else {
				own[k] = v
			}
		}
		out.Functions[id] = own
	}
	return out, nil
}

// Encode is the file's text in SAM's format, {"Parameters": {...},
// "FunctionId": {...}}: indented JSON, keys sorted, a final newline.
func (f EnvFile) Encode() ([]byte, error) {
	if _, ok := f.Functions[sharedKey]; ok {
		return nil, fmt.Errorf("a function may not be called %s in an --env-vars file", sharedKey)
	}
	doc := maps.Clone(f.Functions)
	if doc == nil {
		doc = map[string]map[string]string{}
	}
	doc[sharedKey] = f.Shared
	b, err := json.MarshalIndent(doc, "", "  ")
	return append(b, '\n'), err
}

// ParseEnvFile reads an --env-vars file. SAM refuses anything but an
// object of objects; so does this, and it wants every value a string, as
// Lambda's environment is.
func ParseEnvFile(data []byte) (EnvFile, error) {
	var doc map[string]map[string]string
	if err := json.Unmarshal(data, &doc); err != nil {
		return EnvFile{}, fmt.Errorf("--env-vars file: want {\"FunctionLogicalId\": {\"VAR\": \"value\"}, \"Parameters\": {...}}: %w", err)
	}
	f := EnvFile{Functions: map[string]map[string]string{}, Shared: doc[sharedKey]}
	for id, vars := range doc {
		if id != sharedKey {
			f.Functions[id] = vars
		}
	}
	return f, nil
}

// Apply is the environment `sam local invoke ID --env-vars FILE` gives
// the function from its template variables: each declared variable takes
// the function's value in the file, else the "Parameters" one (SAM's
// precedence; the shell's own value of a declared variable would sit
// below both). Entries for undeclared variables are ignored, as SAM
// ignores them. A declared variable the file leaves out is an error
// naming it: SAM would pass its own guess (a logical id for a !Ref of a
// resource, "" for what it cannot resolve), never a local resource.
func (t *Template) Apply(f EnvFile, id string) (map[string]string, error) {
	fn, ok := t.Function(id)
	if !ok {
		return nil, fmt.Errorf("no function %s in the template", id)
	}
	out := make(map[string]string, len(fn.Env))
	var missing []string
	for _, name := range fn.Names() {
		if v, ok := f.Functions[id][name]; ok {
			out[name] = v
		} else if v, ok := f.Shared[name]; ok {
			out[name] = v
		} else {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return out, fmt.Errorf("the --env-vars file gives %s no value for %s", id, strings.Join(missing, ", "))
	}
	return out, nil
}

// FormatParameterOverrides writes parameter values the way `sam ...
// --parameter-overrides` reads them: Key="value" pairs, space separated,
// sorted by key, each value in double quotes with \" for a quote (SAM
// unquotes it). A value with a backslash or a line break cannot be
// written so that SAM reads it back unchanged, and is refused.
func FormatParameterOverrides(params map[string]string) (string, error) {
	keys := slices.Sorted(maps.Keys(params))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := params[k]
		if strings.ContainsAny(v, "\\\n\r") {
			return "", fmt.Errorf("parameter %s: a value with a backslash or line break cannot be passed to sam", k)
		}
		if !validParamKey(k) {
			return "", fmt.Errorf("parameter %q: SAM reads only [A-Za-z0-9] in names", k)
		}
		parts = append(parts, k+`="`+strings.ReplaceAll(v, `"`, `\"`)+`"`)
	}
	return strings.Join(parts, " "), nil
}

// ParseParameterOverrides reads what FormatParameterOverrides writes, by
// SAM's grammar for the shorthand form: Key=Value pairs separated by
// spaces, a value either bare (no space, quote or backslash) or in double
// quotes with \" (and "\ ") escapes.
func ParseParameterOverrides(s string) (map[string]string, error) {
	out := map[string]string{}
	s = strings.TrimSpace(s)
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || !validParamKey(s[:eq]) {
			return nil, fmt.Errorf("parameter overrides: %q: want Key=Value", s)
		}
		key, rest := s[:eq], s[eq+1:]
		var val string
		if strings.HasPrefix(rest, `"`) {
			end := -1
			for i := 1; i < len(rest); i++ {
				if rest[i] == '\\' {
					i++
					continue
				}
				if rest[i] == '"' {
					end = i
					break
				}
			}
			if end < 0 {
				return nil, fmt.Errorf("parameter overrides: %s: unclosed quote", key)
			}
			val = strings.NewReplacer(`\ `, " ", `\"`, `"`, `\'`, "'").Replace(rest[1:end])
			rest = rest[end+1:]
		} else {
			end := strings.IndexAny(rest, " \"\\")
			if end < 0 {
				end = len(rest)
			}
			val, rest = rest[:end], rest[end:]
		}
		if rest != "" && rest[0] != ' ' {
			return nil, fmt.Errorf("parameter overrides: %s: unexpected %q after the value", key, rest)
		}
		out[key] = val
		s = strings.TrimLeft(rest, " ")
	}
	return out, nil
}

var validParamKey = regexp.MustCompile(`^[A-Za-z0-9]+$`).MatchString
