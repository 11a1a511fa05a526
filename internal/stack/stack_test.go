package stack

import (
	"testing"

	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/submit"
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

// TestEveryFunctionBuilds: each entry builds a handler lambda.Start can
// serve, fed by SQS or by a schedule, never both; names are unique.
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
		h := f.Build(Deps{})
		if h.Lambda == nil || (h.Batch == nil) == (h.Scheduled == nil) {
			t.Errorf("%s: Lambda %v, Batch set %v, Scheduled set %v: want a Lambda and exactly one of the two", f.Name, h.Lambda != nil, h.Batch != nil, h.Scheduled != nil)
		}
	}
	if _, ok := Lookup("render"); ok {
		t.Error(`Lookup("render") found a function the table lacks`)
	}
}
