package submit_test

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/submit"
)

// A wrong API key is our configuration's fault, not the operation's: the
// POST Genace refuses (401, over real HTTP) leaves the operation prepared
// and retryable, the dispatch message fails so SQS brings it back (and
// dead-letters it if the key stays wrong), and the function counts the
// refusal for the alarm. Once the key is fixed, the same message goes
// through.
func TestRefusedKeyLeavesOperationRetryable(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e, g := newEnv(t, kind, submit.Config{})
		// The same simulator, reached with a key it does not know.
		srv := httptest.NewServer(e.sim)
		t.Cleanup(srv.Close)
		wrong, err := genace.New(srv.URL, "sk-rotated-away", srv.Client())
		if err != nil {
			t.Fatal(err)
		}
		g.inner = wrong
		rec := handlertest.Create(t, e.store, handlertest.Prepared("op-key"))
		d := handlertest.Dispatch(rec)

		for try := 1; try <= 2; try++ {
			failed := e.handle(t, d)
			got := handlertest.Get(t, e.store, "op-key")
			if got.Phase != operation.PhasePrepared || got.Terminal() || got.RemoteJobID != "" || got.Claim != nil ||
				got.LastError != operation.LastErrorUnauthorized || got.Counters.Unauthorized != try {
				t.Fatalf("try %d: record %s (terminal %t) job %q claim %+v last error %q refused %d; want prepared and retryable",
					try, got.Phase, got.Terminal(), got.RemoteJobID, got.Claim, got.LastError, got.Counters.Unauthorized)
			}
			if !slices.Equal(failed, []string{d.ID}) {
				t.Fatalf("try %d: failed %v, want the dispatch %s failed so SQS redelivers it", try, failed, d.ID)
			}
			if sent := e.out.Take(); len(sent) != 0 {
				t.Fatalf("try %d: sent %+v; the failed message itself is the retry", try, sent)
			}
			if n := strings.Count(e.mlines.String(), `"`+metrics.GenaceUnauthorized+`":1`); n != try {
				t.Fatalf("try %d: %d %s points, want %d:\n%s", try, n, metrics.GenaceUnauthorized, try, e.mlines.String())
			}
		}
		if jobs := e.sim.JobsForOperation("op-key"); len(jobs) != 0 || e.sim.PostCount("op-key") != 2 {
			t.Fatalf("jobs %v after %d POSTs; a refused key creates nothing", jobs, e.sim.PostCount("op-key"))
		}
		// A duplicate of the dispatch (another message) is stale, not a
		// second chain.
		dup := d
		dup.ID = "another-dispatch"
		if failed := e.handle(t, dup); len(failed) != 0 || e.sim.PostCount("op-key") != 2 {
			t.Fatalf("duplicate: failed %v, %d POSTs; want it acknowledged as obsolete without a POST", failed, e.sim.PostCount("op-key"))
		}

		// The key is fixed: the redelivered message goes through.
		g.inner = e.client
		if failed := e.handle(t, d); len(failed) != 0 {
			t.Fatalf("after the fix: failed %v", failed)
		}
		got := handlertest.Get(t, e.store, "op-key")
		if jobs := e.sim.JobsForOperation("op-key"); got.Phase != operation.PhaseAccepted || len(jobs) != 1 || got.RemoteJobID != jobs[0] {
			t.Fatalf("after the fix: %s job %q, simulator jobs %v", got.Phase, got.RemoteJobID, jobs)
		}
		if strings.Contains(e.logs.String()+e.mlines.String(), "sk-rotated-away") {
			t.Fatal("the refused key reached a log line or a metric")
		}
	})
}
