//go:build integration

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/dev/pipeline"
	"github.com/genjobs/genjobs/internal/dev/testenv"
)

// TestLocalOnATableHintsRunAsPrinted: a local run on a DynamoDB table
// prints hints that carry --table and the endpoint, and they run as
// printed after a newer run moved latest; the resume reads the run's
// operations from the table, with no report to go by.
func TestLocalOnATableHintsRunAsPrinted(t *testing.T) {
	endpoint := testenv.Endpoint(t, "AWS_ENDPOINT_URL_DYNAMODB")
	_, table := handlertest.DynamoTable(t)
	state := filepath.Join(t.TempDir(), "state")
	timing := []string{"--quiet", "--long-poll", "2s", "--accounting-budget", "2s", "--timeout", "90s"}
	code, out, errOut := genjobs(t, append([]string{"local", "--state", state, "--table", table, "--dynamodb-endpoint", endpoint,
		"--queue-for", "100ms", "--run-for", "800ms", "--refund-settle", "300ms"}, timing...)...)
	if code != 0 {
		t.Fatalf("local on %s: %d\n%s\n%s", table, code, out, errOut)
	}
	next := regexp.MustCompile(`(?m)^Next: \S.* (reviews .*\S)   \(then`).FindStringSubmatch(out)
	resume := regexp.MustCompile(`(?m)^  \S.* (local --resume .*)$`).FindStringSubmatch(out)
	if next == nil || resume == nil || !strings.Contains(next[1], "--table "+table+" --dynamodb-endpoint "+endpoint) ||
		!strings.Contains(resume[1], "--table "+table) {
		t.Fatalf("hints without the table:\n%s", out)
	}
	if code, out, errOut := genjobs(t, "local", "--state", state, "--quiet", "--workload", writeWorkload(t), "--long-poll", "2s"); code != 0 {
		t.Fatalf("newer run: %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = genjobs(t, strings.Fields(next[1])...)
	if code != 0 || !strings.Contains(out, "demo-lost-response") {
		t.Fatalf("next hint %q: %d %s %s", next[1], code, out, errOut)
	}
	if err := os.Remove(pipeline.ReportPath(runDirOf(t, resume[1]))); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = genjobs(t, append(strings.Fields(resume[1]), timing...)...)
	if code != 0 || !strings.Contains(out, "resuming run") || !regexp.MustCompile(`demo-success-1\s+delivered`).MatchString(out) {
		t.Fatalf("resume hint %q: %d\n%s\n%s", resume[1], code, out, errOut)
	}
	// Another run on the same table: a resume of the first would sweep and
	// re-send the other's operations too, so it is refused, naming why.
	if code, out, errOut := genjobs(t, append([]string{"local", "--state", state, "--table", table, "--dynamodb-endpoint", endpoint,
		"--workload", writeWorkload(t)}, timing...)...); code != 0 {
		t.Fatalf("second run on %s: %d\n%s\n%s", table, code, out, errOut)
	}
	code, out, errOut = genjobs(t, append(strings.Fields(resume[1]), timing...)...)
	if code == 0 || !strings.Contains(errOut, "operations this run did not create") {
		t.Fatalf("resume on a shared table: %d\n%s\n%s", code, out, errOut)
	}
}
