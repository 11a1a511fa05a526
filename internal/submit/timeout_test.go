package submit_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/submit"
)

// answersAfter is a Genace that creates the job at once but answers the
// POST only after `after` on the manual clock: a client whose timeout is
// shorter gives up first, with the request sent (the outcome unknown).
type answersAfter struct {
	inner    submit.Genace
	clk      *clock.Manual
	after    time.Duration
	timeouts []time.Duration
}

func (a *answersAfter) Submit(ctx context.Context, req genace.SubmitRequest, timeout time.Duration) genace.SubmitResult {
	a.timeouts = append(a.timeouts, timeout)
	res := a.inner.Submit(ctx, req, timeout)
	if timeout < a.after {
		a.clk.Advance(timeout)
		return genace.SubmitResult{Outcome: genace.OutcomeUnknown, RequestSent: true, Err: context.DeadlineExceeded}
	}
	a.clk.Advance(a.after)
	return res
}

// The POST's timeout is sized from the function's deadline, less the
// time kept to persist its outcome: with the template's submit timeout, a
// POST answered after 20 to 28 s is accepted, not left uncertain, and the
// message's lease is renewed for the whole POST and write first.
func TestSlowPostAnsweredBeforeTheDeadlineIsAccepted(t *testing.T) {
	t.Parallel()
	f, _ := topology.Stack.Function(topology.Submit)
	q, _ := topology.Stack.Queue(f.Mappings[0].Queue)
	for _, after := range []time.Duration{21 * time.Second, 25 * time.Second, 28 * time.Second} {
		t.Run(after.String(), func(t *testing.T) {
			t.Parallel()
			cfg := submit.Config{Visibility: q.Visibility}
			e, _ := newEnv(t, "bolt", cfg)
			g := &answersAfter{inner: e.client, clk: e.clk, after: after}
			lease := &asked{}
			e.h = submit.New(submit.Deps{Store: e.store, Genace: g, Extender: lease, Sender: e.out, Clock: e.clk, Log: slog.New(slog.NewJSONHandler(e.logs, nil)), Metrics: metrics.Discard()}, cfg)
			rec := handlertest.Create(t, e.store, handlertest.Prepared("op"))
			deadline := e.clk.Now().Add(f.Timeout)
			ctx := deadlineCtx{Context: context.Background(), deadline: deadline}
			resp, err := e.h.Handle(ctx, handlertest.Event(t, e.clk.Now(), handlertest.Dispatch(rec)))
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("%v, failures %v", err, handlertest.Failed(resp))
			}
			got := handlertest.Get(t, e.store, "op")
			if got.Phase != operation.PhaseAccepted || got.RemoteJobID == "" {
				t.Fatalf("a POST answered after %s with %s to the deadline: phase %s (POST timeouts %v)", after, f.Timeout, got.Phase, g.timeouts)
			}
			persist := submit.Config{}.Defaults().PersistBudget
			if len(g.timeouts) != 1 || g.timeouts[0] > f.Timeout-persist {
				t.Fatalf("POST timeouts %v; want one that leaves %s to persist before the %s deadline", g.timeouts, persist, f.Timeout)
			}
			if len(lease.timeouts) == 0 || lease.timeouts[0] < g.timeouts[0]+persist {
				t.Fatalf("lease renewed for %v before a POST of %v and a persist of %s", lease.timeouts, g.timeouts[0], persist)
			}
			if !e.clk.Now().Before(deadline) {
				t.Fatalf("outcome persisted at %v, the deadline %v", e.clk.Now(), deadline)
			}
		})
	}
}

// asked records the visibility timeouts asked of the queue.
type asked struct{ timeouts []time.Duration }

func (a *asked) ChangeVisibility(_ context.Context, _, _ string, timeout time.Duration) error {
	a.timeouts = append(a.timeouts, timeout)
	return nil
}
