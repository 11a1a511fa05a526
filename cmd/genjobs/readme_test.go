package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestREADMERunSample keeps the README's `make run` sample true: every
// line of it has the shape of a line a real demo run prints (numbers, job
// and run ids, times and paths aside), in the same order, and its last
// progress line is the real run's last.
func TestREADMERunSample(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	at := strings.Index(readme, "`make run` drives")
	if at < 0 {
		t.Fatal("README.md has no `make run` sample")
	}
	start := strings.Index(readme[at:], "```\n")
	end := strings.Index(readme[at+start+4:], "```")
	if start < 0 || end < 0 {
		t.Fatal("README.md's `make run` sample is not a fenced block")
	}
	sample := strings.Split(strings.TrimSpace(readme[at+start+4:at+start+4+end]), "\n")

	root := filepath.Join(t.TempDir(), "state")
	// The demo's shape holds at these timings too (shorter renders let
	// Genace's operators fail the reconcile-fail job too late).
	code, out, errOut := genjobs(t, "local", "--state", root, "--timeout", "90s",
		"--queue-for", "100ms", "--run-for", "800ms", "--refund-settle", "300ms", "--long-poll", "2s", "--accounting-budget", "2s")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	real := strings.Split(strings.TrimSpace(strings.ReplaceAll(out, root, ".genjobs")), "\n")

	// Event lines are printed as the events are written, in no set order
	// with the progress lines around them.
	isEvent := func(l string) bool { return strings.HasPrefix(l, "[") && strings.Contains(l, "] event ") }
	var realShapes, realProgress, realEvents []string
	for _, l := range real {
		if isEvent(l) {
			realEvents = append(realEvents, shape(l))
		} else if strings.HasPrefix(l, "[") {
			realProgress = append(realProgress, shape(l))
		} else {
			realShapes = append(realShapes, shape(l))
		}
	}
	next, lastProgress := 0, ""
	for _, l := range sample {
		switch {
		case l == "...":
		case isEvent(l):
			if !slices.Contains(realEvents, shape(l)) {
				t.Errorf("README's event line is not printed by a real run:\n%s", l)
			}
		case strings.HasPrefix(l, "["):
			lastProgress = shape(l)
			if !strings.HasPrefix(lastProgress, "[N:N:N] N/N settled (N/s) | ") {
				t.Errorf("README progress line has no progress shape: %q", l)
			}
		default:
			i := index(realShapes[next:], shape(l))
			if i < 0 {
				t.Errorf("README's sample line is not printed by a real run (or not in this order):\n%s", l)
				continue
			}
			next += i + 1
		}
	}
	if len(realProgress) == 0 || lastProgress != realProgress[len(realProgress)-1] {
		t.Errorf("README's last progress line\n%s\nis not the real run's last\n%s", lastProgress, realProgress[len(realProgress)-1:])
	}
}

var (
	runID  = regexp.MustCompile(`\d{8}T\d{6}Z-[0-9a-f]{6}`)
	jobID  = regexp.MustCompile(`job_[0-9a-z]{20}`)
	number = regexp.MustCompile(`\d+(\.\d+)?`)
	spaces = regexp.MustCompile(`\s+`)
)

// shape is a line with what changes from run to run taken out.
func shape(l string) string {
	l = runID.ReplaceAllString(l, "RUN")
	l = jobID.ReplaceAllString(l, "JOB")
	l = number.ReplaceAllString(l, "N")
	return spaces.ReplaceAllString(strings.TrimSpace(l), " ")
}

func index(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}
