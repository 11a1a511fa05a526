package config

import (
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/message"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// every is a spec needing everything, sending observations delayed up to
// 30 minutes (beyond SQS's 15: the scheduler) and deliveries at once.
var every = Spec{
	Needs: []Need{NeedTable, NeedGenace, NeedVisibility, NeedArtifacts, NeedConcurrency, NeedPolicies, NeedSweep},
	FollowUps: func(Config) map[message.Action]time.Duration {
		return map[message.Action]time.Duration{message.ActionObserveGeneration: 30 * time.Minute, message.ActionDeliverArtifacts: 0}
	},
}

var full = map[string]string{
	EnvTable: "ops", EnvGenaceURL: "http://127.0.0.1:1", EnvGenaceKeySecret: "arn:secret",
	EnvObserveQueueURL: "o", EnvObserveQueueARN: "arn:o", EnvDeliverQueueURL: "v",
	EnvSchedulerRole: "arn:role", EnvScheduleGroup: "group", EnvScheduleDLQ: "arn:dlq",
	EnvVisibility: "180", EnvArtifactBucket: "bucket", EnvConcurrency: "4",
	EnvPolicies: `{"default":{"immediate":"5m"}}`, EnvSweepClaim: "120", EnvSweepOverdue: "300",
}

func TestLoad(t *testing.T) {
	t.Parallel()
	c, err := Load(env(full), every)
	if err != nil {
		t.Fatal(err)
	}
	if c.Visibility != 3*time.Minute || c.Concurrency != 4 || c.Policies.Default.Immediate != 5*time.Minute ||
		c.Queues[message.ActionObserveGeneration].ARN != "arn:o" || c.Queues[message.ActionDeliverArtifacts].URL != "v" ||
		c.SweepClaimTimeout != 2*time.Minute || c.SweepOverdue != 5*time.Minute {
		t.Fatalf("loaded %+v", c)
	}
	if _, ok := c.Queues[message.ActionSubmitGeneration]; ok {
		t.Errorf("a queue for submit_generation, which the spec does not send: %+v", c.Queues)
	}
	if got := c.DispatchConfig().Scheduled(); len(got) != 1 || got[0] != message.ActionObserveGeneration {
		t.Errorf("the dispatcher schedules %v, want only observe_generation", got)
	}
	tests := []struct {
		name  string
		spec  Spec
		unset []string
		set   map[string]string
		want  []string
	}{
		{"everything missing is named at once", every,
			[]string{EnvTable, EnvGenaceURL, EnvGenaceKeySecret, EnvObserveQueueURL, EnvVisibility, EnvConcurrency, EnvPolicies, EnvSweepClaim, EnvSweepOverdue},
			nil, []string{EnvTable, EnvGenaceURL, EnvGenaceKeySecret, EnvObserveQueueURL, EnvVisibility, EnvConcurrency, EnvPolicies, EnvSweepClaim, EnvSweepOverdue}},
		{"a scheduled action's ARN", every, []string{EnvObserveQueueARN}, nil,
			[]string{EnvObserveQueueARN + " is required: observe_generation can be delayed up to 30m0s, beyond SQS's 15m0s"}},
		{"the scheduler's role and group", every, []string{EnvSchedulerRole, EnvScheduleGroup}, nil,
			[]string{EnvSchedulerRole + " is required: observe_generation", EnvScheduleGroup + " is required: observe_generation"}},
		{"bad numbers", every, nil, map[string]string{EnvVisibility: "soon", EnvConcurrency: "0", EnvSweepOverdue: "-1"},
			[]string{EnvVisibility, EnvConcurrency, EnvSweepOverdue}},
		{"the artifact bucket", every, []string{EnvArtifactBucket}, nil, []string{EnvArtifactBucket + " is required"}},
		{"bad policy", every, nil, map[string]string{EnvPolicies: `{"default":{"longpoll":"5s"}}`}, []string{EnvPolicies, "longpoll"}},
		{"an action without queue variables", Spec{FollowUps: func(Config) map[message.Action]time.Duration {
			return map[message.Action]time.Duration{"render": 0}
		}}, nil, nil, []string{`follow-up "render"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := maps.Clone(full)
			for _, k := range tt.unset {
				delete(m, k)
			}
			maps.Copy(m, tt.set)
			_, err := Load(env(m), tt.spec)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestLoadAsksOnlyWhatTheSpecNeeds: a function whose follow-ups all fit
// SQS's delay needs no ARN and no scheduler settings, and one that sends
// nothing needs no queue at all.
func TestLoadAsksOnlyWhatTheSpecNeeds(t *testing.T) {
	t.Parallel()
	m := map[string]string{EnvTable: "ops", EnvDeliverQueueURL: "v", EnvConcurrency: "10"}
	c, err := Load(env(m), Spec{Needs: []Need{NeedTable, NeedConcurrency}, FollowUps: func(Config) map[message.Action]time.Duration {
		return map[message.Action]time.Duration{message.ActionDeliverArtifacts: 15 * time.Minute}
	}})
	if err != nil {
		t.Fatalf("deliveries within 15 minutes: %v", err)
	}
	if len(c.Queues) != 1 || c.Queues[message.ActionDeliverArtifacts].URL != "v" || c.Queues[message.ActionDeliverArtifacts].ARN != "" {
		t.Errorf("queues %+v, want the deliver queue's URL only", c.Queues)
	}
	if c, err = Load(env(map[string]string{EnvTable: "ops"}), Spec{Needs: []Need{NeedTable}}); err != nil || c.Queues != nil {
		t.Errorf("a function that sends nothing: %+v, %v", c.Queues, err)
	}
	if _, err := Load(env(m), Spec{FollowUps: AtOnce(message.Actions...)}); err == nil ||
		!strings.Contains(err.Error(), EnvDispatchQueueURL+" is required (the function sends submit_generation)") {
		t.Errorf("every action at once without their URLs: %v", err)
	}
}

// TestScheduleDLQRequiredWithScheduler: a function that may create
// schedules cannot start without their dead-letter queue, so no failed
// delivery is dropped silently.
func TestScheduleDLQRequiredWithScheduler(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		env     map[string]string
		wantErr bool
	}{
		{"no scheduler, no DLQ", map[string]string{}, false},
		{"scheduler without DLQ", map[string]string{EnvSchedulerRole: "arn:role"}, true},
		{"scheduler with DLQ", map[string]string{EnvSchedulerRole: "arn:role", EnvScheduleDLQ: "arn:dlq"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Load(env(tt.env), Spec{})
			if (err != nil) != tt.wantErr {
				t.Fatalf("Load: %v, want error %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), EnvScheduleDLQ) {
				t.Errorf("error %q does not name %s", err, EnvScheduleDLQ)
			}
			if err == nil && c.ScheduleDLQ != tt.env[EnvScheduleDLQ] {
				t.Errorf("ScheduleDLQ %q, want %q", c.ScheduleDLQ, tt.env[EnvScheduleDLQ])
			}
		})
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	c, err := Load(env(map[string]string{}), Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if c.RecordRetention != DefaultRecordRetentionDays*day || c.AuditRetention != DefaultAuditRetentionDays*day {
		t.Fatalf("defaults %v, %v; want %d and %d days", c.RecordRetention, c.AuditRetention, DefaultRecordRetentionDays, DefaultAuditRetentionDays)
	}
	c, err = Load(env(map[string]string{EnvRecordRetention: "60", EnvAuditRetention: "60"}), Spec{})
	if err != nil || c.RecordRetention != 60*day || c.AuditRetention != 60*day {
		t.Fatalf("60/60: %+v, %v", c, err)
	}
	// Audit entries outlive the records they explain.
	_, err = Load(env(map[string]string{EnvRecordRetention: "200", EnvAuditRetention: "100"}), Spec{})
	if err == nil || !strings.Contains(err.Error(), EnvAuditRetention) {
		t.Fatalf("audit shorter than records: %v, want an error naming %s", err, EnvAuditRetention)
	}
}

// TestBounds: every bounded variable accepts exactly [Min, Max], so the
// template's MinValue and MaxValue (compared with Bounds) are what Load
// enforces at cold start.
func TestBounds(t *testing.T) {
	t.Parallel()
	for _, name := range []string{EnvVisibility, EnvConcurrency, EnvSweepClaim, EnvSweepOverdue, EnvRecordRetention, EnvAuditRetention, EnvObserveHold} {
		b, ok := Bounds[name]
		if !ok {
			t.Errorf("%s has no Bound", name)
			continue
		}
		for _, tt := range []struct {
			v  int
			ok bool
		}{{b.Min - 1, false}, {b.Min, true}, {b.Max, true}, {b.Max + 1, false}} {
			m := map[string]string{name: strconv.Itoa(tt.v)}
			switch name { // keep audit >= records
			case EnvRecordRetention:
				m[EnvAuditRetention] = strconv.Itoa(Bounds[EnvAuditRetention].Max)
			case EnvAuditRetention:
				m[EnvRecordRetention] = strconv.Itoa(Bounds[EnvRecordRetention].Min)
			}
			_, err := Load(env(m), Spec{})
			if (err == nil) != tt.ok {
				t.Errorf("%s=%d: %v, want accepted %v", name, tt.v, err, tt.ok)
			}
			if err != nil && !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%d: error %q does not name it", name, tt.v, err)
			}
		}
	}
}

// TestLoadRunsTheSpecsCrossCheck: the spec's Check sees the settings read
// (the new ones included) and its error is Load's; it is not run when a
// setting is already missing or malformed.
func TestLoadRunsTheSpecsCrossCheck(t *testing.T) {
	t.Parallel()
	var seen Config
	spec := Spec{Needs: []Need{NeedSubmitTimeout, NeedBatchSize, NeedOverdue}, Check: func(c Config) error {
		seen = c
		return errors.New("bound broken")
	}}
	m := map[string]string{EnvSubmitTimeout: "60", EnvBatchSize: "10", EnvSweepOverdue: "300"}
	if _, err := Load(env(m), spec); err == nil || !strings.Contains(err.Error(), "configuration: bound broken") {
		t.Fatalf("Load: %v; want the check's error", err)
	}
	if seen.SubmitTimeout != time.Minute || seen.BatchSize != 10 || seen.SweepOverdue != 5*time.Minute {
		t.Fatalf("the check saw %+v", seen)
	}
	for _, drop := range []string{EnvSubmitTimeout, EnvBatchSize, EnvSweepOverdue} {
		broken := maps.Clone(m)
		delete(broken, drop)
		if _, err := Load(env(broken), spec); err == nil || !strings.Contains(err.Error(), drop+" is required") || strings.Contains(err.Error(), "bound broken") {
			t.Errorf("without %s: %v; want it named, and no cross-check", drop, err)
		}
	}
	if _, err := Load(env(map[string]string{EnvSubmitTimeout: "61", EnvBatchSize: "10", EnvSweepOverdue: "300"}), spec); err == nil ||
		!strings.Contains(err.Error(), EnvSubmitTimeout+`="61": want a whole number from 25 to 60`) {
		t.Errorf("a submit timeout above its bound: %v", err)
	}
}

// TestCatalog: MODEL_CATALOG is read into the catalog, and each unusable
// one is refused at load, naming the variable and what is wrong.
func TestCatalog(t *testing.T) {
	t.Parallel()
	spec := Spec{Needs: []Need{NeedCatalog, NeedInputLimit}}
	for _, tc := range []struct {
		name, catalog, limit string
		want                 map[string]int64
		err                  string
	}{
		{"the default", DefaultModelCatalog, "32768", map[string]int64{"flux-pro-2": 12, "genace-video-2": 40}, ""},
		{"a free model", `{"draft": 0}`, "1024", map[string]int64{"draft": 0}, ""},
		{"missing", "", "32768", nil, "MODEL_CATALOG is required"},
		{"empty", `{}`, "32768", nil, "MODEL_CATALOG: no model"},
		{"a list", `["flux-pro-2"]`, "32768", nil, "MODEL_CATALOG: want a JSON object"},
		{"negative", `{"m": -1}`, "32768", nil, `MODEL_CATALOG: model "m": want a whole number`},
		{"fractional", `{"m": 1.5}`, "32768", nil, `model "m": want a whole number`},
		{"a bad name", `{"a model": 1}`, "32768", nil, `model "a model": want letters`},
		{"twice", `{"m": 1, "m": 2}`, "32768", nil, `model "m" twice`},
		{"trailing data", `{"m": 1} {}`, "32768", nil, "data after the JSON object"},
		{"limit missing", DefaultModelCatalog, "", nil, "MAX_INPUT_BYTES is required"},
		{"limit too large", DefaultModelCatalog, "300000", nil, `MAX_INPUT_BYTES="300000": want a whole number from 1024 to 262144`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Load(env(map[string]string{EnvModelCatalog: tc.catalog, EnvMaxInputBytes: tc.limit}), spec)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !maps.Equal(c.Catalog, tc.want) || strconv.Itoa(c.MaxInputBytes) != tc.limit {
				t.Fatalf("catalog %v limit %d (%v), want %v %s", c.Catalog, c.MaxInputBytes, err, tc.want, tc.limit)
			}
		})
	}
}
