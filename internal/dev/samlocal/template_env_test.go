package samlocal_test

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/dev/invoke"
	"github.com/genjobs/genjobs/internal/dev/modroot"
	"github.com/genjobs/genjobs/internal/dev/samlocal"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/schedule"
)

// needs maps each function (its folder under functions/) to what its
// main package loads: the handler package's config.Spec, as the one
// topology lists it.
var needs = func() map[string]config.Spec {
	out := map[string]config.Spec{}
	for _, f := range topology.Stack.Functions {
		out[f.Name] = f.Env
	}
	return out
}()

// endpoints are the local endpoint variables a local stack fills.
var endpoints = map[string]string{
	"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:8000", "AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:4100",
	"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000", "AWS_ENDPOINT_URL_SECRETS_MANAGER": "http://127.0.0.1:9001",
	"AWS_ENDPOINT_URL_SCHEDULER": "http://127.0.0.1:9001", "AWS_ENDPOINT_URL_EVENTBRIDGE": "http://127.0.0.1:4100",
	"AWS_ENDPOINT_URL_LAMBDA": "http://127.0.0.1:4100",
}

func loadTemplate(t *testing.T) *samlocal.Template {
	t.Helper()
	root, err := modroot.Find("")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := invoke.LoadTemplate(root)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// localEnv resolves the template onto a local site, writes and reads back
// the env file as sam local invoke does, and returns each function's
// environment (nil and the error when any step fails).
func localEnv(t *testing.T, tmpl *samlocal.Template) (map[string]map[string]string, error) {
	t.Helper()
	site := samlocal.Site{Region: "us-east-1", AccountID: "000000000000", Prefix: "genjobs-test", SQS: "http://127.0.0.1:4100"}
	l := tmpl.Names(site)
	if err := tmpl.Wire(context.Background(), l, site, samlocal.Wiring{GenaceURL: "http://127.0.0.1:3000", APIKey: "k", Secrets: secretNames{}, Endpoints: endpoints}); err != nil {
		return nil, err
	}
	f, err := tmpl.EnvFile(l)
	if err != nil {
		return nil, err
	}
	text, err := f.Encode()
	if err != nil {
		return nil, err
	}
	back, err := samlocal.ParseEnvFile(text)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, fn := range tmpl.Functions {
		if out[fn.LogicalID], err = tmpl.Apply(back, fn.LogicalID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// coldStart is the part of a function's cold start that reads its
// environment: config.Load with the function's Spec, then the follow-up
// dispatcher (coldstart.Load's order), with a scheduler when the
// configuration says one is needed. Nothing is contacted.
func coldStart(env map[string]string, spec config.Spec) error {
	cfg, err := config.Load(func(k string) string { return env[k] }, spec)
	if err != nil || spec.FollowUps == nil {
		return err
	}
	dc := cfg.DispatchConfig()
	var sched schedule.ScheduleCreator
	if len(dc.Scheduled()) > 0 {
		sched = creator{}
	}
	_, err = schedule.NewDispatcher(dc, sender{}, sched, nil)
	return err
}

// secretNames stands in for Secrets Manager: coldStart reads no secret,
// so only the ARN a real one would give matters.
type secretNames struct{}

func (secretNames) Put(_ context.Context, name, _ string) (string, error) {
	return "arn:aws:secretsmanager:us-east-1:000000000000:secret:" + name + "-AbCdEf", nil
}

type sender struct{}

func (sender) Send(context.Context, string, []byte, time.Duration) (string, error) { return "", nil }

type creator struct{}

func (creator) CreateSchedule(context.Context, schedule.Schedule) error { return nil }

// TestTemplateGivesEachFunctionWhatItNeeds: each function's environment,
// resolved from template.yaml onto a local stack and read back from SAM's
// --env-vars file, passes that function's real configuration loading.
// Then every variable is deleted in turn from a parsed copy of the
// template: the same steps must fail, naming the variable. So the
// template gives each function everything its code asks for and nothing
// it does not read; the endpoint variables, which only local runs fill,
// are named by the resolution itself.
func TestTemplateGivesEachFunctionWhatItNeeds(t *testing.T) {
	t.Parallel()
	tmpl := loadTemplate(t)
	envs, err := localEnv(t, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, fn := range tmpl.Functions {
		names = append(names, fn.Dir())
	}
	if got, want := slices.Sorted(slices.Values(names)), slices.Sorted(maps.Keys(needs)); !slices.Equal(got, want) {
		t.Fatalf("the template's functions %v, the specs here %v", got, want)
	}
	for i, fn := range tmpl.Functions {
		spec := needs[names[i]]
		t.Run(fn.LogicalID, func(t *testing.T) {
			t.Parallel()
			if err := coldStart(envs[fn.LogicalID], spec); err != nil {
				t.Fatalf("the template's environment does not start %s: %v", fn.LogicalID, err)
			}
			for _, name := range fn.Names() {
				broken := without(tmpl, fn.LogicalID, name)
				envs, err := localEnv(t, broken)
				if err == nil {
					err = coldStart(envs[fn.LogicalID], spec)
				}
				if err == nil {
					t.Errorf("without %s, %s still starts: the template sets a variable it does not read", name, fn.LogicalID)
				} else if !strings.Contains(err.Error(), name) {
					t.Errorf("without %s, %s fails without naming it: %v", name, fn.LogicalID, err)
				}
			}
		})
	}
}

// without is a copy of tmpl in which the function id lacks the variable.
func without(tmpl *samlocal.Template, id, name string) *samlocal.Template {
	c := *tmpl
	c.Functions = slices.Clone(tmpl.Functions)
	for i, fn := range c.Functions {
		if fn.LogicalID == id {
			fn.Env = maps.Clone(fn.Env)
			delete(fn.Env, name)
			c.Functions[i] = fn
		}
	}
	return &c
}

// TestTemplateBoundsAreCrossCheckedAtColdStart: a template whose settings
// contradict each other (each a parameter a deployer may set) stops the
// function that would misbehave at its cold start, with an error naming
// both values; the settings that agree start it.
func TestTemplateBoundsAreCrossCheckedAtColdStart(t *testing.T) {
	t.Parallel()
	tmpl := loadTemplate(t)
	for _, tc := range []struct {
		name     string
		params   map[string]string
		function string
		want     string // "" when it starts
	}{
		// Bounds that hold whatever the other values are sit in the
		// parameters' MinValue, so CloudFormation refuses a breach before
		// a deploy; a function refuses it too.
		{"claim timeout at submit's longest timeout", map[string]string{"SweepClaimTimeoutSeconds": "60"}, "SweepFunction",
			`SWEEP_CLAIM_TIMEOUT_SECONDS="60": want a whole number from 61 to 86400`},
		{"claim timeout just above it", map[string]string{"SweepClaimTimeoutSeconds": "61"}, "SweepFunction", ""},
		{"overdue below a chain", map[string]string{"SweepOverdueSeconds": "240"}, "ObserveFunction",
			`SWEEP_OVERDUE_SECONDS="240": want a whole number from 246 to 86400`},
		{"overdue just above a chain and its write", map[string]string{"SweepOverdueSeconds": "246"}, "ObserveFunction", ""},
		{"concurrency below the batch", map[string]string{"BatchConcurrency": "5"}, "ObserveFunction",
			"BATCH_CONCURRENCY is 5, want at least BATCH_SIZE 10"},
		{"concurrency at a smaller batch", map[string]string{"BatchConcurrency": "5", "ObserveBatchSize": "5"}, "ObserveFunction", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := *tmpl
			c.Parameters = maps.Clone(tmpl.Parameters)
			for name, v := range tc.params {
				p, ok := c.Parameters[name]
				if !ok {
					t.Fatalf("no parameter %s", name)
				}
				p.Default = &v
				c.Parameters[name] = p
			}
			envs, err := localEnv(t, &c)
			if err != nil {
				t.Fatal(err)
			}
			fn, _ := c.Function(tc.function)
			err = coldStart(envs[tc.function], needs[fn.Dir()])
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("%s does not start: %v", tc.function, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("%s cold start: %v; want %q", tc.function, err, tc.want)
			}
		})
	}
}

// mappingUUIDs records the mappings Wire makes and names each by a UUID
// of its own.
type mappingUUIDs struct{ made []samlocal.Mapping }

func (m *mappingUUIDs) Map(_ context.Context, mp samlocal.Mapping) (string, error) {
	m.made = append(m.made, mp)
	return "uuid-of-" + mp.ID, nil
}

// TestWireMakesTheMappingsTheEnvironmentNames: the sweep's
// OBSERVE_MAPPING_ID names observe's mapping, so Wire makes that one (and
// no other: nothing else names one) from the event's queue, batch size and
// ceiling, and the sweep is given the UUID the store returned.
func TestWireMakesTheMappingsTheEnvironmentNames(t *testing.T) {
	tmpl := loadTemplate(t)
	site := samlocal.Site{Region: "us-east-1", AccountID: "000000000000", Prefix: "genjobs-test", SQS: "http://127.0.0.1:4100"}
	l := tmpl.Names(site)
	store := &mappingUUIDs{}
	if err := tmpl.Wire(context.Background(), l, site, samlocal.Wiring{GenaceURL: "http://127.0.0.1:3000", APIKey: "k", Secrets: secretNames{},
		Mappings: store, Endpoints: endpoints}); err != nil {
		t.Fatal(err)
	}
	batch := tmpl.Parameters["ObserveBatchSize"].Default
	if batch == nil {
		t.Fatal("ObserveBatchSize has no default")
	}
	want := samlocal.Mapping{ID: "ObserveFunctionObserve", Function: "genjobs-test-observe-function",
		QueueARN: l.Resources["ObserveQueue"]["Arn"], MaxConcurrency: 8}
	if n, err := strconv.Atoi(*batch); err != nil {
		t.Fatal(err)
	} else {
		want.BatchSize = int32(n)
	}
	if len(store.made) != 1 || store.made[0] != want {
		t.Fatalf("mappings made %+v, want only %+v", store.made, want)
	}
	env, err := tmpl.Environment("SweepFunction", l)
	if err != nil {
		t.Fatal(err)
	}
	if got := env[config.EnvObserveMapping]; got != "uuid-of-ObserveFunctionObserve" {
		t.Errorf("the sweep's %s = %q, want the store's UUID", config.EnvObserveMapping, got)
	}
}
