package observe_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/observe"
)

// blockingGen holds every GET until the invocation's context ends, then
// lets the real client answer it as it does a cancelled request.
type blockingGen struct {
	inner   *genace.Client
	entered chan struct{}
}

func (g *blockingGen) Get(ctx context.Context, jobID string, wait, timeout time.Duration) (*genace.Job, error) {
	close(g.entered)
	<-ctx.Done()
	return g.inner.Get(ctx, jobID, wait, timeout)
}

// An invocation whose context ends while it reads (a local run's Ctrl-C
// ending the sandbox) failed for a reason that is not Genace's: the
// message fails retryably (no dead letter, no review) and the record is
// left as it was. Before, the cancelled GET counted as a permanent
// failure, and its message went to the DLQ.
func TestInvocationEndingMidReadIsRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt", genacesim.Config{}, observe.Config{})
	m := e.accept(t, "op-cancel")
	before := handlertest.Get(t, e.store, "op-cancel")
	g := &blockingGen{inner: e.gen.inner, entered: make(chan struct{})}
	var lines handlertest.Buffer
	obs := observe.New(observe.Deps{Store: e.store, Genace: g, Delays: e.delays, Extender: e.ext, Sender: e.out, Clock: e.clk,
		Log: slog.New(slog.DiscardHandler), Metrics: metrics.New(&lines, "observe", e.clk)}, observe.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-g.entered
		cancel()
	}()
	resp, err := obs.Handle(ctx, handlertest.Event(t, e.clk.Now(), m))
	if err != nil {
		t.Fatal(err)
	}
	if failed := handlertest.Failed(resp); !slices.Equal(failed, []string{m.ID}) {
		t.Fatalf("failed %v, want %s failed so SQS redelivers it", failed, m.ID)
	}
	if got := handlertest.Get(t, e.store, "op-cancel"); got.Revision != before.Revision || got.Counters.ReadFailures != 0 {
		t.Fatalf("record r%d, read failures %d; want it untouched at r%d", got.Revision, got.Counters.ReadFailures, before.Revision)
	}
	if s := lines.String(); strings.Contains(s, `"Outcome":"permanent"`) || !strings.Contains(s, `"Outcome":"retry"`) {
		t.Fatalf("the failure is not classed retryable:\n%s", s)
	}
}
