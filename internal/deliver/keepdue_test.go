package deliver_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/deliver"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/sweep"
)

// TestLateDeliveryKeepsTheSweepInformed: a deliver message that waited in
// the queue long enough that its first write (after the job's read and
// the first copy) could land only once the record looks overdue moves the
// record's due time first, so the sweep, run mid-copy, leaves the live
// delivery alone; a message that waited briefly writes nothing extra.
// Before the refresh the sweep re-armed the delivery mid-copy, and the
// delivery's own writes then lost the revision race.
func TestLateDeliveryKeepsTheSweepInformed(t *testing.T) {
	t.Parallel()
	const overdue = 5 * time.Minute
	for _, tc := range []struct {
		name    string
		waited  time.Duration // in the queue before the delivery starts
		refresh bool
	}{
		{"waited 30 s", 30 * time.Second, false},
		{"waited 4 min", 4 * time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// CopyTimeout 60 s: the first write lands at most 75 s after
			// the start (10 s read, 60 s copy, 5 s overhead).
			e := newEnv(t, "bolt", options{outputs: 1, cfg: deliver.Config{CopyTimeout: time.Minute, OverdueAfter: overdue}})
			m := e.succeed(t, "op-late")
			before := handlertest.Get(t, e.store, "op-late")
			e.clk.Advance(tc.waited)
			sw := sweep.New(sweep.Deps{Store: e.store, Sender: e.out, Clock: e.clk, Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()},
				sweep.Config{OverdueAfter: overdue})
			var swept sweep.Result
			// The copy takes 70 s; the sweep runs while it is under way.
			e.gen.beforeDownload = append(e.gen.beforeDownload, func() {
				e.clk.Advance(70 * time.Second)
				var err error
				if swept, err = sw.Sweep(context.Background()); err != nil {
					t.Errorf("sweep: %v", err)
				}
			})
			if failed := e.deliver(t, m); len(failed) != 0 {
				t.Fatalf("failures %v\n%s", failed, e.logs.String())
			}
			if swept.Rearmed != 0 {
				t.Fatalf("the sweep re-armed a live delivery (%+v)", swept)
			}
			got := e.checkDelivered(t, "op-late")
			writes := got.Revision - before.Revision
			refreshes := strings.Count(e.mets.String(), `"`+metrics.DueRefreshes+`"`)
			if want := map[bool]int64{false: 1, true: 2}[tc.refresh]; writes != want || (refreshes > 0) != tc.refresh {
				t.Fatalf("%d writes, %d refreshes; want %d writes, refresh %t", writes, refreshes, want, tc.refresh)
			}
			e.out.Take()
		})
	}
}
