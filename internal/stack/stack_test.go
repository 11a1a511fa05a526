package stack

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/notify"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store/bolt"
	"github.com/genjobs/genjobs/internal/submit"
	"github.com/genjobs/genjobs/internal/worker"
)

// TestTuneAppliesToItsConfigOnly: an Option changes the Config of its
// type, after the table derived it from Deps.Config, and no other.
func TestTuneAppliesToItsConfigOnly(t *testing.T) {
	t.Parallel()
	d := Deps{
		Config: config.Config{Queues: map[message.Action]schedule.Target{message.ActionSubmitGeneration: {URL: "q"}}, Concurrency: 3},
		Tune:   []Option{Tune(func(c *submit.Config) { c.Concurrency = 7 })},
	}
	if c := tuned(d, submit.Config{QueueURL: d.Config.Queues[message.ActionSubmitGeneration].URL, Concurrency: d.Config.Concurrency}); c.Concurrency != 7 || c.QueueURL != "q" {
		t.Errorf("submit.Config %+v: want the tuned concurrency 7 on the derived queue q", c)
	}
	if c := tuned(d, observe.Configured(d.Config)); c.Concurrency != 3 {
		t.Errorf("observe.Config concurrency %d: a submit option changed it", c.Concurrency)
	}
}

// unset stand in for a store and a sender no build calls (the intake's
// refuses to be built without them).
type (
	unsetStore  struct{ Store }
	unsetSender struct{ worker.Sender }
)

// TestEveryFunctionBuilds: each entry builds a handler lambda.Start can
// serve, fed by SQS, by a schedule or over HTTP, exactly one; names are
// unique.
func TestEveryFunctionBuilds(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, f := range Functions {
		if seen[f.Name] {
			t.Errorf("%s listed twice", f.Name)
		}
		seen[f.Name] = true
		if g, ok := Lookup(f.Name); !ok || g.Name != f.Name {
			t.Errorf("Lookup(%q) = %q, %v", f.Name, g.Name, ok)
		}
		h := f.Build(Deps{Store: unsetStore{}, Sender: unsetSender{}})
		if fed := btoi(h.Batch != nil) + btoi(h.Scheduled != nil) + btoi(h.HTTP != nil); h.Lambda == nil || fed != 1 {
			t.Errorf("%s: Lambda %v, Batch set %v, Scheduled set %v, HTTP set %v: want a Lambda and exactly one of the three",
				f.Name, h.Lambda != nil, h.Batch != nil, h.Scheduled != nil, h.HTTP != nil)
		}
	}
	if _, ok := Lookup("render"); ok {
		t.Error(`Lookup("render") found a function the table lacks`)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// refusing is a sink that refuses every event.
type refusing struct{}

func (refusing) Publish(context.Context, []notify.Event) error { return errors.New("bus unavailable") }

// TestWritesSendTheirEvent: a handler's write that leaves an event owed
// sends it and returns the record marked sent; a refused send leaves the
// write standing and the event owed, for the sweep.
func TestWritesSendTheirEvent(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 4, 1, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name  string
		sink  func(dir string) notify.Sink
		phase operation.Phase
		// owed: an event is owed after the write; sent: and marked sent.
		owed, sent bool
	}{
		{"delivered, sent", func(dir string) notify.Sink { return &notify.File{Path: filepath.Join(dir, "events.jsonl")} }, operation.PhaseDelivered, true, true},
		{"delivered, refused", func(string) notify.Sink { return refusing{} }, operation.PhaseDelivered, true, false},
		{"accepted, nothing to send", func(string) notify.Sink { return refusing{} }, operation.PhaseAccepted, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir := t.TempDir()
			db, err := bolt.Open(filepath.Join(dir, "genjobs.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			n := notifying{Store: db, p: notify.New(tt.sink(dir), db, nil, nil)}
			rec, err := db.Create(ctx, operation.Record{OperationID: "op-1", Phase: operation.PhasePrepared, Timestamps: operation.Timestamps{Created: at, Updated: at}})
			if err != nil {
				t.Fatal(err)
			}
			next := rec.Clone()
			next.Phase = tt.phase
			got, err := n.Update(ctx, next, rec.Revision)
			if err != nil {
				t.Fatalf("update: %v", err)
			}
			stored, err := db.Get(ctx, "op-1")
			if err != nil {
				t.Fatal(err)
			}
			for what, r := range map[string]operation.Record{"returned": got, "stored": stored} {
				if (r.Event != nil) != tt.owed || r.Event != nil && r.Event.Sent != tt.sent || r.Revision != 2 {
					t.Errorf("%s: r%d event %+v, want owed %t sent %t at r2", what, r.Revision, r.Event, tt.owed, tt.sent)
				}
			}
		})
	}
}
