package sweep_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/queue"
	"github.com/genjobs/genjobs/internal/sweep"
)

func TestFit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		d             queue.Depth
		hold, ceiling int
		want          int
	}{
		{"an empty queue keeps Lambda's least", queue.Depth{}, 1250, 8, 2},
		{"a light load fits two", queue.Depth{Visible: 3, InFlight: 50, Delayed: 9}, 1250, 8, 2},
		{"each invocation is planned at a quarter of its hold", queue.Depth{InFlight: 937}, 1250, 8, 4},
		{"exactly three quarters", queue.Depth{InFlight: 936}, 1250, 8, 3},
		{"every state counts", queue.Depth{Visible: 300, InFlight: 300, Delayed: 337}, 1250, 8, 4},
		{"never above the template's ceiling", queue.Depth{InFlight: 100000}, 1250, 8, 8},
		{"a ceiling below Lambda's least is raised to it", queue.Depth{InFlight: 100000}, 1250, 1, 2},
		{"a hold of one", queue.Depth{InFlight: 5}, 1, 8, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := sweep.Fit(tc.d, tc.hold, tc.ceiling); got != tc.want {
				t.Errorf("Fit(%+v, %d, %d) = %d, want %d", tc.d, tc.hold, tc.ceiling, got, tc.want)
			}
		})
	}
}

func TestToward(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ cur, want, next int }{
		{8, 2, 4}, {4, 2, 2}, {3, 2, 2}, {7, 2, 4}, {2, 6, 6}, {2, 8, 8}, {8, 8, 8}, {5, 4, 4},
		{0, 3, 4},   // no cap is the ceiling: down by half
		{0, 8, 8},   // and stays there when the load needs it
		{20, 2, 4},  // above the ceiling: down from the ceiling
		{20, 8, 8},  // never above it
		{2, 12, 8},  // nor raised past it
		{20, 20, 8}, // whatever is asked
	} {
		if got := sweep.Toward(tc.cur, tc.want, 8); got != tc.next {
			t.Errorf("Toward(%d, %d, 8) = %d, want %d", tc.cur, tc.want, got, tc.next)
		}
	}
}

// capacity is a hand fake of sweep.Capacity: the sweep's own narrow
// interface (the AWS and local implementations have their own tests).
type capacity struct {
	depth    queue.Depth
	cur      int
	sets     []int
	depthErr error
	curErr   error
	setErr   error
}

func (c *capacity) Depth(context.Context) (queue.Depth, error) { return c.depth, c.depthErr }
func (c *capacity) MaxConcurrency(context.Context) (int, error) {
	return c.cur, c.curErr
}

func (c *capacity) SetMaxConcurrency(_ context.Context, n int) error {
	if c.setErr != nil {
		return c.setErr
	}
	c.sets = append(c.sets, n)
	c.cur = n
	return nil
}

var _ sweep.Capacity = (*capacity)(nil)

func TestSweepFitsObserveConcurrency(t *testing.T) {
	t.Parallel()
	broken := errors.New("throttled")
	for _, tc := range []struct {
		name     string
		c        capacity
		want     int
		wantSets []int
		wantErr  bool
	}{
		{"a light load halves the ceiling on the way to two", capacity{depth: queue.Depth{InFlight: 60}, cur: 8}, 4, []int{4}, false},
		{"and reaches two", capacity{depth: queue.Depth{InFlight: 60}, cur: 4}, 2, []int{2}, false},
		{"a load that needs more raises it", capacity{depth: queue.Depth{InFlight: 1500, Visible: 100}, cur: 2}, 6, []int{6}, false},
		{"a fitted mapping is left alone", capacity{depth: queue.Depth{InFlight: 60}, cur: 2}, 2, nil, false},
		{"none set (unbounded) is bounded from the ceiling down", capacity{depth: queue.Depth{}, cur: 0}, 4, []int{4}, false},
		{"one above the ceiling comes down from the ceiling", capacity{depth: queue.Depth{}, cur: 40}, 4, []int{4}, false},
		{"a failed read changes nothing", capacity{depthErr: broken, cur: 8}, 0, nil, true},
		{"a failed read of the cap changes nothing", capacity{curErr: broken, cur: 8}, 0, nil, true},
		{"a refused update leaves the mapping as it was", capacity{depth: queue.Depth{InFlight: 60}, cur: 4, setErr: broken}, 4, nil, true},
		{"a transient refusal is the next run's to retry, not a failed run", capacity{depth: queue.Depth{InFlight: 60}, cur: 4,
			setErr: fmt.Errorf("update: %w", context.DeadlineExceeded)}, 4, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := handlertest.OpenStore(t, handlertest.StoreKinds()[0])
			c := tc.c
			s := sweep.New(sweep.Deps{Store: st, Sender: &handlertest.Outbox{}, Capacity: &c, Clock: clock.NewManual(time.Now()),
				Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()}, sweep.Config{Hold: 1250, MaxConcurrency: 8})
			res, err := s.Sweep(context.Background())
			if (err != nil) != tc.wantErr || (tc.wantErr && !errors.Is(err, broken)) {
				t.Fatalf("Sweep: %v, want an error %t (wrapping the cause)", err, tc.wantErr)
			}
			if res.ObserveConcurrency != tc.want {
				t.Errorf("ObserveConcurrency %d, want %d", res.ObserveConcurrency, tc.want)
			}
			if len(c.sets) != len(tc.wantSets) || (len(c.sets) > 0 && c.sets[0] != tc.wantSets[0]) {
				t.Errorf("set %v, want %v", c.sets, tc.wantSets)
			}
		})
	}
}

// dueFails is a store whose due index cannot be read.
type dueFails struct{ sweep.Store }

func (dueFails) Due(context.Context, time.Time, int) ([]operation.Record, error) {
	return nil, errors.New("throttled")
}

func TestSweepFitsEvenWhenTheDueRecordsCannotBeRead(t *testing.T) {
	t.Parallel()
	c := &capacity{depth: queue.Depth{InFlight: 60}, cur: 4}
	st := handlertest.OpenStore(t, handlertest.StoreKinds()[0])
	s := sweep.New(sweep.Deps{Store: dueFails{st}, Sender: &handlertest.Outbox{}, Capacity: c, Clock: clock.NewManual(time.Now()),
		Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()}, sweep.Config{Hold: 1250, MaxConcurrency: 8})
	res, err := s.Sweep(context.Background())
	if err == nil {
		t.Fatal("Sweep: no error, though the due records could not be read")
	}
	if res.ObserveConcurrency != 2 || len(c.sets) != 1 {
		t.Errorf("ObserveConcurrency %d after sets %v; want the fit to 2 all the same", res.ObserveConcurrency, c.sets)
	}
}
