//go:build integration

// These tests run the submit function as Lambda runs it: the deployment
// build of this package, started by the Runtime Interface Emulator, fed
// the sample events in events/ over the emulator's invoke API, talking to
// DynamoDB Local, moto and the Genace simulator through nothing but its
// environment. They cover what the handler tests cannot: the composition
// root, environment parsing, JSON in and out of lambda.Start, and what
// the function writes to its log.
package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/dev/emulator"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/dev/lambdatest"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
)

// The ids the sample events carry.
const (
	opID          = "op-sample-1"
	malformedID   = "c0d9e1a2-6b3f-4f70-8e15-92a4b7c6d3e8" // submit-batch.json's {"action":"post_twice"}
	queueWaitTime = 5 * time.Second
)

// env is one test's stack, its prepared operation and the function.
type env struct {
	stack *lambdatest.Stack
	fn    *emulator.Emulator
}

// setup stands up a private stack, stores op-sample-1 as prepared (the
// revision the sample dispatch expects) and starts the function on it.
func setup(t *testing.T) env {
	t.Helper()
	st := lambdatest.NewStack(t, genacesim.Config{})
	rec := handlertest.Create(t, st.Store, handlertest.Prepared(opID))
	if rec.Revision != 1 {
		t.Fatalf("created at revision %d; the sample dispatch expects 1", rec.Revision)
	}
	return env{stack: st, fn: lambdatest.Start(t, st.Config(t, "submit"))}
}

// invoke sends a sample event, its records passed through the stack's
// queues as the event source mapping would hand them over, and returns
// the ids the function reported as failed. Anything but a 200 with a well-formed SQSEventResponse (an
// error object included) fails the test.
func (e env) invoke(t *testing.T, event string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	status, body, err := e.fn.Invoke(ctx, e.stack.Received(t, lambdatest.Event(t, event)))
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusOK {
		t.Fatalf("%s: status %d, body %s", event, status, body)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var resp events.SQSEventResponse
	if err := dec.Decode(&resp); err != nil || resp.BatchItemFailures == nil {
		t.Fatalf("%s: answer %s is not a batch response (%v)", event, body, err)
	}
	return handlertest.Failed(resp)
}

// assertSubmittedOnce checks the end state of one successful dispatch:
// one POST, the job id on an accepted record, exactly one observation
// sent for that revision, nothing else queued, and a clean log.
func (e env) assertSubmittedOnce(t *testing.T) {
	t.Helper()
	st := e.stack
	if n := st.Sim.PostCount(opID); n != 1 {
		t.Errorf("simulator counted %d POSTs for %s, want 1", n, opID)
	}
	jobs := st.Sim.JobsForOperation(opID)
	if len(jobs) != 1 {
		t.Fatalf("simulator holds jobs %v for %s, want one", jobs, opID)
	}
	rec := handlertest.Get(t, st.Store, opID)
	if rec.Phase != operation.PhaseAccepted || rec.RemoteJobID != jobs[0] || rec.Posts != 1 {
		t.Errorf("record: phase %s, job %q, posts %d; want accepted, %s, 1", rec.Phase, rec.RemoteJobID, rec.Posts, jobs[0])
	}
	msgs := st.Messages(t, message.ActionObserveGeneration, queueWaitTime)
	want := message.Envelope{Action: message.ActionObserveGeneration, OperationID: opID, ExpectedRevision: rec.Revision, ExpectedRemoteJobID: jobs[0], Attempt: 1}
	if len(msgs) != 1 || msgs[0] != want {
		t.Errorf("observe queue holds %+v, want exactly %+v", msgs, want)
	}
	for _, a := range []message.Action{message.ActionSubmitGeneration, message.ActionDeliverArtifacts} {
		if msgs := st.Messages(t, a, 0); len(msgs) != 0 {
			t.Errorf("%s queue holds %+v, want nothing", a, msgs)
		}
	}
	assertLog(t, e.fn)
}

// assertLog checks what CloudWatch Logs would receive: EMF metric lines,
// and never the API key.
func assertLog(t *testing.T, fn *emulator.Emulator) {
	t.Helper()
	if !fn.WaitStdout(`"_aws"`, 5*time.Second) {
		t.Errorf("no EMF line in the function's output:\n%s", fn.Stdout())
	}
	if strings.Contains(fn.Stdout(), lambdatest.APIKey) || strings.Contains(fn.Stderr(), lambdatest.APIKey) {
		t.Error("the Genace API key appears in the output")
	}
}

func TestSubmitSampleEvents(t *testing.T) {
	t.Run("submit.json", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		if failed := e.invoke(t, "submit.json"); len(failed) != 0 {
			t.Errorf("batchItemFailures %v, want none", failed)
		}
		t.Logf("submit: first invoke (cold start and one POST) %v", e.fn.FirstInvoke())
		e.assertSubmittedOnce(t)
	})

	t.Run("submit-batch.json", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		// The malformed record alone is reported, so the event source
		// mapping deletes the good one and only the bad one goes on
		// towards the DLQ.
		if failed := e.invoke(t, "submit-batch.json"); !slices.Equal(failed, []string{malformedID}) {
			t.Errorf("batchItemFailures %v, want exactly [%s]", failed, malformedID)
		}
		e.assertSubmittedOnce(t)
	})

	t.Run("submit-duplicate.json", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		if failed := e.invoke(t, "submit.json"); len(failed) != 0 {
			t.Fatalf("first dispatch: batchItemFailures %v", failed)
		}
		before := handlertest.Get(t, e.stack.Store, opID)
		// A second dispatch for the same operation (another message id,
		// as a producer retry makes) finds the job id on the record and
		// must not POST again; the observation already pending suffices.
		start := time.Now()
		if failed := e.invoke(t, "submit-duplicate.json"); len(failed) != 0 {
			t.Errorf("duplicate dispatch: batchItemFailures %v, want none", failed)
		}
		t.Logf("submit: first invoke %v, warm invoke %v", e.fn.FirstInvoke(), time.Since(start))
		if after := handlertest.Get(t, e.stack.Store, opID); after.Revision != before.Revision {
			t.Errorf("duplicate dispatch wrote the record (revision %d -> %d)", before.Revision, after.Revision)
		}
		e.assertSubmittedOnce(t)
	})
}

// TestSubmitInitFailsWithoutTable checks a broken deployment fails at
// init, before lambda.Start, and says which setting is missing; the
// emulator answers the invocation with 502, as Lambda reports
// Runtime.ExitError.
func TestSubmitInitFailsWithoutTable(t *testing.T) {
	cfg := lambdatest.NewStack(t, genacesim.Config{}).Config(t, "submit")
	delete(cfg.Env, config.EnvTable)
	fn := lambdatest.Start(t, cfg)
	status, body, err := fn.Invoke(context.Background(), lambdatest.Event(t, "submit.json"))
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusBadGateway {
		t.Errorf("status %d, body %s; want 502 for a runtime that exited during init", status, body)
	}
	// The output reaches the test through pipes, after the answer.
	if !fn.WaitStdout(config.EnvTable+" is required", 5*time.Second) || !strings.Contains(fn.Stdout(), "init failed") {
		t.Errorf("the function's output does not name %s:\n%s", config.EnvTable, fn.Stdout())
	}
	out := fn.Stdout()
	if strings.Contains(out, config.EnvGenaceURL+" is required") {
		t.Errorf("the output blames a setting that is present:\n%s", out)
	}
	if strings.Contains(out, lambdatest.APIKey) {
		t.Error("the init failure logs the API key")
	}
	if !fn.WaitStderr("exit status 1", 5*time.Second) {
		t.Errorf("the emulator did not see the runtime exit:\n%s", fn.Stderr())
	}
}
