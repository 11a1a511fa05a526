package config

import (
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
