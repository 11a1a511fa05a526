package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/pipeline"
	"github.com/genjobs/genjobs/internal/operation"
)

// The example, run against a serving local run as the README says: it
// creates three operations through the API, hears each end from its
// completion event, and every output it names is on disk with the sha256
// the event gives.
func TestExampleAgainstALocalRun(t *testing.T) {
	// The example signs with the default credential chain, as a deployed
	// application does; the local run accepts any signature.
	t.Setenv("AWS_ACCESS_KEY_ID", "example")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "example")
	t.Setenv("AWS_REGION", "us-east-1")
	sim := genacesim.New(genacesim.Config{APIKey: "k",
		DefaultModel: genacesim.ModelConfig{Price: 10, QueueFor: 200 * time.Millisecond, RunFor: time.Second, OutputCount: 1}}, clock.Real{})
	state := t.TempDir()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	urls := make(chan string, 1)
	type ran struct {
		rep *pipeline.Report
		err error
	}
	done := make(chan ran, 1)
	go func() {
		rep, err := pipeline.Run(ctx, pipeline.Config{StateDir: state, Serve: true, Sim: sim, GenaceKey: "k", Timeout: 3 * time.Minute,
			LongPoll: 2 * time.Second, Prices: map[string]int64{"flux-pro-2": 10}, OnServe: func(u string) { urls <- u }})
		done <- ran{rep, err}
	}()
	var url string
	select {
	case url = <-urls:
	case r := <-done:
		t.Fatalf("the local run ended before serving: %v", r.err)
	}

	var out bytes.Buffer
	err := run(ctx, []string{"--url", url, "--events", pipeline.EventsPath(state), "--prefix", "t", "--timeout", "2m"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
	if n := strings.Count(out.String(), "created t-"); n != 3 {
		t.Errorf("%d creates, want 3:\n%s", n, out.String())
	}
	outputs := regexp.MustCompile(`(?m)^  output 0: (\S+) \((\d+) bytes, sha256 ([0-9a-f]{64})\)$`).FindAllStringSubmatch(out.String(), -1)
	if n := strings.Count(out.String(), ": Operation Delivered (delivered)"); n != 3 || len(outputs) != 3 {
		t.Fatalf("%d delivered events and %d outputs, want 3 of each:\n%s", n, len(outputs), out.String())
	}
	for _, o := range outputs {
		b, err := os.ReadFile(o[1])
		if sum := sha256.Sum256(b); err != nil || hex.EncodeToString(sum[:]) != o[3] {
			t.Errorf("output %s: %v, or its sha256 is not the event's", o[1], err)
		}
	}

	stop()
	r := <-done
	if r.rep == nil {
		t.Fatalf("no report: %v", r.err)
	}
	if len(r.rep.Operations) != 3 || r.rep.Totals.Posts != 3 {
		t.Fatalf("the run reports %d operations and %d POSTs, want the example's 3 and one POST each", len(r.rep.Operations), r.rep.Totals.Posts)
	}
	for _, op := range r.rep.Operations {
		if op.Phase != operation.PhaseDelivered {
			t.Errorf("%s: %s, want delivered", op.OperationID, op.Phase)
		}
	}
}
