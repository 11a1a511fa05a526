package deliver_test

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/metrics"
)

// Delivery's GET for fresh output URLs answered 401 refuses our key, not
// the job: the message fails as retryable, nothing is written against the
// job, and the function counts the refusal for the alarm. Once the key
// is fixed, the same message delivers.
func TestRefusedKeyFailsDeliveryRetryablyWithoutAWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt", options{})
	m := e.succeed(t, "op-key")
	before := handlertest.Get(t, e.store, "op-key")
	good := e.gen.inner
	srv := httptest.NewServer(e.sim)
	t.Cleanup(srv.Close)
	wrong, err := genace.New(srv.URL, "sk-rotated-away", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	e.gen.inner = wrong

	failed := e.deliver(t, m)
	got := handlertest.Get(t, e.store, "op-key")
	if got.Revision != before.Revision || got.Phase != before.Phase || got.Counters.ReadFailures != 0 || got.LastError != before.LastError {
		t.Fatalf("record r%d %s read failures %d last error %q; want it untouched at r%d", got.Revision, got.Phase, got.Counters.ReadFailures, got.LastError, before.Revision)
	}
	if !slices.Equal(failed, []string{m.ID}) {
		t.Fatalf("failed %v, want %s failed so SQS redelivers it", failed, m.ID)
	}
	if !strings.Contains(e.mets.String(), `"`+metrics.GenaceUnauthorized+`":1`) {
		t.Fatalf("no %s point:\n%s", metrics.GenaceUnauthorized, e.mets.String())
	}
	if e.count(metrics.RecordFailures, "retry") != 1 {
		t.Fatalf("the failure is not classed retryable:\n%s", e.mets.String())
	}
	if sent := e.out.Take(); len(sent) != 0 {
		t.Fatalf("sent %+v; the failed message itself is the retry", sent)
	}

	e.gen.inner = good
	if failed := e.deliver(t, m); len(failed) != 0 {
		t.Fatalf("after the fix: failed %v\n%s", failed, e.logs.String())
	}
	e.checkDelivered(t, "op-key")
}
