// Command render is an application's side of genjobs in one program: it
// buys renders through the intake API with the public client, hears how
// each ended from its completion event, and prints where the outputs are.
//
// Against a local run (make example does both):
//
//	genjobs local --serve        # prints the API's URL and its events file
//	AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_REGION=us-east-1 \
//	  go run ./client/examples/render --url http://127.0.0.1:8790 --events .genjobs/latest/events.jsonl
//
// Deployed, the events reach an application through an EventBridge rule
// on the stack's bus (source "genjobs") with a target it reads, such as an
// SQS queue; each message body is one client.Event, as each line here.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/genjobs/genjobs/client"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

var prompts = []string{"a lighthouse at dusk", "a fox in the snow", "a tram in the rain", "a glass harbour", "a paper moon"}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	url := fs.String("url", envOr("GENJOBS_API_URL", "http://127.0.0.1:8790"), "the intake API (env GENJOBS_API_URL)")
	eventsPath := fs.String("events", "", "the local run's events.jsonl to follow (required: a local run's stand-in for an EventBridge rule's target)")
	artifacts := fs.String("artifacts", "", "the local run's artifact directory, to print each output's path (default: next to --events)")
	n := fs.Int("n", 3, "how many renders to buy (1-5)")
	model := fs.String("model", "flux-pro-2", "the model, from the deployment's catalog")
	prefix := fs.String("prefix", "example-"+time.Now().UTC().Format("20060102T150405"), "operation ids are PREFIX-1..N; the same prefix again is the same operations")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up waiting for the events after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *eventsPath == "":
		return errors.New("--events is required: the events file a local run prints")
	case *n < 1 || *n > len(prompts):
		return fmt.Errorf("-n %d: want 1 to %d", *n, len(prompts))
	}
	if *artifacts == "" {
		*artifacts = filepath.Join(filepath.Dir(*eventsPath), "artifacts")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c, err := client.New(*url)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for i := range *n {
		id := fmt.Sprintf("%s-%d", *prefix, i+1)
		input, _ := json.Marshal(map[string]string{"prompt": prompts[i]})
		// The id is the idempotency key: sent again after a lost answer,
		// the same request is the same operation, never a second render.
		st, created, err := c.Create(ctx, client.CreateRequest{OperationID: id, UserID: "example-user", Model: *model, Input: input, BudgetCredits: 50})
		if err != nil {
			return fmt.Errorf("create %s: %w", id, err)
		}
		fmt.Fprintf(stdout, "created %s (%s, revision %d, new %v)\n", id, st.Phase, st.Revision, created)
		want[id] = true
	}
	ended, err := follow(ctx, *eventsPath, want)
	for _, ev := range ended {
		d := ev.Detail
		fmt.Fprintf(stdout, "%s: %s (%s)", d.OperationID, ev.DetailType, d.Phase)
		if d.ErrorCategory != "" {
			fmt.Fprintf(stdout, ", %s", d.ErrorCategory)
		}
		fmt.Fprintln(stdout)
		for _, o := range d.Outputs {
			fmt.Fprintf(stdout, "  output %d: %s (%d bytes, sha256 %s)\n", o.Index, filepath.Join(*artifacts, filepath.FromSlash(o.Key)), o.SizeBytes, o.SHA256)
		}
	}
	return err
}

// follow reads events from path as they are appended until each of the
// operations in want has one, and returns them in arrival order. Repeats
// (the same Detail.EventID: delivery is at least once) are dropped.
func follow(ctx context.Context, path string, want map[string]bool) ([]client.Event, error) {
	var out []client.Event
	seen := map[string]bool{}
	var offset int64
	for {
		f, err := os.Open(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return out, err
		}
		if f != nil {
			if _, err := f.Seek(offset, io.SeekStart); err != nil {
				f.Close()
				return out, err
			}
			r := bufio.NewReader(f)
			for {
				line, err := r.ReadBytes('\n')
				if err != nil {
					break // a partial line is read again once complete
				}
				offset += int64(len(line))
				var ev client.Event
				if err := json.Unmarshal(line, &ev); err != nil {
					f.Close()
					return out, fmt.Errorf("%s: an event that does not decode: %w", path, err)
				}
				if id := ev.Detail.OperationID; want[id] && !seen[ev.Detail.EventID] {
					seen[ev.Detail.EventID] = true
					delete(want, id)
					out = append(out, ev)
				}
			}
			f.Close()
		}
		if len(want) == 0 {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("%d operations without an event yet: %w", len(want), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
