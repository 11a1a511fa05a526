package invoke

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/genjobs/genjobs/internal/dev/samlocal"
)

// The files `sam local invoke` takes for a stack, by name in the
// directory they are written to.
const (
	EnvFileName        = "env.json"   // the --env-vars file (SAM's JSON format)
	ParametersFileName = "parameters" // the --parameter-overrides argument
)

// SAMFiles are the paths of a stack's --env-vars file and
// --parameter-overrides argument.
type SAMFiles struct {
	EnvVars, ParameterOverrides string
}

// WriteSAMFiles resolves every function's environment from the template
// onto the stack and writes it into dir as SAM's --env-vars file, next to
// the --parameter-overrides it was resolved with (the parameters the
// stack overrides, such as GenaceBaseUrl).
func (st *Stack) WriteSAMFiles(dir string) (SAMFiles, error) {
	f, err := st.Template.EnvFile(st.Locals)
	if err != nil {
		return SAMFiles{}, fmt.Errorf("%s: %w", samlocal.TemplateFile, err)
	}
	envText, err := f.Encode()
	if err != nil {
		return SAMFiles{}, err
	}
	params, err := samlocal.FormatParameterOverrides(st.Locals.Parameters)
	if err != nil {
		return SAMFiles{}, err
	}
	files := SAMFiles{EnvVars: filepath.Join(dir, EnvFileName), ParameterOverrides: filepath.Join(dir, ParametersFileName)}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return SAMFiles{}, err
	}
	if err := os.WriteFile(files.EnvVars, envText, 0o644); err != nil {
		return SAMFiles{}, err
	}
	if err := os.WriteFile(files.ParameterOverrides, []byte(params+"\n"), 0o644); err != nil {
		return SAMFiles{}, err
	}
	return files, nil
}

// Env is the environment the function with the logical id starts with:
// what `sam local invoke ID --env-vars FILE` gives it (samlocal's Apply)
// plus what the Lambda runtime adds (Runtime). The template resolved again
// with the parameters file must give the same values, or Env fails naming
// the variables that differ.
func (st *Stack) Env(files SAMFiles, id string) (map[string]string, error) {
	t := st.Template
	fn, ok := t.Function(id)
	if !ok {
		return nil, fmt.Errorf("no function %s in %s", id, samlocal.TemplateFile)
	}
	raw, err := os.ReadFile(files.EnvVars)
	if err != nil {
		return nil, err
	}
	f, err := samlocal.ParseEnvFile(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", files.EnvVars, err)
	}
	env, err := t.Apply(f, id)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", files.EnvVars, err)
	}
	text, err := os.ReadFile(files.ParameterOverrides)
	if err != nil {
		return nil, err
	}
	params, err := samlocal.ParseParameterOverrides(string(text))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", files.ParameterOverrides, err)
	}
	l := st.Locals
	l.Parameters = params
	again, err := t.Environment(id, l)
	if err != nil {
		return nil, fmt.Errorf("%s with %s: %w", samlocal.TemplateFile, files.ParameterOverrides, err)
	}
	var differ []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if again[k] != env[k] {
			differ = append(differ, k)
		}
	}
	if len(differ) > 0 {
		return nil, fmt.Errorf("%s and %s disagree on %s's %v", files.EnvVars, files.ParameterOverrides, id, differ)
	}
	maps.Copy(env, fn.Runtime(st.endpoints.AccessKey, st.endpoints.SecretKey))
	return env, nil
}
