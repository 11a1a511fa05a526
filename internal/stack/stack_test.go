package stack

import (
	"testing"

	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/schedule"
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
