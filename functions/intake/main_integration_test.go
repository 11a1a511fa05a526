//go:build integration

// These tests run the intake function as Lambda runs it: the deployment
// build of this package under the Runtime Interface Emulator, fed
// events/intake.json (a function URL request signed by an IAM principal),
// talking to DynamoDB Local and moto through nothing but the template's
// environment. That the dispatch it sends is POSTed exactly once, and a
// change before the claim never under the old spec, the intake's tests
// show on the real submit handler (internal/intake, submit_test.go and
// TestCreateRetriedTenTimesIsOneOperation).
package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/client"
	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/dev/lambdatest"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
)

// opID is the operation events/intake.json creates.
const opID = "op-sample-intake"

// TestIntakeSampleCreate: the sample create answers 201 with the status,
// writes the record and sends one dispatch; sent again nine times, as a
// client whose answers were lost would, it answers 200 with the same
// status and writes and sends nothing more.
func TestIntakeSampleCreate(t *testing.T) {
	st := lambdatest.NewStack(t, genacesim.Config{})
	fn := lambdatest.Start(t, st.Config(t, "intake"))
	event := lambdatest.Event(t, "intake.json")
	var first string
	for i := range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		status, body, err := fn.Invoke(ctx, event)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		var resp events.LambdaFunctionURLResponse
		if status != http.StatusOK || dec.Decode(&resp) != nil {
			t.Fatalf("invoke %d: status %d, body %s: want a function URL response", i, status, body)
		}
		want := map[bool]int{true: http.StatusCreated, false: http.StatusOK}[i == 0]
		if resp.StatusCode != want || resp.Headers["Content-Type"] != "application/json" || resp.Headers["Etag"] != `"1"` || resp.IsBase64Encoded {
			t.Fatalf("invoke %d: %d %v %s; want %d with the status", i, resp.StatusCode, resp.Headers, resp.Body, want)
		}
		if i == 0 {
			first = resp.Body
		} else if resp.Body != first {
			t.Fatalf("invoke %d answered %s, the first %s", i, resp.Body, first)
		}
	}
	var status client.Status
	if err := json.Unmarshal([]byte(first), &status); err != nil || status.OperationID != opID || status.Phase != client.PhasePrepared || status.Revision != 1 {
		t.Fatalf("status %s (%v)", first, err)
	}

	rec := handlertest.Get(t, st.Store, opID)
	if rec.Revision != 1 || rec.Phase != operation.PhasePrepared || rec.Model != "flux-pro-2" || rec.EstimatedCredits != 12 || rec.BudgetCredits != 50 ||
		!rec.Authorized || rec.AuthorizedSpecRevision != 1 || !strings.Contains(string(rec.Input), "a lighthouse at dusk") {
		t.Errorf("record %+v", rec)
	}
	want := message.Envelope{Action: message.ActionSubmitGeneration, OperationID: opID, ExpectedRevision: 1}
	if msgs := st.Messages(t, message.ActionSubmitGeneration, 5*time.Second); len(msgs) != 1 || msgs[0] != want {
		t.Errorf("dispatch queue holds %+v, want exactly %+v", msgs, want)
	}
	for _, a := range []message.Action{message.ActionObserveGeneration, message.ActionDeliverArtifacts} {
		if msgs := st.Messages(t, a, 0); len(msgs) != 0 {
			t.Errorf("%s queue holds %+v, want nothing", a, msgs)
		}
	}
	if n := st.Sim.TotalPosts(); n != 0 {
		t.Errorf("%d POSTs: the intake never talks to Genace", n)
	}
	if out := fn.Stdout() + fn.Stderr(); strings.Contains(out, "lighthouse") {
		t.Error("the function's output holds the prompt")
	}
}

// TestIntakeInitNamesABadCatalog: the template's environment with a
// catalog that does not parse stops the function at init, before
// lambda.Start, naming the variable; the emulator answers 502, as Lambda
// reports Runtime.ExitError.
func TestIntakeInitNamesABadCatalog(t *testing.T) {
	cfg := lambdatest.NewStack(t, genacesim.Config{}).Config(t, "intake")
	cfg.Env[config.EnvModelCatalog] = `{"flux-pro-2": -1}`
	fn := lambdatest.Start(t, cfg)
	status, body, err := fn.Invoke(context.Background(), lambdatest.Event(t, "intake.json"))
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusBadGateway {
		t.Errorf("status %d, body %s; want 502 for a runtime that exited during init", status, body)
	}
	if !fn.WaitStdout(config.EnvModelCatalog+`: model \"flux-pro-2\": want a whole number`, 5*time.Second) {
		t.Errorf("the function's output does not name %s:\n%s", config.EnvModelCatalog, fn.Stdout())
	}
}
