package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/pipeline"
	"github.com/genjobs/genjobs/internal/dev/workload"
	"github.com/genjobs/genjobs/internal/operator"
)

// fast are the local flags that make a run take seconds.
var fast = []string{"--queue-for", "50ms", "--run-for", "200ms", "--refund-settle", "200ms", "--long-poll", "1s", "--accounting-budget", "1s"}

// TestLocalWrongKeyStopsEarly: a Genace that refuses the key stops the
// run at once with the cause and exit status 1. (Before: every operation
// ended rejected in 0.2 s, with exit status 0 and the cause visible only
// in plan.)
func TestLocalWrongKeyStopsEarly(t *testing.T) {
	t.Parallel()
	sim := genacesim.New(genacesim.Config{APIKey: "the-right-key", Seed: 1}, clock.Real{})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	start := time.Now()
	code, out, errOut := genjobs(t, "local", "--state", t.TempDir(), "--workload", writeWorkload(t), "--timeout", "60s",
		"--genace-url", srv.URL, "--genace-key", "a-wrong-key")
	if code != 1 || !strings.Contains(errOut, "Genace answered 401 unauthorized: check GENACE_API_KEY") || time.Since(start) > 20*time.Second {
		t.Fatalf("exit %d after %v\nstdout:\n%s\nstderr:\n%s", code, time.Since(start), out, errOut)
	}
	if strings.Contains(errOut, "a-wrong-key") || strings.Contains(out, "a-wrong-key") {
		t.Error("the key was printed")
	}
}

// TestLocalUnreachableGenace: an unreachable Genace shows its cause in the
// progress within seconds, and the run gives up with it after
// --give-up-after instead of waiting out --timeout in silence.
func TestLocalUnreachableGenace(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close() // nothing listens there now
	start := time.Now()
	code, out, errOut := genjobs(t, "local", "--state", t.TempDir(), "--workload", writeWorkload(t), "--timeout", "120s",
		"--genace-url", url, "--genace-key", "k", "--give-up-after", "3s")
	if code != 1 || !strings.Contains(errOut, "cannot reach Genace for 3s") || !strings.Contains(errOut, "connection refused") || time.Since(start) > 60*time.Second {
		t.Fatalf("exit %d after %v\nstdout:\n%s\nstderr:\n%s", code, time.Since(start), out, errOut)
	}
	if !strings.Contains(out, "Genace: unreachable:") {
		t.Errorf("the progress never showed the cause:\n%s", out)
	}
}

// TestLocalInterrupted: Ctrl-C prints "interrupted", keeps the state (the
// store, the simulator's jobs and a report of every operation) and exits
// 130, whenever it comes. (Before: "TIMED OUT", "context canceled" and exit
// 1; and an interrupt while seeding wrote no report.)
func TestLocalInterrupted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		after time.Duration
	}{
		// While the records are being created.
		{"seeding", time.Millisecond},
		// Renders of a minute: still running when the interrupt comes,
		// their observations holding 30 s long polls.
		{"running", 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := filepath.Join(t.TempDir(), "state")
			ctx, cancel := context.WithTimeout(context.Background(), tc.after)
			defer cancel()
			var out, errOut bytes.Buffer
			begin := time.Now()
			code := run(ctx, []string{"local", "--state", root, "--quiet", "--run-for", "60s"}, &out, &errOut)
			// The chains in flight die with the run; before, it waited them
			// out (about 90 s).
			if took := time.Since(begin); took > 15*time.Second {
				t.Errorf("the interrupted run took %s to stop", took.Round(time.Second))
			}
			if strings.Contains(out.String(), "genace_read_failed") {
				t.Errorf("the interrupt was recorded as a failed read of Genace:\n%s", out.String())
			}
			if code != 130 || !strings.Contains(errOut.String(), "interrupted") || strings.Contains(out.String()+errOut.String(), "TIMED OUT") ||
				strings.Contains(errOut.String(), "context canceled") || !strings.Contains(out.String(), "local --resume") {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
			}
			for _, f := range []string{"genjobs.db", "report.json", simStateFile} {
				if _, err := os.Stat(filepath.Join(root, operator.LatestLink, f)); err != nil {
					t.Errorf("state not kept: %v", err)
				}
			}
			b, err := os.ReadFile(filepath.Join(root, operator.LatestLink, "report.json"))
			if err != nil {
				t.Fatal(err)
			}
			var rep pipeline.Report
			if err := json.Unmarshal(b, &rep); err != nil || len(rep.Operations) != len(workload.Demo()) || !rep.Interrupted {
				t.Errorf("report (%v): %d operations, interrupted %v; want all %d, interrupted", err, len(rep.Operations), rep.Interrupted, len(workload.Demo()))
			}
		})
	}
}

// TestLocalProgress: a progress line is printed when something changed,
// never the same line twice in a row (before: the same line every 5 s),
// and an operation the intake API refuses shows why in the summary table.
func TestLocalProgress(t *testing.T) {
	t.Parallel()
	w := filepath.Join(t.TempDir(), "w.jsonl")
	if err := os.WriteFile(w, []byte(`{"operation_id":"op-ok","user_id":"u","model":"m","input":{"p":1},"budget_credits":50}
{"operation_id":"op-poor","user_id":"u","model":"m","input":{"p":1},"budget_credits":1}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := genjobs(t, append([]string{"local", "--state", t.TempDir(), "--workload", w, "--timeout", "90s"}, fast...)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	stamp := regexp.MustCompile(`^\[\d\d:\d\d:\d\d\] `)
	rate := regexp.MustCompile(` \(\d+\.\d/s\)`)
	var prev string
	lines := 0
	for _, l := range strings.Split(out, "\n") {
		if !stamp.MatchString(l) {
			continue
		}
		lines++
		l = rate.ReplaceAllString(stamp.ReplaceAllString(l, ""), "")
		if l == prev {
			t.Errorf("the same progress line twice: %q", l)
		}
		prev = l
	}
	if lines == 0 {
		t.Fatalf("no progress lines:\n%s", out)
	}
	// The workload goes through the intake API, which refuses a budget
	// below the model's estimate at the door: nothing is written or sent,
	// the run goes on with the rest, and the summary says why.
	if !regexp.MustCompile(`op-poor\s+refused\s.*budget_too_low \(budget_credits\): 1 credits, below the 10`).MatchString(out) {
		t.Errorf("the summary table does not show why op-poor was refused:\n%s", out)
	}
	if !regexp.MustCompile(`op-ok\s+delivered`).MatchString(out) || !strings.Contains(out, "refused 1") {
		t.Errorf("the run did not carry on with op-ok past the refusal:\n%s", out)
	}
}
