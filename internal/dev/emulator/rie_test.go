package emulator

import (
	"slices"
	"testing"
	"time"
)

func TestEnvironmentIsExplicit(t *testing.T) {
	t.Setenv("RIE_LEAK", "from this process")
	env := environment(Config{
		Bootstrap: "/b/submit/bootstrap", Function: "submit", Timeout: 1500 * time.Millisecond, MemoryMB: 256, Region: "eu-west-1",
		Env: map[string]string{"FOO": "bar", "AWS_REGION": "overridden"},
	})
	for _, want := range []string{
		"FOO=bar", "AWS_REGION=eu-west-1", "AWS_DEFAULT_REGION=eu-west-1", "AWS_LAMBDA_FUNCTION_NAME=submit",
		"AWS_LAMBDA_FUNCTION_TIMEOUT=2", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256", "LAMBDA_TASK_ROOT=/b/submit",
		"PATH=/usr/local/bin:/usr/bin:/bin",
	} {
		if !slices.Contains(env, want) {
			t.Errorf("environment lacks %s: %v", want, env)
		}
	}
	if len(env) != 12 || !slices.IsSorted(env) {
		t.Errorf("environment %v: want the 11 reserved variables and FOO, sorted", env)
	}
}
