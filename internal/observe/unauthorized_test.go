package observe_test

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operation"
)

// A GET Genace answers 401 refuses our key, not the job: the observation
// fails as a retryable failure (SQS brings the message back), the record
// is left as it was (no read failure counted against the job, no state
// change), and the function counts the refusal for the alarm. Once the
// key is fixed, the same message observes the job.
func TestRefusedKeyIsARetryableFailureNotAJobState(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt", genacesim.Config{}, observe.Config{})
	m := e.accept(t, "op-key")
	before := handlertest.Get(t, e.store, "op-key")
	good := e.gen.inner
	srv := httptest.NewServer(e.sim)
	t.Cleanup(srv.Close)
	wrong, err := genace.New(srv.URL, "sk-rotated-away", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	e.gen.inner = wrong

	failed := e.observe(t, m)
	got := handlertest.Get(t, e.store, "op-key")
	if got.Revision != before.Revision || got.Phase != operation.PhaseAccepted || got.Counters.ReadFailures != 0 || got.Parked != nil {
		t.Fatalf("record r%d %s read failures %d parked %+v; want it untouched at r%d", got.Revision, got.Phase, got.Counters.ReadFailures, got.Parked, before.Revision)
	}
	if !slices.Equal(failed, []string{m.ID}) {
		t.Fatalf("failed %v, want %s failed so SQS redelivers it", failed, m.ID)
	}
	lines := e.mlines.String()
	if !strings.Contains(lines, `"`+metrics.GenaceUnauthorized+`":1`) {
		t.Fatalf("no %s point:\n%s", metrics.GenaceUnauthorized, lines)
	}
	if !strings.Contains(lines, `"Outcome":"retry","`+metrics.RecordFailures+`":1`) && !strings.Contains(lines, `"`+metrics.RecordFailures+`":1,"Outcome":"retry"`) {
		t.Fatalf("the failure is not classed retryable:\n%s", lines)
	}
	if sent := e.out.Take(); len(sent) != 0 {
		t.Fatalf("sent %+v; the failed message itself is the retry", sent)
	}

	e.gen.inner = good
	if failed := e.observe(t, m); len(failed) != 0 {
		t.Fatalf("after the fix: failed %v\n%s", failed, e.logs.String())
	}
	if after := handlertest.Get(t, e.store, "op-key"); after.Revision <= before.Revision || after.Remote == nil {
		t.Fatalf("after the fix: r%d remote %+v; want the observation saved", after.Revision, after.Remote)
	}
}
