// Package testenv finds the real local services integration tests run
// against, and turns a missing one into a failure when CI requires them.
package testenv

import (
	"os"
	"testing"
)

// RequireVar is set (to 1) by CI and `make test`: a skipped integration
// test is then a failure, so a missing service can never pass silently.
const RequireVar = "GENJOBS_REQUIRE_INTEGRATION"

// Required reports whether integration tests must not skip.
func Required() bool { return os.Getenv(RequireVar) == "1" }

// Skip skips the test, or fails it when integration tests are required.
func Skip(t testing.TB, why string) {
	t.Helper()
	if Required() {
		t.Fatalf("integration test cannot run (%s) and %s=1 forbids skipping", why, RequireVar)
	}
	t.Skip(why)
}

// Endpoint returns the value of an endpoint variable such as
// AWS_ENDPOINT_URL_DYNAMODB, or skips (fails under RequireVar).
func Endpoint(t testing.TB, variable string) string {
	t.Helper()
	v := os.Getenv(variable)
	if v == "" {
		Skip(t, variable+" is not set")
	}
	return v
}
