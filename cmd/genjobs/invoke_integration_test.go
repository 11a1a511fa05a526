//go:build integration

// These tests run `genjobs invoke` in-process for every sample event in
// events/, against the DynamoDB Local and moto that `make test` starts
// and the emulator `bash .ci/rie.sh install` installs: each event must
// still do what it was written to show. A new event file without an
// expectation below fails the test, so events/ and this table stay in
// step.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/dev/emulator"
	"github.com/genjobs/genjobs/internal/dev/invoke"
	"github.com/genjobs/genjobs/internal/dev/modroot"
	"github.com/genjobs/genjobs/internal/dev/testenv"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/operator"
)

// invokeExpectation is what one sample event must do on a fresh stack.
type invokeExpectation struct {
	function string
	// failures are the batchItemFailures the answer must list, exactly
	// (empty: a batch response with none). nil for a non-SQS function.
	failures []string
	// check asserts the state change the event exists to show.
	check func(t *testing.T, r *invoke.Result)
	// args are more flags for genjobs invoke.
	args []string
}

// feedStopsSoon runs observe with its feed's stop 3 s after the start:
// holding nothing, it would wait out one empty 20 s receive.
var feedStopsSoon = []string{"--timeout", (observe.DefaultFeedMargin + 3*time.Second).String()}

// The message ids the expectations name.
const (
	submitBatchMalformedID = "c0d9e1a2-6b3f-4f70-8e15-92a4b7c6d3e8" // submit-batch.json's {"action":"post_twice"}
	submitUnknownID        = "5df8650c-067f-422f-8b8d-4b032fb277b7" // submit-unknown-operation.json
	triageID               = "de91f872-cac5-408b-b4a0-b2d9ed33ac5c" // triage.json
	triageMalformedID      = "d89a416d-891f-4ee6-8a9c-455de48190b9" // triage-malformed.json
)

var invokeExpectations = map[string]invokeExpectation{
	"submit.json":           {function: "submit", failures: []string{}, check: submittedOnce},
	"submit-batch.json":     {function: "submit", failures: []string{submitBatchMalformedID}, check: submittedOnce},
	"submit-duplicate.json": {function: "submit", failures: []string{}, check: submittedOnce}, // alone on a fresh stack it is a first dispatch
	"submit-unknown-operation.json": {function: "submit", failures: []string{submitUnknownID}, check: func(t *testing.T, r *invoke.Result) {
		// No record: the message fails and is retried towards the DLQ;
		// nothing is POSTed or written.
		wantOperation(t, r, "op-unknown-404", nil, nil)
		wantGenace(t, r, invoke.GenaceCounts{})
		wantQueues(t, r, map[string]int{})
	}},
	"intake.json": {function: "intake", check: func(t *testing.T, r *invoke.Result) {
		// A create through the function URL: answered 201 with the
		// operation's status, its record written and its one dispatch
		// sent; nothing reaches Genace.
		var ans struct {
			StatusCode int    `json:"statusCode"`
			Body       string `json:"body"`
		}
		if err := json.Unmarshal(r.Response, &ans); err != nil || ans.StatusCode != 201 || !strings.Contains(ans.Body, `"operation_id":"op-sample-intake"`) {
			t.Errorf("answer %s (%v), want 201 with op-sample-intake's status", r.Response, err)
		}
		wantGenace(t, r, invoke.GenaceCounts{})
		wantQueues(t, r, map[string]int{"dispatch": 1})
	}},
	"observe.json": {function: "observe", failures: []string{}, args: feedStopsSoon, check: func(t *testing.T, r *invoke.Result) {
		// The job finished at once: the snapshot is saved and delivery
		// follows.
		c := wantChanged(t, r, "op-sample-2", operation.PhaseAccepted, 3, operation.PhaseSucceeded, 4)
		wantGenace(t, r, invoke.GenaceCounts{Gets: 1})
		wantQueues(t, r, map[string]int{"deliver": 1})
		wantEnvelope(t, r, "deliver", message.Envelope{Action: message.ActionDeliverArtifacts, OperationID: "op-sample-2",
			ExpectedRevision: 4, ExpectedRemoteJobID: c.After.RemoteJobID, Attempt: 2})
	}},
	"observe-stale.json": {function: "observe", failures: []string{}, args: feedStopsSoon, check: func(t *testing.T, r *invoke.Result) {
		// expected_revision 2 against revision 3: acknowledged as
		// obsolete, no GET, no write, no follow-up.
		wantUnchanged(t, r, "op-sample-2", operation.PhaseAccepted, 3)
		wantGenace(t, r, invoke.GenaceCounts{})
		wantQueues(t, r, map[string]int{})
		wantLog(t, r, "stale_revision")
	}},
	"deliver.json": {function: "deliver", failures: []string{}, check: func(t *testing.T, r *invoke.Result) {
		// The one output is downloaded once, stored in S3 and recorded;
		// the operation is delivered and nothing follows.
		c, _ := operationOf(r, "op-sample-3")
		if c.Before == nil || c.Before.Phase != operation.PhaseSucceeded || c.Before.Revision != 5 {
			t.Errorf("op-sample-3 before: %s, want succeeded r5", c.Before)
		}
		if c.After == nil || c.After.Phase != operation.PhaseDelivered || c.After.Deliveries != 1 {
			t.Errorf("op-sample-3 after: %s, want delivered with 1 output", c.After)
		}
		if len(r.ArtifactsStored) != 1 || !strings.HasPrefix(r.ArtifactsStored[0].Key, "ops/op-sample-3/") || r.ArtifactsStored[0].Size == 0 {
			t.Errorf("artifacts stored %+v, want one non-empty object under ops/op-sample-3/", r.ArtifactsStored)
		}
		wantGenace(t, r, invoke.GenaceCounts{Gets: 1, FileGets: 1})
		wantQueues(t, r, map[string]int{})
		// Its completion event went to the stack's bus (moto's): the EMF
		// line of a sent one, none of a failed one.
		if !slices.ContainsFunc(r.Log, func(l string) bool { return strings.Contains(l, `"EventsPublished":1`) }) ||
			slices.ContainsFunc(r.Log, func(l string) bool { return strings.Contains(l, "EventPublishFailures") }) {
			t.Errorf("the delivered event was not published to the bus")
		}
	}},
	"triage.json": {function: "triage", failures: []string{}, check: func(t *testing.T, r *invoke.Result) {
		// One review for the dead letter, with the record's current
		// phase; the record itself is never touched.
		wantUnchanged(t, r, "op-sample-2", operation.PhaseAccepted, 3)
		wantReviews(t, r, invoke.ReviewSummary{ID: "dlq:" + triageID, Source: "dlq", OperationID: "op-sample-2",
			Queue: "genjobs-observe-dlq", Phase: string(operation.PhaseAccepted)})
		wantGenace(t, r, invoke.GenaceCounts{})
		wantQueues(t, r, map[string]int{})
	}},
	"triage-malformed.json": {function: "triage", failures: []string{}, check: func(t *testing.T, r *invoke.Result) {
		wantReviews(t, r, invoke.ReviewSummary{ID: "dlq:" + triageMalformedID, Source: "dlq", Queue: "genjobs-dispatch-dlq",
			Category: "malformed_message"})
		wantQueues(t, r, map[string]int{})
	}},
	"sweep.json": {function: "sweep", check: func(t *testing.T, r *invoke.Result) {
		var got map[string]int
		if err := json.Unmarshal(r.Response, &got); err != nil {
			t.Fatalf("answer %s: %v", r.Response, err)
		}
		// The claim it made uncertain sent its event at once, from the
		// write: none was left for the sweep's own sending. Observe's
		// mapping (the stack's, in moto, at the template's 8) is fitted to
		// the one observation queued, Lambda's least, 2: halved on the way,
		// to 4.
		want := map[string]int{"read": 3, "rearmed": 1, "claims_expired": 1, "skipped": 1, "dispatches_dropped": 0, "events_sent": 0, "events_failed": 0,
			"observe_concurrency": 4}
		if !equalCounts(got, want) {
			t.Errorf("sweep answered %v, want %v", got, want)
		}
		c := wantChanged(t, r, "op-sample-4", operation.PhaseAccepted, 3, operation.PhaseAccepted, 4)
		wantChanged(t, r, "op-sample-5", operation.PhaseSubmitting, 2, operation.PhaseUncertain, 3)
		wantUnchanged(t, r, "op-sample-6", operation.PhaseAccepted, 3)
		wantQueues(t, r, map[string]int{"observe": 1})
		wantEnvelope(t, r, "observe", message.Envelope{Action: message.ActionObserveGeneration, OperationID: "op-sample-4",
			ExpectedRevision: 4, ExpectedRemoteJobID: c.After.RemoteJobID})
		if len(r.ReviewsOpened) != 1 || r.ReviewsOpened[0].OperationID != "op-sample-5" || r.ReviewsOpened[0].Source != "sweep" {
			t.Errorf("reviews opened %+v, want one by the sweep for op-sample-5", r.ReviewsOpened)
		}
		wantGenace(t, r, invoke.GenaceCounts{})
	}},
}

// submittedOnce is a first dispatch of op-sample-1: one POST, the record
// accepted with the job id, exactly one observation queued.
func submittedOnce(t *testing.T, r *invoke.Result) {
	t.Helper()
	c := wantChanged(t, r, "op-sample-1", operation.PhasePrepared, 1, operation.PhaseAccepted, 3)
	if c.After != nil && c.After.RemoteJobID == "" {
		t.Error("op-sample-1 accepted without a job id")
	}
	wantGenace(t, r, invoke.GenaceCounts{Posts: 1})
	wantQueues(t, r, map[string]int{"observe": 1})
	if c.After != nil {
		wantEnvelope(t, r, "observe", message.Envelope{Action: message.ActionObserveGeneration, OperationID: "op-sample-1",
			ExpectedRevision: 3, ExpectedRemoteJobID: c.After.RemoteJobID, Attempt: 1})
	}
}

func TestInvokeSampleEvents(t *testing.T) {
	root := invokeTestEnv(t)
	files, err := filepath.Glob(filepath.Join(root, "events", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	for name := range invokeExpectations {
		if !slices.Contains(names, name) {
			t.Errorf("expectation for events/%s, which does not exist", name)
		}
	}
	for _, name := range names {
		exp, ok := invokeExpectations[name]
		if !ok {
			t.Errorf("events/%s has no expectation in invokeExpectations: add what it must do", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := runInvoke(t, exp.function, filepath.Join(root, "events", name), exp.args...)
			if err := r.Err(); err != nil {
				t.Fatalf("%v\nlog:\n%s\nemulator:\n%s", err, strings.Join(r.Log, "\n"), strings.Join(r.EmulatorLog, "\n"))
			}
			if exp.failures != nil {
				wantFailures(t, r, exp.failures)
			}
			exp.check(t, r)
			for _, l := range append(slices.Clone(r.Log), r.EmulatorLog...) {
				if strings.Contains(l, invoke.APIKey) {
					t.Errorf("the Genace API key appears in the output: %s", l)
				}
			}
			if !slices.ContainsFunc(r.Log, func(l string) bool { return strings.HasPrefix(l, "END RequestId:") }) {
				t.Errorf("no END line in the function's log:\n%s", strings.Join(r.Log, "\n"))
			}
			if t.Failed() {
				t.Logf("function log:\n%s", strings.Join(r.Log, "\n"))
			}
		})
	}
}

// TestInvokeTextReport checks the report people read: the answer, the
// log and the before → after lines.
func TestInvokeTextReport(t *testing.T) {
	root := invokeTestEnv(t)
	var stdout, stderr bytes.Buffer
	err := call(invokeContext(t), "invoke", []string{"--function", "submit", "--event", filepath.Join(root, "events", "submit.json")}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"── response: submit, HTTP 200", `"batchItemFailures": []`, "── function log ──", "START RequestId:",
		"── what changed ──", "op-sample-1  prepared r1  →  accepted r3", "genace simulator: 1 POST",
		"observe_generation op-sample-1 expected_revision=3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{"seeded op-sample-1: prepared r1", "built build/host/functions/submit/bootstrap"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, stderr.String())
		}
	}
}

// TestInvokeCommandLineErrors checks the errors that need no service.
func TestInvokeCommandLineErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{\n  \"Records\": [\n    {\"messageId\": \"x\",\n  ]\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := modroot.Find("")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{"--event", "events/submit.json"}, true, "--function is required"},
		{[]string{"--function", "submit"}, true, "--event is required"},
		{[]string{"--function", "submit", "--event", "events/submit.json", "--timeout", "-1s"}, true, "--timeout is -1s"},
		{[]string{"--function", "render", "--event", "events/submit.json"}, true, `unknown function "render": want one of submit, observe, deliver, triage, sweep`},
		{[]string{"--function", "submit", "--event", filepath.Join(dir, "missing.json")}, false, "missing.json does not exist"},
		{[]string{"--function", "submit", "--event", bad}, false, "is not a JSON object: line 4"},
		{[]string{"--function", "submit", "--event", filepath.Join(root, "events", "sweep.json")}, false, "submit consumes SQS batches"},
		{[]string{"--function", "sweep", "--event", filepath.Join(root, "events", "submit.json")}, false, "sweep runs on a schedule"},
	} {
		err := call(context.Background(), "invoke", tc.args, &bytes.Buffer{}, &bytes.Buffer{})
		var ue *operator.UsageError
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.As(err, &ue) != tc.usage {
			t.Errorf("%q: error %v (usage error: %v), want %q (usage error: %v)", tc.args, err, errors.As(err, &ue), tc.want, tc.usage)
		}
	}
}

// TestInvokeNeedsTheServices checks the error without the endpoints that
// `make invoke` exports.
func TestInvokeNeedsTheServices(t *testing.T) {
	root, err := modroot.Find("")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", "")
	err = call(context.Background(), "invoke", []string{"--function", "submit", "--event", filepath.Join(root, "events", "submit.json")}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "AWS_ENDPOINT_URL_DYNAMODB is not set") || !strings.Contains(err.Error(), "make invoke") {
		t.Errorf("error %v, want one naming AWS_ENDPOINT_URL_DYNAMODB and make invoke", err)
	}
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", "https://dynamodb.us-east-1.amazonaws.com")
	t.Setenv("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:4100")
	err = call(context.Background(), "invoke", []string{"--function", "submit", "--event", filepath.Join(root, "events", "submit.json")}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "is not on this machine") {
		t.Errorf("error %v, want a refusal of a non-local endpoint", err)
	}
}

// invokeTestEnv returns the module root once the services and the
// emulator are there (skipping, or failing under
// GENJOBS_REQUIRE_INTEGRATION=1, otherwise).
func invokeTestEnv(t *testing.T) string {
	t.Helper()
	testenv.Endpoint(t, "AWS_ENDPOINT_URL_DYNAMODB")
	testenv.Endpoint(t, "AWS_ENDPOINT_URL_SQS")
	root, err := modroot.Find("")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := emulator.Installed(root); err != nil {
		testenv.Skip(t, err.Error())
	}
	return root
}

func invokeContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// runInvoke runs `genjobs invoke --json` and decodes its report.
func runInvoke(t *testing.T, function, event string, args ...string) *invoke.Result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := call(invokeContext(t), "invoke", append([]string{"--function", function, "--event", event, "--json"}, args...), &stdout, &stderr)
	if stdout.Len() == 0 {
		t.Fatalf("no report (error %v)\n%s", err, stderr.String())
	}
	var r invoke.Result
	if jerr := json.Unmarshal(stdout.Bytes(), &r); jerr != nil {
		t.Fatalf("report is not JSON: %v\n%s", jerr, stdout.String())
	}
	if err != nil && r.Err() == nil {
		t.Fatalf("invoke failed: %v\n%s", err, stderr.String())
	}
	return &r
}

func wantFailures(t *testing.T, r *invoke.Result, want []string) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(r.Response))
	dec.DisallowUnknownFields()
	var resp events.SQSEventResponse
	if err := dec.Decode(&resp); err != nil || resp.BatchItemFailures == nil {
		t.Fatalf("answer %s is not a batch response (%v)", r.Response, err)
	}
	got := []string{}
	for _, f := range resp.BatchItemFailures {
		got = append(got, f.ItemIdentifier)
	}
	if !slices.Equal(got, want) {
		t.Errorf("batchItemFailures %v, want %v", got, want)
	}
}

func wantOperation(t *testing.T, r *invoke.Result, id string, before, after *invoke.OperationState) {
	t.Helper()
	c, ok := operationOf(r, id)
	if !ok {
		t.Fatalf("%s is not in the report", id)
	}
	if (c.Before == nil) != (before == nil) || (c.After == nil) != (after == nil) {
		t.Errorf("%s: %s → %s, want %s → %s", id, c.Before, c.After, before, after)
	}
}

func wantChanged(t *testing.T, r *invoke.Result, id string, fromPhase operation.Phase, fromRev int64, toPhase operation.Phase, toRev int64) invoke.OperationChange {
	t.Helper()
	c, ok := operationOf(r, id)
	if !ok {
		t.Fatalf("%s is not in the report", id)
	}
	if c.Before == nil || c.After == nil || c.Before.Phase != fromPhase || c.Before.Revision != fromRev ||
		c.After.Phase != toPhase || c.After.Revision != toRev {
		t.Fatalf("%s: %s → %s, want %s r%d → %s r%d", id, c.Before, c.After, fromPhase, fromRev, toPhase, toRev)
	}
	return c
}

func wantUnchanged(t *testing.T, r *invoke.Result, id string, phase operation.Phase, rev int64) {
	t.Helper()
	c, ok := operationOf(r, id)
	if !ok {
		t.Fatalf("%s is not in the report", id)
	}
	if c.Changed() || c.After == nil || c.After.Phase != phase || c.After.Revision != rev {
		t.Errorf("%s: %s → %s, want unchanged %s r%d", id, c.Before, c.After, phase, rev)
	}
}

// wantQueues checks every queue's message count (kinds not named: 0).
func wantQueues(t *testing.T, r *invoke.Result, want map[string]int) {
	t.Helper()
	// The template's seven: three queues, their DLQs, and the queue the
	// sweep's failed runs go to.
	if len(r.Queues) != 7 {
		t.Errorf("%d queues in the report, want 7", len(r.Queues))
	}
	for _, q := range r.Queues {
		if q.Count != want[q.Kind] || len(q.Messages) != want[q.Kind] {
			t.Errorf("%s queue: %d message(s) (%d visible): %+v, want %d", q.Kind, q.Count, len(q.Messages), q.Messages, want[q.Kind])
		}
	}
}

func wantEnvelope(t *testing.T, r *invoke.Result, kind string, want message.Envelope) {
	t.Helper()
	var q invoke.QueueContents
	if i := slices.IndexFunc(r.Queues, func(q invoke.QueueContents) bool { return q.Kind == kind }); i >= 0 {
		q = r.Queues[i]
	}
	if len(q.Messages) != 1 || q.Messages[0].Envelope == nil || *q.Messages[0].Envelope != want {
		t.Errorf("%s queue holds %+v, want exactly %+v", kind, q.Messages, want)
	}
}

func wantGenace(t *testing.T, r *invoke.Result, want invoke.GenaceCounts) {
	t.Helper()
	if r.Genace != want {
		t.Errorf("simulator counted %+v during the invocation, want %+v", r.Genace, want)
	}
}

// wantReviews checks the reviews opened; empty fields in want are not
// compared, and the recommendation must be set.
func wantReviews(t *testing.T, r *invoke.Result, want ...invoke.ReviewSummary) {
	t.Helper()
	if len(r.ReviewsOpened) != len(want) {
		t.Fatalf("reviews opened %+v, want %d", r.ReviewsOpened, len(want))
	}
	for i, w := range want {
		g := r.ReviewsOpened[i]
		for _, f := range [][3]string{
			{"id", g.ID, w.ID}, {"source", g.Source, w.Source}, {"operation", g.OperationID, w.OperationID},
			{"queue", g.Queue, w.Queue}, {"category", g.Category, w.Category}, {"phase", g.Phase, w.Phase},
		} {
			if f[2] != "" && f[1] != f[2] {
				t.Errorf("review %s: %s %q, want %q", g.ID, f[0], f[1], f[2])
			}
		}
		if g.Recommended == "" {
			t.Errorf("review %s has no recommended action", g.ID)
		}
	}
}

func wantLog(t *testing.T, r *invoke.Result, s string) {
	t.Helper()
	if !slices.ContainsFunc(r.Log, func(l string) bool { return strings.Contains(l, s) }) {
		t.Errorf("the function's log lacks %q:\n%s", s, strings.Join(r.Log, "\n"))
	}
}

func equalCounts(a, b map[string]int) bool {
	keys := func(m map[string]int) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return ks
	}
	if !slices.Equal(keys(a), keys(b)) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// operationOf returns the change of one watched operation.
func operationOf(r *invoke.Result, id string) (invoke.OperationChange, bool) {
	i := slices.IndexFunc(r.Operations, func(o invoke.OperationChange) bool { return o.ID == id })
	if i < 0 {
		return invoke.OperationChange{}, false
	}
	return r.Operations[i], true
}
