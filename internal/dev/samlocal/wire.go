package samlocal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/genjobs/genjobs/internal/config"
)

// EndpointPrefix starts the SDK's endpoint variables
// (AWS_ENDPOINT_URL_<SERVICE>).
const EndpointPrefix = "AWS_ENDPOINT_URL_"

// Wiring is where a local stack's services are, for what the template
// does not hold as a resource: Genace's URL, the secrets' value, the SDK's
// endpoints.
type Wiring struct {
	GenaceURL string      // GENACE_BASE_URL's local value: the simulator
	APIKey    string      // the value of every secret the functions are given
	Secrets   SecretStore // keeps those secrets, where the functions read them
	// Mappings keeps the event source mappings a function's environment
	// names (the sweep's OBSERVE_MAPPING_ID), so the function finds a real
	// one; nil: they keep their local names, for runs that never call
	// Lambda.
	Mappings MappingStore
	// Endpoints are the local values of the SDK's endpoint variables
	// (AWS_ENDPOINT_URL_DYNAMODB, ...), which the template declares empty
	// for every function so that `sam local invoke --env-vars` can set
	// them (SAM passes only variables the template declares).
	Endpoints map[string]string
	// Parameters override further parameters (for instance a shorter long
	// poll for local runs).
	Parameters map[string]string
}

// Wire points l at the wiring's services:
//   - GENACE_BASE_URL through the parameters it is a !Ref of;
//   - every Secrets Manager secret a function is given, generically: each
//     AWS::SecretsManager::Secret resource, and each parameter that
//     GENACE_API_KEY_SECRET_ID is a !Ref of (a secret's ARN passed in), is
//     a secret put in w.Secrets holding APIKey, under its local name, and
//     resolves to the ARN Secrets Manager gave it;
//   - every event source mapping a function's environment refers to (SAM
//     generates one per SQS event) is made in w.Mappings with the event's
//     queue, batch size and maximum concurrency, and resolves to the UUID
//     it was given;
//   - each endpoint variable, which every function must declare; and the
//     template may declare none the wiring has no service for.
//
// Every problem is reported at once, each naming what is missing.
func (t *Template) Wire(ctx context.Context, l Locals, site Site, w Wiring) error {
	var errs []error
	genace := t.ParametersOf(config.EnvGenaceURL)
	for _, p := range genace {
		l.Parameters[p] = w.GenaceURL
	}
	if len(genace) == 0 {
		errs = append(errs, fmt.Errorf("%s is not a !Ref of a parameter in any function: the local run cannot point it at the simulator", config.EnvGenaceURL))
	}
	secretIDs := append(t.OfType("AWS::SecretsManager::Secret"), t.ParametersOf(config.EnvGenaceKeySecret)...)
	if len(secretIDs) > 0 && w.Secrets == nil {
		errs = append(errs, errors.New("the template gives the functions secrets, and the wiring has no Secrets Manager to keep them"))
		secretIDs = nil
	}
	for _, id := range secretIDs {
		r, isResource := l.Resources[id]
		name := site.Name(id, "")
		if isResource {
			name = r["Name"]
		}
		arn, err := w.Secrets.Put(ctx, name, w.APIKey)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if isResource {
			r["Ref"], r["Id"] = arn, arn
		} else {
			l.Parameters[id] = arn
		}
	}
	if w.Mappings != nil {
		errs = append(errs, t.wireMappings(ctx, l, site, w.Mappings)...)
	}
	names := slices.Sorted(maps.Keys(w.Endpoints))
	if l.Variables == nil && len(names) > 0 {
		errs = append(errs, errors.New("Locals.Variables is nil (make Locals with Names)"))
	}
	for _, name := range names {
		for _, f := range t.Functions {
			if _, ok := f.Env[name]; !ok {
				errs = append(errs, fmt.Errorf("%s does not declare %s: sam local invoke could not point it at the local service (declare it empty under Globals.Function.Environment)", f.LogicalID, name))
			}
		}
		if l.Variables != nil {
			l.Variables[name] = w.Endpoints[name]
		}
	}
	declared := map[string]bool{}
	for _, f := range t.Functions {
		for name := range f.Env {
			if strings.HasPrefix(name, EndpointPrefix) {
				declared[name] = true
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(declared)) {
		if _, ok := w.Endpoints[name]; !ok {
			errs = append(errs, fmt.Errorf("the template declares %s, and the local stack has no service for it", name))
		}
	}
	for k, v := range w.Parameters {
		if _, ok := t.Parameters[k]; !ok {
			errs = append(errs, fmt.Errorf("no parameter %s to override", k))
			continue
		}
		l.Parameters[k] = v
	}
	return errors.Join(errs...)
}

// wireMappings makes the mappings the environment refers to in store,
// each invoking a stand-in for its function under the function's local
// name, and gives each the UUID store returns.
func (t *Template) wireMappings(ctx context.Context, l Locals, site Site, store MappingStore) []error {
	var errs []error
	for _, f := range t.Functions {
		for _, e := range f.Events {
			id := f.LogicalID + e.Name
			if e.Type != "SQS" || !t.envRefersTo(id) {
				continue
			}
			m := Mapping{ID: id, Function: site.Name(f.LogicalID, "")}
			var err error
			if m.QueueARN, err = t.Resolve(e.Properties["Queue"], l); err != nil {
				errs = append(errs, fmt.Errorf("%s Queue: %w", id, err))
				continue
			}
			if m.BatchSize, err = t.int32Prop(e.Properties["BatchSize"], l); err != nil {
				errs = append(errs, fmt.Errorf("%s BatchSize: %w", id, err))
				continue
			}
			if m.MaxConcurrency, err = t.int32Prop(mapOf(e.Properties["ScalingConfig"])["MaximumConcurrency"], l); err != nil {
				errs = append(errs, fmt.Errorf("%s ScalingConfig.MaximumConcurrency: %w", id, err))
				continue
			}
			uuid, err := store.Map(ctx, m)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			l.Resources[id]["Ref"] = uuid
		}
	}
	return errs
}

// int32Prop resolves a numeric property; 0 when it is absent.
func (t *Template) int32Prop(v any, l Locals) (int32, error) {
	if v == nil {
		return 0, nil
	}
	s, err := t.Resolve(v, l)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 32)
	return int32(n), err
}

// envRefersTo reports whether any function's environment refers to the
// resource id (!Ref id, or ${id} in a !Sub).
func (t *Template) envRefersTo(id string) bool {
	var refers func(v any) bool
	refers = func(v any) bool {
		switch x := v.(type) {
		case map[string]any:
			if x["Ref"] == id {
				return true
			}
			sub := x["Fn::Sub"]
			if list, ok := sub.([]any); ok && len(list) > 0 {
				sub = list[0]
			}
			if s, ok := sub.(string); ok && strings.Contains(s, "${"+id+"}") {
				return true
			}
			for _, w := range x {
				if refers(w) {
					return true
				}
			}
		case []any:
			for _, w := range x {
				if refers(w) {
					return true
				}
			}
		}
		return false
	}
	for _, f := range t.Functions {
		for _, v := range f.Env {
			if refers(v) {
				return true
			}
		}
	}
	return false
}

// Runtime is what the Lambda service adds to a function's own variables,
// reproduced locally: credentials (the local services', for the execution
// role's) and the logging variables Lambda derives from LoggingConfig.
// internal/dev/emulator adds the rest (AWS_REGION, AWS_LAMBDA_*, PATH...).
func (f Function) Runtime(accessKey, secretKey string) map[string]string {
	out := map[string]string{"AWS_ACCESS_KEY_ID": accessKey, "AWS_SECRET_ACCESS_KEY": secretKey}
	if f.LogFormat != "" {
		out["AWS_LAMBDA_LOG_FORMAT"] = f.LogFormat
	}
	if f.LogLevel != "" {
		out["AWS_LAMBDA_LOG_LEVEL"] = f.LogLevel
	}
	return out
}
