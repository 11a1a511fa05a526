package submit_test

import (
	"context"
	"strings"
	"testing"

	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/submit"
)

// TestDriftedAnswerKeepsJobIDOnRecord: Genace named the job it created,
// but the rest of its answer broke the contract. The record must end with
// that job id and an observation of it, never as an operation without it.
func TestDriftedAnswerKeepsJobIDOnRecord(t *testing.T) {
	t.Parallel()
	type tcase struct {
		name  string
		fault genacesim.Fault
		phase operation.Phase
	}
	var tests []tcase
	for _, d := range genacesim.BodyDrifts {
		tests = append(tests, tcase{"202 " + string(d), genacesim.Drifted(d), operation.PhaseAccepted})
		if d.BendsEnvelope() {
			tests = append(tests, tcase{"502 " + string(d), genacesim.SubmissionFailed(502).WithDrift(d), operation.PhaseFailed})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			forEachStore(t, func(t *testing.T, kind string) {
				e, _ := newEnv(t, kind, submit.Config{})
				rec := handlertest.Create(t, e.store, handlertest.Prepared("op-drift"))
				e.sim.ScriptPOST("op-drift", tt.fault)
				if failed := e.handle(t, handlertest.Dispatch(rec)); len(failed) != 0 {
					t.Fatalf("failed records %v", failed)
				}
				got := handlertest.Get(t, e.store, "op-drift")
				jobs := e.sim.JobsForOperation("op-drift")
				if len(jobs) != 1 || got.RemoteJobID != jobs[0] || got.Phase != tt.phase {
					t.Fatalf("record %s job %q; Genace created %v: the job id named in the answer was lost", got.Phase, got.RemoteJobID, jobs)
				}
				sent := e.out.Take()
				if len(sent) != 1 || sent[0].Env.Action != message.ActionObserveGeneration || sent[0].Env.ExpectedRemoteJobID != jobs[0] {
					t.Fatalf("sent %+v, want an observation of %s", sent, jobs[0])
				}
				if n := e.sim.PostCount("op-drift"); n != 1 {
					t.Fatalf("POSTs = %d", n)
				}
				if !strings.Contains(e.logs.String(), `"drift":`) {
					t.Errorf("the drift was not logged:\n%s", e.logs.String())
				}
				for _, secret := range []string{handlertest.APIKey, "sig=", "expires="} {
					if strings.Contains(e.logs.String(), secret) {
						t.Fatalf("%q leaked into the logs", secret)
					}
				}
			})
		})
	}
}

// TestJobIDGenaceMayUseIsObserved: an id with '.' and ':' is a job id on
// both sides, so its observation can be sent.
func TestJobIDGenaceMayUseIsObserved(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e, _ := newEnv(t, kind, submit.Config{})
		rec := handlertest.Create(t, e.store, handlertest.Prepared("op-dots"))
		e.sim.ScriptPOST("op-dots", genacesim.NoFault().WithJobID("job.01:x"))
		if failed := e.handle(t, handlertest.Dispatch(rec)); len(failed) != 0 {
			t.Fatalf("failed records %v", failed)
		}
		got := handlertest.Get(t, e.store, "op-dots")
		if got.Phase != operation.PhaseAccepted || got.RemoteJobID != "job.01:x" {
			t.Fatalf("record %s job %q", got.Phase, got.RemoteJobID)
		}
		sent := e.out.Take()
		if len(sent) != 1 || sent[0].Env.ExpectedRemoteJobID != "job.01:x" {
			t.Fatalf("sent %+v, want the observation of job.01:x", sent)
		}
	})
}

// TestUnusableJobIDKeptAsEvidence: an id outside the definition cannot go
// on the record (no follow-up could carry it), but the job exists: the
// operation waits for reconciliation, and a review carries the id.
func TestUnusableJobIDKeptAsEvidence(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e, _ := newEnv(t, kind, submit.Config{})
		rec := handlertest.Create(t, e.store, handlertest.Prepared("op-slash"))
		e.sim.ScriptPOST("op-slash", genacesim.NoFault().WithJobID("job/01"))
		if failed := e.handle(t, handlertest.Dispatch(rec)); len(failed) != 0 {
			t.Fatalf("failed records %v", failed)
		}
		got := handlertest.Get(t, e.store, "op-slash")
		if got.Phase != operation.PhaseUncertain || got.RemoteJobID != "" {
			t.Fatalf("record %s job %q, want uncertain without a job id", got.Phase, got.RemoteJobID)
		}
		rv, err := e.store.OpenReviews(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var evidence bool
		for _, r := range rv {
			if r.OperationID == "op-slash" && r.Recommended == operation.ActionReconcile && strings.Contains(r.Reason, `"job/01"`) {
				evidence = true
			}
		}
		if !evidence {
			t.Fatalf("no open review carries the job id: %+v", rv)
		}
		if n := e.sim.PostCount("op-slash"); n != 1 || e.out.Len() != 0 {
			t.Fatalf("POSTs %d, sent %d", n, e.out.Len())
		}
	})
}
