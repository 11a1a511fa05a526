package genacesim

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
)

// TestSaveLoad: a simulator restored from Save answers for the same jobs
// as the one that saved them (state by the clock, credits, outputs,
// metadata, counts), and a new job never takes a saved id.
func TestSaveLoad(t *testing.T) {
	t.Parallel()
	cfg := Config{Seed: 7, RefundSettleAfter: 2 * time.Second, Models: map[string]ModelConfig{
		"ok":  {Price: 5, QueueFor: 10 * time.Second, RunFor: 20 * time.Second, OutputCount: 2},
		"bad": {Price: 9, QueueFor: time.Second, RunFor: time.Second, Outcome: OutcomeFail},
	}}
	h := newHarness(t, cfg)
	ok := h.post(t, "a", "ok").job(t)
	bad := h.post(t, "b", "bad").job(t)
	h.sim.Reconcile(bad.ID)
	var buf bytes.Buffer
	if err := h.sim.Save(&buf); err != nil {
		t.Fatal(err)
	}
	saved := buf.String()

	clk2 := clock.NewManual(t0)
	sim2, err := Restore(strings.NewReader(saved), key, clk2)
	if err != nil {
		t.Fatal(err)
	}
	h2 := wrap(t, sim2, clk2)
	for _, at := range []time.Duration{0, 15 * time.Second, time.Minute} {
		h.clk.Set(t0.Add(at))
		h2.clk.Set(t0.Add(at))
		for _, id := range []string{ok.ID, bad.ID} {
			a, _ := h.sim.Job(id)
			b, found := h2.sim.Job(id)
			if !found || !reflect.DeepEqual(a, b) {
				t.Fatalf("at %s job %s: restored %+v (found %t), want %+v", at, id, b, found, a)
			}
		}
	}
	if got := h2.sim.TotalPosts(); got != 2 {
		t.Errorf("restored POST count %d, want 2", got)
	}
	if j := h2.post(t, "c", "ok").job(t); j.ID == ok.ID || j.ID == bad.ID {
		t.Fatalf("a new job reused saved id %s", j.ID)
	}

	for _, tc := range []struct {
		name string
		data string
		want string
	}{
		{"garbage", "{", "genace simulator state"},
		{"unknown field", `{"version":1,"seed":7,"extra":1}`, "unknown field"},
		{"other version", `{"version":99,"seed":7}`, "version 99"},
		{"repeated job", `{"version":1,"seed":7,"jobs":[{"id":"job_a"},{"id":"job_a"}]}`, "repeated"},
	} {
		if _, err := Restore(strings.NewReader(tc.data), key, clock.NewManual(t0)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Restore = %v, want %q", tc.name, err, tc.want)
		}
	}
}
