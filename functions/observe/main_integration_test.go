//go:build integration

// These tests run the observe function as Lambda runs it: the deployment
// build of this package under the Runtime Interface Emulator, fed
// events/observe.json, talking to DynamoDB Local, moto and the Genace
// simulator through nothing but its environment.
package main_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/dev/lambdatest"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operation"
)

// opID is the operation events/observe.json names.
const opID = "op-sample-2"

// acceptedOperation stores op-sample-2 as the submit function leaves it
// after a 202: a job created on the simulator for it, claimed then
// accepted (revision 3, as the sample event expects) with the job's
// snapshot and an observation due now.
func acceptedOperation(t *testing.T, st *lambdatest.Stack, id string) operation.Record {
	t.Helper()
	ctx := context.Background()
	rec := handlertest.Create(t, st.Store, handlertest.Prepared(id))
	res := st.Genace.Submit(ctx, genace.SubmitRequest{OperationID: id, Model: rec.Model, Input: rec.Input}, 10*time.Second)
	if res.Outcome != genace.OutcomeAccepted {
		t.Fatalf("simulator refused the job: %v", res.Err)
	}
	now := time.Now().UTC()
	claimed, err := operation.ClaimSubmission(rec, "lambdatest", "arrange", now)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err = st.Store.Update(ctx, claimed, rec.Revision); err != nil {
		t.Fatal(err)
	}
	snap := res.Job.Snapshot(now)
	accepted, err := operation.Accept(rec, res.JobID, &snap, now)
	if err != nil {
		t.Fatal(err)
	}
	accepted.Schedule = &operation.NextAction{Action: string(message.ActionObserveGeneration), Due: now}
	if rec, err = st.Store.Update(ctx, accepted, rec.Revision); err != nil {
		t.Fatal(err)
	}
	return rec
}

// observeEvent is events/observe.json addressed to rec. The file carries
// a placeholder job id (job_sample_observe): the simulator makes up its
// own ids, so the test writes the real one, and the record's revision,
// into each body, and recomputes md5OfBody to keep the event consistent.
// Everything else stays exactly as in the file.
func observeEvent(t *testing.T, rec operation.Record) []byte {
	t.Helper()
	var ev map[string]any
	if err := json.Unmarshal(lambdatest.Event(t, "observe.json"), &ev); err != nil {
		t.Fatal(err)
	}
	records, _ := ev["Records"].([]any)
	if len(records) == 0 {
		t.Fatal("observe.json has no records")
	}
	for _, r := range records {
		m := r.(map[string]any)
		env, err := message.Decode([]byte(m["body"].(string)))
		if err != nil {
			t.Fatal(err)
		}
		if env.OperationID != rec.OperationID {
			t.Fatalf("observe.json names %s, the test arranged %s", env.OperationID, rec.OperationID)
		}
		env.ExpectedRemoteJobID, env.ExpectedRevision = rec.RemoteJobID, rec.Revision
		body, err := env.Encode()
		if err != nil {
			t.Fatal(err)
		}
		sum := md5.Sum(body)
		m["body"], m["md5OfBody"] = string(body), hex.EncodeToString(sum[:])
	}
	out, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestObserveSampleEvent(t *testing.T) {
	for _, tc := range []struct {
		name string
		// model is how the simulator runs op-sample-2's render; the
		// durations make the outcome certain, whatever the machine's speed.
		model     genacesim.ModelConfig
		phase     operation.Phase
		remote    operation.RemoteState
		follow    message.Action
		attempt   int
		untouched message.Action
		// timeout, if set, replaces the template's; fed puts a second
		// operation's observation on the observe queue, for the
		// invocation's feed to take.
		timeout time.Duration
		fed     bool
	}{{
		// Queued for an hour: the GET finds it queued, so the observer
		// saves the snapshot and, inside the immediate window, sends the
		// next observation with no delay.
		name:  "job still queued schedules the next observation",
		model: genacesim.ModelConfig{Price: 12, QueueFor: time.Hour, RunFor: time.Hour},
		phase: operation.PhaseAccepted, remote: operation.RemoteQueued,
		follow: message.ActionObserveGeneration, attempt: 2, untouched: message.ActionDeliverArtifacts,
		// Left no more than the feed's margin, the invocation receives
		// nothing, so its follow-up stays on the queue. With more, it
		// would take its own follow-ups and hold the render until its
		// feed stops, as deployed. 15 s, not the margin's 2 min: the
		// chain runs to the deadline (less Overhead and the linger's
		// window), so a few 1 s polls before the hand-over, not 28.
		timeout: 15 * time.Second,
	}, {
		// Finished at creation: the GET finds it succeeded, so the
		// observer hands over to delivery.
		name:  "job already succeeded hands over to delivery",
		model: genacesim.ModelConfig{Price: 12, QueueFor: 0, RunFor: 0},
		phase: operation.PhaseSucceeded, remote: operation.RemoteSucceeded,
		follow: message.ActionDeliverArtifacts, attempt: 2, untouched: message.ActionObserveGeneration,
		// The feed takes the waiting observation, hands it to delivery
		// too and deletes it; then, holding nothing, the invocation ends
		// after one empty receive, which the feed's stop, 10 s after the
		// start here, cuts short of SQS's 20 s.
		timeout: observe.DefaultFeedMargin + 10*time.Second,
		fed:     true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := lambdatest.NewStack(t, genacesim.Config{DefaultModel: tc.model})
			rec := acceptedOperation(t, st, opID)
			var other *operation.Record
			if tc.fed {
				o := acceptedOperation(t, st, "op-fed")
				other = &o
				body, err := message.Envelope{Action: message.ActionObserveGeneration, OperationID: o.OperationID,
					ExpectedRevision: o.Revision, ExpectedRemoteJobID: o.RemoteJobID, Attempt: 1}.Encode()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := st.Queue.Send(context.Background(), st.QueueURLs[message.ActionObserveGeneration], body, 0); err != nil {
					t.Fatal(err)
				}
			}
			// The template's environment, with the local stack's
			// ObservePolicies (a 1 s long poll: the simulator, like
			// Genace, holds a long poll for its whole wait unless the job
			// changes state, and a finished job never does).
			cfg := st.Config(t, "observe")
			if tc.timeout > 0 {
				cfg.Timeout = tc.timeout
			}
			fn := lambdatest.Start(t, cfg)

			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			status, body, err := fn.Invoke(ctx, observeEvent(t, rec))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("observe: first invoke (cold start, the chain and the feed) %v", fn.FirstInvoke())
			if status != http.StatusOK {
				t.Fatalf("status %d, body %s", status, body)
			}
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			var resp events.SQSEventResponse
			if err := dec.Decode(&resp); err != nil || resp.BatchItemFailures == nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("answer %s: want a batch response without failures (%v)", body, err)
			}

			saved := handlertest.Get(t, st.Store, opID)
			if saved.Revision != rec.Revision+1 {
				t.Errorf("revision %d, want %d: the snapshot was not saved once", saved.Revision, rec.Revision+1)
			}
			// A young job's looks chain inside the invocation (as many as
			// full 30 s windows fit the chain's span, of 1 s polls here,
			// well within a Chain); they are written once.
			if saved.Counters.Observations < 1 || saved.Counters.Observations > 1+int(observe.DefaultSpan/genace.MaxWait) {
				t.Errorf("counters.observations %d, want 1..%d", saved.Counters.Observations, 1+int(observe.DefaultSpan/genace.MaxWait))
			}
			if saved.Phase != tc.phase || saved.Remote == nil || saved.Remote.State != tc.remote {
				t.Errorf("record: phase %s, remote %+v; want %s with remote %s", saved.Phase, saved.Remote, tc.phase, tc.remote)
			}
			if saved.RemoteJobID != rec.RemoteJobID {
				t.Errorf("job id changed from %s to %s", rec.RemoteJobID, saved.RemoteJobID)
			}

			want := []message.Envelope{{Action: tc.follow, OperationID: opID, ExpectedRevision: saved.Revision, ExpectedRemoteJobID: rec.RemoteJobID, Attempt: tc.attempt}}
			if other != nil {
				got := handlertest.Get(t, st.Store, other.OperationID)
				if got.Phase != tc.phase || got.Revision != other.Revision+1 {
					t.Errorf("%s: phase %s at r%d, want %s at r%d: the feed did not observe it once", other.OperationID, got.Phase, got.Revision, tc.phase, other.Revision+1)
				}
				want = append(want, message.Envelope{Action: tc.follow, OperationID: other.OperationID, ExpectedRevision: got.Revision, ExpectedRemoteJobID: other.RemoteJobID, Attempt: 2})
			}
			msgs := st.Messages(t, tc.follow, 5*time.Second)
			slices.SortFunc(msgs, func(a, b message.Envelope) int { return strings.Compare(a.OperationID, b.OperationID) })
			slices.SortFunc(want, func(a, b message.Envelope) int { return strings.Compare(a.OperationID, b.OperationID) })
			if !slices.Equal(msgs, want) {
				t.Errorf("%s queue holds %+v, want exactly %+v", tc.follow, msgs, want)
			}
			for _, a := range []message.Action{tc.untouched, message.ActionSubmitGeneration} {
				if msgs := st.Messages(t, a, 0); len(msgs) != 0 {
					t.Errorf("%s queue holds %+v, want nothing", a, msgs)
				}
			}
			if n := st.Sim.PostCount(opID); n != 1 {
				t.Errorf("%d POSTs for %s, want only the arranging one", n, opID)
			}

			if !fn.WaitStdout(`"_aws"`, 5*time.Second) {
				t.Errorf("no EMF line in the function's output:\n%s", fn.Stdout())
			}
			if strings.Contains(fn.Stdout(), lambdatest.APIKey) || strings.Contains(fn.Stderr(), lambdatest.APIKey) {
				t.Error("the Genace API key appears in the output")
			}
		})
	}
}

// TestObserveInitNamesAMissingQueueARN: the template's environment without
// the observe queue's ARN, which observations delayed beyond SQS's 15
// minutes need (EventBridge Scheduler's target), stops the function at
// init, before lambda.Start, naming the variable; the emulator answers
// 502, as Lambda reports Runtime.ExitError.
func TestObserveInitNamesAMissingQueueARN(t *testing.T) {
	cfg := lambdatest.NewStack(t, genacesim.Config{}).Config(t, "observe")
	delete(cfg.Env, config.EnvObserveQueueARN)
	fn := lambdatest.Start(t, cfg)
	status, body, err := fn.Invoke(context.Background(), lambdatest.Event(t, "observe.json"))
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusBadGateway {
		t.Errorf("status %d, body %s; want 502 for a runtime that exited during init", status, body)
	}
	if !fn.WaitStdout(config.EnvObserveQueueARN+" is required: observe_generation can be delayed", 5*time.Second) {
		t.Errorf("the function's output does not name %s:\n%s", config.EnvObserveQueueARN, fn.Stdout())
	}
}
