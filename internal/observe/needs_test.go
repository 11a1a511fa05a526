package observe_test

import (
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/observe"
)

// Each bound observe's configuration is held to fails with an error that
// names both values; the deployed defaults pass.
func TestConfigCheckNamesBothValues(t *testing.T) {
	t.Parallel()
	of, _ := topology.Stack.Function(topology.Observe)
	q, _ := topology.Stack.Queue(of.Mappings[0].Queue)
	ok := observe.Config{Visibility: q.Visibility, Concurrency: 10, OverdueAfter: topology.Stack.Sweep.OverdueAfter}
	for _, tc := range []struct {
		name  string
		edit  func(*observe.Config)
		batch int
		want  []string // "" for no error
	}{
		{"deployed", func(*observe.Config) {}, 10, nil},
		{"overdue just above the chain and its write", func(c *observe.Config) { c.OverdueAfter = 246 * time.Second }, 10, nil},
		{"overdue at the chain and its write", func(c *observe.Config) { c.OverdueAfter = 245 * time.Second }, 10,
			[]string{"SWEEP_OVERDUE_SECONDS is 4m5s", "chain 4m0s plus its write 5s"}},
		{"overdue below the chain", func(c *observe.Config) { c.OverdueAfter = 3 * time.Minute }, 10,
			[]string{"SWEEP_OVERDUE_SECONDS is 3m0s", "chain 4m0s"}},
		{"no sweep threshold", func(c *observe.Config) { c.OverdueAfter = 0 }, 10, []string{"SWEEP_OVERDUE_SECONDS is 0s"}},
		// The lease renews as the chain outlasts it.
		{"visibility below the chain", func(c *observe.Config) { c.Visibility = 200 * time.Second }, 10, nil},
		{"concurrency below the batch", func(c *observe.Config) { c.Concurrency = 5 }, 10,
			[]string{"BATCH_CONCURRENCY is 5, want at least BATCH_SIZE 10"}},
		{"concurrency at a smaller batch", func(c *observe.Config) { c.Concurrency = 5 }, 5, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := ok
			tc.edit(&c)
			err := c.Check(tc.batch)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check passed; want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check: %v; want it to say %q", err, w)
				}
			}
		})
	}
}
