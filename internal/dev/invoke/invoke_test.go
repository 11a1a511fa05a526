package invoke

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/genjobs/genjobs/internal/dev/modroot"
	"github.com/genjobs/genjobs/internal/dev/samlocal"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
)

func root(t *testing.T) string {
	t.Helper()
	r, err := modroot.Find("")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func template(t *testing.T) *samlocal.Template {
	t.Helper()
	tmpl, err := LoadTemplate(root(t))
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// sqsEvent is a one-record SQS event around body.
func sqsEvent(body, md5sum string) []byte {
	b, _ := json.Marshal(map[string]any{"Records": []map[string]any{{
		"messageId": "m-1", "receiptHandle": "rh", "body": body, "md5OfBody": md5sum,
		"eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:genjobs-observe", "awsRegion": "us-east-1",
		"attributes": map[string]string{}, "messageAttributes": map[string]string{},
	}}})
	return b
}

func TestParseEvent(t *testing.T) {
	body := `{"action":"observe_generation","operation_id":"op-sample-2","expected_remote_job_id":"job_sample_observe","expected_revision":3,"attempt":1}`
	for _, tc := range []struct {
		name, raw string
		kind      EventKind
		warn      bool
		err       string
	}{
		{name: "sqs", raw: string(sqsEvent(body, md5Hex(body))), kind: KindSQS},
		{name: "stale md5", raw: string(sqsEvent(body, "0123")), kind: KindSQS, warn: true},
		{name: "scheduled", raw: `{"version":"0","detail-type":"Scheduled Event","source":"aws.events","detail":{}}`, kind: KindScheduled},
		{name: "scheduler", raw: `{"detail-type":"Scheduled Event","source":"aws.scheduler"}`, kind: KindScheduled},
		{name: "other", raw: `{"hello":"world"}`, kind: KindOther},
		{name: "syntax", raw: "{\n\"Records\": [\n}", err: "is not a JSON object: line 3"},
		{name: "array", raw: `[1]`, err: "is not a JSON object"},
		{name: "null", raw: `null`, err: "is not a JSON object"},
		{name: "no records", raw: `{"Records":[]}`, err: "has 0 records"},
		{name: "not sqs", raw: `{"Records":[{"messageId":"m","body":"x","eventSource":"aws:sns"}]}`, err: "is not an SQS record"},
		{name: "no body", raw: `{"Records":[{"messageId":"m","eventSource":"aws:sqs"}]}`, err: "record m has no body"},
		{name: "records not a list", raw: `{"Records":{"a":1}}`, err: "Records is not a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := ParseEvent("ev.json", []byte(tc.raw))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind != tc.kind || (len(ev.Warnings) > 0) != tc.warn {
				t.Errorf("kind %s, warnings %v; want %s, warnings %v", ev.Kind, ev.Warnings, tc.kind, tc.warn)
			}
		})
	}
	if _, err := ReadEvent(filepath.Join(t.TempDir(), "nope.json")); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing file: %v", err)
	}
}

func TestCheckPairing(t *testing.T) {
	sqsEv := &Event{Path: "a.json", Kind: KindSQS}
	sched := &Event{Path: "b.json", Kind: KindScheduled}
	other := &Event{Path: "c.json", Kind: KindOther}
	tmpl := template(t)
	submit, _ := Lookup(tmpl, "submit")
	sweep, _ := Lookup(tmpl, "sweep")
	for _, tc := range []struct {
		f    Spec
		ev   *Event
		want string
	}{
		{submit, sqsEv, ""}, {submit, sched, "consumes SQS batches"}, {submit, other, "consumes SQS batches"},
		{sweep, sched, ""}, {sweep, other, ""}, {sweep, sqsEv, "runs on a schedule"},
	} {
		err := CheckPairing(tc.f, tc.ev)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s with %s: %v, want %q", tc.f.Name, tc.ev.Kind, err, tc.want)
		}
	}
}

func TestRewrite(t *testing.T) {
	body := `{"action":"observe_generation","operation_id":"op-sample-2","expected_remote_job_id":"job_sample_observe","expected_revision":2,"attempt":1}`
	ev, err := ParseEvent("ev.json", sqsEvent(body, md5Hex(body)))
	if err != nil {
		t.Fatal(err)
	}
	out, notes, err := Rewrite(ev, map[string]operation.Record{"op-sample-2": {OperationID: "op-sample-2", RemoteJobID: "job_real1"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseEvent("out.json", out)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(body, "job_sample_observe", "job_real1", 1)
	if r := got.Records[0]; r.Body != want || r.Md5OfBody != md5Hex(want) || len(got.Warnings) != 0 {
		t.Errorf("record %+v, want body %s with its md5", r, want)
	}
	env, err := message.Decode([]byte(got.Records[0].Body))
	if err != nil || env.ExpectedRevision != 2 {
		t.Errorf("envelope %+v (%v): the stale revision must stay", env, err)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "job_sample_observe -> job_real1") {
		t.Errorf("notes %v", notes)
	}
	// Nothing seeded with a job: the file goes out byte for byte.
	if out, notes, _ := Rewrite(ev, map[string]operation.Record{"op-sample-1": {}}); !bytes.Equal(out, ev.Raw) || notes != nil {
		t.Errorf("rewrote without a placeholder to replace: %s", out)
	}
}

func TestEndpointsCheck(t *testing.T) {
	local := Endpoints{DynamoDB: "http://127.0.0.1:8000", SQS: "http://localhost:4200", S3: "http://127.0.0.1:4200", SecretsManager: "http://127.0.0.1:4200"}
	with := func(f func(*Endpoints)) Endpoints { e := local; f(&e); return e }
	for _, tc := range []struct {
		ep   Endpoints
		want string
	}{
		{local, ""},
		{with(func(e *Endpoints) { e.DynamoDB = "" }), "AWS_ENDPOINT_URL_DYNAMODB is not set: run `make invoke"},
		{with(func(e *Endpoints) { e.SQS = "" }), "AWS_ENDPOINT_URL_SQS is not set"},
		{with(func(e *Endpoints) { e.S3 = "" }), "AWS_ENDPOINT_URL_S3 is not set"},
		{with(func(e *Endpoints) { e.SecretsManager = "" }), "AWS_ENDPOINT_URL_SECRETS_MANAGER is not set"},
		{with(func(e *Endpoints) { e.DynamoDB = "https://dynamodb.us-east-1.amazonaws.com" }), "is not on this machine"},
		{with(func(e *Endpoints) { e.SecretsManager = "https://secretsmanager.us-east-1.amazonaws.com" }), "is not on this machine"},
		{with(func(e *Endpoints) { e.DynamoDB = "127.0.0.1:8000" }), "is not a URL"},
		// Defaulted to SQS's, and checked: invoke creates buses, roles,
		// functions and mappings there.
		{with(func(e *Endpoints) { e.Lambda = "https://lambda.us-east-1.amazonaws.com" }), "AWS_ENDPOINT_URL_LAMBDA=https://lambda.us-east-1.amazonaws.com is not on this machine"},
		{with(func(e *Endpoints) { e.IAM = "https://iam.amazonaws.com" }), "AWS_ENDPOINT_URL_IAM=https://iam.amazonaws.com is not on this machine"},
		{with(func(e *Endpoints) { e.EventBridge = "https://events.us-east-1.amazonaws.com" }), "AWS_ENDPOINT_URL_EVENTBRIDGE=https://events.us-east-1.amazonaws.com is not on this machine"},
	} {
		err := tc.ep.Check()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.ep, err, tc.want)
		}
	}
}

// TestSampleEventsFitTheirFunction checks every file in events/ the way
// `genjobs invoke` will read it: it parses without warnings, suits the
// function its name starts with, comes from a queue that function
// consumes, and names sample operations (or one meant to be unknown) with
// their placeholders.
func TestSampleEventsFitTheirFunction(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root(t), "events", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no events (%v)", err)
	}
	tmpl := template(t)
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			fn, _, _ := strings.Cut(strings.TrimSuffix(name, ".json"), "-")
			spec, ok := Lookup(tmpl, fn)
			if !ok {
				t.Fatalf("%s does not start with a function's name (%s)", name, strings.Join(FunctionNames(tmpl), ", "))
			}
			ev, err := ReadEvent(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckPairing(spec, ev); err != nil {
				t.Fatal(err)
			}
			if w := append(slices.Clone(ev.Warnings), queueWarnings(spec, ev)...); len(w) > 0 {
				t.Errorf("warnings: %v", w)
			}
			for _, r := range ev.Records {
				env, err := message.Decode([]byte(r.Body))
				if err != nil {
					continue
				}
				s, known := Samples[env.OperationID]
				switch {
				case !known && !strings.Contains(name, "unknown"):
					t.Errorf("record %s names %s, which seeding does not know (only *unknown* events may)", r.MessageId, env.OperationID)
				case known && env.ExpectedRemoteJobID != "" && env.ExpectedRemoteJobID != s.Placeholder:
					t.Errorf("record %s: job id %s, want the placeholder %s", r.MessageId, env.ExpectedRemoteJobID, s.Placeholder)
				case known && env.ExpectedRevision != s.Revision && !strings.Contains(name, "stale"):
					t.Errorf("record %s: expected_revision %d, the seeded record is at %d (only *stale* events may differ)", r.MessageId, env.ExpectedRevision, s.Revision)
				}
			}
		})
	}
}

// TestFunctionsFromTheTemplate checks what is read from the template for
// each function: the order, names, event sources, the consumed queues'
// kinds and the Globals merge of timeout and memory.
func TestFunctionsFromTheTemplate(t *testing.T) {
	fs := Functions(template(t))
	var got []string
	for _, f := range fs {
		got = append(got, fmt.Sprintf("%s %s %s %v %v %d", f.LogicalID, f.Name, f.Kind, f.Consumes, f.Timeout, f.MemoryMB))
	}
	// The topology's functions, in order (it is held to the template and to
	// the composition table); the memory is the Globals' 128 MB but for
	// deliver's own 512. The intake, invoked through its function URL, has
	// no event source.
	var want []string
	for _, f := range topology.Stack.Functions {
		kind, consumes, mb := KindOther, []string{}, 128
		if f.Schedule != "" {
			kind = KindScheduled
		}
		for _, m := range f.Mappings {
			kind = KindSQS
			q, _ := topology.Stack.Queue(m.Queue)
			consumes = append(consumes, strings.TrimPrefix(q.Name, "genjobs-"))
		}
		slices.Sort(consumes)
		if f.Name == topology.Deliver {
			mb = 512
		}
		want = append(want, fmt.Sprintf("%s %s %s %v %v %d", f.ID, f.Name, kind, consumes, f.Timeout, mb))
	}
	if !slices.Equal(got, want) {
		t.Errorf("functions:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestWriteText(t *testing.T) {
	env := message.Envelope{Action: message.ActionObserveGeneration, OperationID: "op-sample-1", ExpectedRevision: 3, ExpectedRemoteJobID: "job_1", Attempt: 1}
	r := &Result{
		Function: "submit", Status: 200, Response: json.RawMessage(`{"batchItemFailures":[]}`), DurationMS: 12,
		Log: []string{"START RequestId: x", "END RequestId: x"},
		Operations: []OperationChange{
			{ID: "op-sample-1", Before: &OperationState{Phase: operation.PhasePrepared, Revision: 1},
				After: &OperationState{Phase: operation.PhaseAccepted, Revision: 3, RemoteJobID: "job_1", NextAction: "observe_generation"}},
			{ID: "op-x", Before: nil, After: nil},
		},
		Queues: []QueueContents{
			{Queue: Queue{Kind: "observe"}, Count: 2, Messages: []QueuedMessage{{Body: "{}", Envelope: &env}}},
			{Queue: Queue{Kind: "dispatch-dlq"}, Messages: []QueuedMessage{}},
		},
		Genace:          GenaceCounts{Posts: 1},
		ReviewsOpened:   []ReviewSummary{{ID: "dlq:m", Source: "dlq", Category: "malformed_message", Recommended: "acknowledge"}},
		ArtifactsStored: []Object{{Key: "ops/a/b/0.png", Size: 10}},
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"── response: submit, HTTP 200, 12 ms ──\n{\n  \"batchItemFailures\": []\n}\n",
		"── function log ──\nSTART RequestId: x\nEND RequestId: x\n",
		"op-sample-1  prepared r1  →  accepted r3 (job job_1, next observe_generation)\n",
		"op-x         unchanged: absent\n",
		"observe       2 message(s) (1 delayed or in flight)\n",
		"observe_generation op-sample-1 expected_revision=3 job=job_1 attempt=1\n",
		"genace simulator: 1 POST, 0 GET, 0 output download(s)\n",
		"dlq:m  source=dlq category=malformed_message recommended=acknowledge\n",
		"ops/a/b/0.png (10 bytes)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "FAILED") {
		t.Errorf("a successful invocation reported as failed:\n%s", out)
	}

	failed := &Result{Function: "triage", Status: 502, EmulatorLog: []string{"Runtime.ExitError"}}
	b.Reset()
	_ = failed.WriteText(&b)
	if err := failed.Err(); err == nil || !strings.Contains(b.String(), "── emulator log ──\nRuntime.ExitError") || !strings.Contains(b.String(), "FAILED: triage failed: the emulator answered HTTP 502") {
		t.Errorf("502 (err %v):\n%s", err, b.String())
	}
	returned := &Result{Function: "submit", Status: 200}
	returned.setBody([]byte(`{"errorType":"errorString","errorMessage":"boom"}`))
	if err := returned.Err(); err == nil || err.Error() != "submit returned an error: errorString: boom" {
		t.Errorf("returned error: %v", err)
	}
	timedOut := &Result{Function: "observe", Status: 200}
	timedOut.setBody([]byte("Task timed out after 60.00 seconds"))
	if err := timedOut.Err(); err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Errorf("plain-text answer: %v", err)
	}
}

// TestREADMEShowsTheSAMCommands keeps README.md's deploy steps what `make
// sam-env` prints: make sam-env, then each sam command exactly as
// SAMCommands writes it, then sam deploy --guided.
func TestREADMEShowsTheSAMCommands(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	rewritten, err := SampleRewrites(root(t))
	if err != nil {
		t.Fatal(err)
	}
	at := strings.Index(readme, "\nmake sam-env")
	if at < 0 {
		t.Fatal("README.md does not show make sam-env")
	}
	for _, c := range SAMCommands(template(t), SAMLocalDir, rewritten) {
		i := strings.Index(readme, "\n"+c+"\n")
		if i < 0 {
			t.Errorf("README.md lacks the line\n%s", c)
			continue
		}
		if i < at {
			t.Errorf("README.md shows %q before make sam-env", c)
		}
		at = i
	}
	if i := strings.Index(readme, "\nsam deploy --guided"); i < at {
		t.Errorf("README.md shows sam deploy --guided at %d, not after the sam local invoke lines (%d)", i, at)
	}
}
