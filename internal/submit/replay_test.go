package submit_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/submit"
)

// TestHTTP2StreamResetIsOnePostAndUncertain: the stream carrying the POST
// is refused after Genace read the whole body. Go's HTTP/2 transport
// would re-send it (a second job, a second charge) if the body could be
// rewound; instead exactly one POST arrives and the operation waits for
// reconciliation.
func TestHTTP2StreamResetIsOnePostAndUncertain(t *testing.T) {
	t.Parallel()
	srv := handlertest.NewH2Server(t, func(n int, _ handlertest.H2Request) handlertest.H2Answer {
		if n == 1 {
			return handlertest.H2Answer{Reset: handlertest.H2RefusedStream}
		}
		return handlertest.H2Answer{Status: http.StatusAccepted, Body: []byte(`{"id":"job_second","state":"queued",` +
			`"credits":{"reserved":12,"charged":0,"refunded":0,"refund_state":"none"}}`)}
	})
	client, err := genace.New(srv.URL, handlertest.APIKey, srv.Client)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(handlertest.Start)
	st := handlertest.OpenStore(t, "bolt")
	out := &handlertest.Outbox{}
	h := submit.New(submit.Deps{Store: st, Genace: client, Extender: &handlertest.Extender{}, Sender: out, Clock: clk, Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()}, submit.Config{})
	rec := handlertest.Create(t, st, handlertest.Prepared("op-h2"))
	resp, err := h.Handle(context.Background(), handlertest.Event(t, clk.Now(), handlertest.Dispatch(rec)))
	if err != nil || len(handlertest.Failed(resp)) != 0 {
		t.Fatalf("failed %v, err %v", handlertest.Failed(resp), err)
	}
	if n := srv.Count(http.MethodPost); n != 1 {
		t.Fatalf("Genace received %d POSTs for one operation, want exactly 1", n)
	}
	got := handlertest.Get(t, st, "op-h2")
	if got.Phase != operation.PhaseUncertain || got.RemoteJobID != "" || got.Posts != 1 {
		t.Fatalf("record %s job %q posts %d, want uncertain, no job, 1 post", got.Phase, got.RemoteJobID, got.Posts)
	}
	rv, err := st.OpenReviews(context.Background())
	if err != nil || len(rv) != 1 || rv[0].Recommended != operation.ActionReconcile {
		t.Fatalf("reviews %+v, %v; want one asking for reconciliation", rv, err)
	}
}
