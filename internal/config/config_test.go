package config

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/message"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoad(t *testing.T) {
	t.Parallel()
	full := map[string]string{
		EnvTable: "ops", EnvGenaceURL: "http://127.0.0.1:1", EnvGenaceKey: "k",
		EnvDispatchQueueURL: "d", EnvObserveQueueURL: "o", EnvDeliverQueueURL: "v", EnvObserveQueueARN: "arn:o",
		EnvVisibility: "180", EnvArtifactBucket: "bucket", EnvConcurrency: "4",
		EnvPolicies: `{"default":{"immediate":"5m"}}`,
	}
	c, err := Load(env(full), NeedTable, NeedGenace, NeedQueues, NeedVisibility, NeedArtifacts)
	if err != nil {
		t.Fatal(err)
	}
	if c.Visibility != 3*time.Minute || c.Concurrency != 4 || c.Policies.Default.Immediate != 5*time.Minute ||
		c.Queues[message.ObserveGeneration].ARN != "arn:o" {
		t.Fatalf("loaded %+v", c)
	}
	tests := []struct {
		name  string
		unset []string
		set   map[string]string
		want  []string
	}{
		{"everything missing is named at once", []string{EnvTable, EnvGenaceURL, EnvGenaceKey, EnvObserveQueueURL}, nil,
			[]string{EnvTable, EnvGenaceURL, EnvGenaceKeySecret, EnvObserveQueueURL}},
		{"bad numbers", nil, map[string]string{EnvVisibility: "soon", EnvConcurrency: "0"}, []string{EnvVisibility, EnvConcurrency}},
		{"two artifact stores", nil, map[string]string{EnvArtifactBucket: "b", EnvArtifactDir: "/tmp/x"}, []string{EnvArtifactBucket, EnvArtifactDir}},
		{"bad policy", nil, map[string]string{EnvPolicies: `{"default":{"longpoll":"5s"}}`}, []string{EnvPolicies, "longpoll"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := map[string]string{}
			for k, v := range full {
				m[k] = v
			}
			for _, k := range tt.unset {
				delete(m, k)
			}
			for k, v := range tt.set {
				m[k] = v
			}
			_, err := Load(env(m), NeedTable, NeedGenace, NeedQueues, NeedVisibility, NeedArtifacts)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
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
			c, err := Load(env(tt.env))
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
	c, err := Load(env(map[string]string{}))
	if err != nil {
		t.Fatal(err)
	}
	if c.RecordRetention != DefaultRecordRetentionDays*day || c.AuditRetention != DefaultAuditRetentionDays*day {
		t.Fatalf("defaults %v, %v; want %d and %d days", c.RecordRetention, c.AuditRetention, DefaultRecordRetentionDays, DefaultAuditRetentionDays)
	}
	c, err = Load(env(map[string]string{EnvRecordRetention: "60", EnvAuditRetention: "60"}))
	if err != nil || c.RecordRetention != 60*day || c.AuditRetention != 60*day {
		t.Fatalf("60/60: %+v, %v", c, err)
	}
	// Audit entries outlive the records they explain.
	_, err = Load(env(map[string]string{EnvRecordRetention: "200", EnvAuditRetention: "100"}))
	if err == nil || !strings.Contains(err.Error(), EnvAuditRetention) {
		t.Fatalf("audit shorter than records: %v, want an error naming %s", err, EnvAuditRetention)
	}
}

// TestBounds: every bounded variable accepts exactly [Min, Max], so the
// template's MinValue and MaxValue (compared with Bounds) are what Load
// enforces at cold start.
func TestBounds(t *testing.T) {
	t.Parallel()
	for _, name := range []string{EnvVisibility, EnvConcurrency, EnvSweepClaim, EnvSweepOverdue, EnvRecordRetention, EnvAuditRetention} {
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
			_, err := Load(env(m))
			if (err == nil) != tt.ok {
				t.Errorf("%s=%d: %v, want accepted %v", name, tt.v, err, tt.ok)
			}
			if err != nil && !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%d: error %q does not name it", name, tt.v, err)
			}
		}
	}
}
