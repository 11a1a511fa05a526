package lambdatest_test

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/dev/lambdatest"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/queue"
)

// malformed lists the records whose bodies are deliberately not
// envelopes (by file, message id): they exercise the DLQ path.
var malformed = map[string]map[string]bool{
	"submit-batch.json":     {"c0d9e1a2-6b3f-4f70-8e15-92a4b7c6d3e8": true},
	"triage-malformed.json": {"d89a416d-891f-4ee6-8a9c-455de48190b9": true},
}

// scheduled lists the files that are EventBridge scheduled events (the
// sweep's), not SQS events.
var scheduled = map[string]bool{"sweep.json": true}

// functionURL lists the files that are function URL requests (the
// intake's), not SQS events.
var functionURL = map[string]bool{"intake.json": true}

// queueFor is the queue each action is consumed from.
var queueFor = map[message.Action]string{
	message.ActionSubmitGeneration:  "genjobs-dispatch",
	message.ActionObserveGeneration: "genjobs-observe",
	message.ActionDeliverArtifacts:  "genjobs-deliver",
}

// TestSampleEvents keeps events/ what Lambda's SQS event source mapping
// would deliver: `sam local invoke -e` and the integration tests both feed
// these files to the real functions, so a field Lambda never sends, a
// wrong checksum or an envelope on the wrong queue would make them test
// something production never sees.
func TestSampleEvents(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(lambdatest.Root(t), "events", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no sample events in events/")
	}
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if scheduled[name] {
				checkScheduled(t, dec)
				return
			}
			if functionURL[name] {
				checkFunctionURL(t, dec)
				return
			}
			var ev events.SQSEvent
			if err := dec.Decode(&ev); err != nil {
				t.Fatalf("not an SQS event: %v", err)
			}
			if len(ev.Records) == 0 || len(ev.Records) > 10 {
				t.Fatalf("%d records; the event source mapping delivers 1..10", len(ev.Records))
			}
			ids := map[string]bool{}
			for _, r := range ev.Records {
				checkRecord(t, r)
				if ids[r.MessageId] {
					t.Errorf("message %s twice in one batch; SQS never does that", r.MessageId)
				}
				ids[r.MessageId] = true
				env, err := message.Decode([]byte(r.Body))
				switch {
				case malformed[name][r.MessageId]:
					if err == nil {
						t.Errorf("record %s is listed as malformed but decodes", r.MessageId)
					}
				case err != nil:
					t.Errorf("record %s: %v", r.MessageId, err)
				case strings.HasPrefix(name, "triage"):
					// Triage reads the DLQ of the queue the action belongs on.
					if !strings.HasSuffix(r.EventSourceARN, ":"+queueFor[env.Action]+"-dlq") {
						t.Errorf("record %s: %s on %s, want the DLQ %s-dlq", r.MessageId, env.Action, r.EventSourceARN, queueFor[env.Action])
					}
				case !strings.HasSuffix(r.EventSourceARN, ":"+queueFor[env.Action]):
					t.Errorf("record %s: %s on %s, want queue %s", r.MessageId, env.Action, r.EventSourceARN, queueFor[env.Action])
				}
			}
		})
	}
}

func checkRecord(t *testing.T, r events.SQSMessage) {
	t.Helper()
	sum := md5.Sum([]byte(r.Body))
	if r.Md5OfBody != hex.EncodeToString(sum[:]) {
		t.Errorf("record %s: md5OfBody %s is not the body's MD5 %x", r.MessageId, r.Md5OfBody, sum)
	}
	if r.MessageId == "" || r.ReceiptHandle == "" {
		t.Errorf("record %q: empty messageId or receiptHandle", r.MessageId)
	}
	if r.EventSource != "aws:sqs" {
		t.Errorf("record %s: eventSource %q", r.MessageId, r.EventSource)
	}
	if _, err := queue.QueueURLFromARN(r.EventSourceARN); err != nil {
		t.Errorf("record %s: %v", r.MessageId, err)
	}
	if parts := strings.Split(r.EventSourceARN, ":"); len(parts) != 6 || parts[3] != r.AWSRegion {
		t.Errorf("record %s: awsRegion %q does not match %s", r.MessageId, r.AWSRegion, r.EventSourceARN)
	}
	for _, k := range []string{"ApproximateReceiveCount", "SentTimestamp", "SenderId", "ApproximateFirstReceiveTimestamp"} {
		if r.Attributes[k] == "" {
			t.Errorf("record %s: attribute %s missing", r.MessageId, k)
		}
	}
	if len(r.Attributes) != 4 {
		t.Errorf("record %s: attributes %v; Lambda sends exactly the four system attributes", r.MessageId, r.Attributes)
	}
	if r.MessageAttributes == nil {
		t.Errorf("record %s: messageAttributes missing; Lambda sends {} when there are none", r.MessageId)
	}
}

// checkScheduled checks a scheduled event as EventBridge delivers it.
func checkScheduled(t *testing.T, dec *json.Decoder) {
	t.Helper()
	var ev events.CloudWatchEvent
	if err := dec.Decode(&ev); err != nil {
		t.Fatalf("not a scheduled event: %v", err)
	}
	if ev.DetailType != "Scheduled Event" || ev.Source != "aws.events" || ev.Version != "0" || ev.ID == "" || ev.AccountID == "" || ev.Time.IsZero() {
		t.Errorf("scheduled event fields: %+v", ev)
	}
	if string(ev.Detail) != "{}" {
		t.Errorf("detail %s, want {}", ev.Detail)
	}
	if len(ev.Resources) != 1 || !strings.HasPrefix(ev.Resources[0], "arn:aws:events:"+ev.Region+":"+ev.AccountID+":rule/") {
		t.Errorf("resources %v, want one rule ARN", ev.Resources)
	}
}

// checkFunctionURL checks a request as a function URL with AWS_IAM auth
// delivers it: payload 2.0, the signer's principal, a path and host that
// agree with the request context, a body its content-length measures.
func checkFunctionURL(t *testing.T, dec *json.Decoder) {
	t.Helper()
	var ev events.LambdaFunctionURLRequest
	if err := dec.Decode(&ev); err != nil {
		t.Fatalf("not a function URL request: %v", err)
	}
	rc := ev.RequestContext
	if ev.Version != "2.0" || rc.HTTP.Path != ev.RawPath || rc.HTTP.Method == "" || ev.Headers["host"] != rc.DomainName ||
		!strings.HasPrefix(rc.DomainName, rc.APIID+".lambda-url.") || rc.DomainPrefix != rc.APIID || rc.RequestID == "" || rc.TimeEpoch == 0 {
		t.Errorf("request fields: %+v", ev)
	}
	if rc.Authorizer == nil || rc.Authorizer.IAM == nil || !strings.HasPrefix(rc.Authorizer.IAM.UserARN, "arn:aws:") || rc.Authorizer.IAM.AccountID != rc.AccountID {
		t.Errorf("authorizer %+v: want the IAM principal of this account (AuthType AWS_IAM)", rc.Authorizer)
	}
	if ev.IsBase64Encoded || ev.Headers["content-length"] != strconv.Itoa(len(ev.Body)) {
		t.Errorf("body of %d bytes, content-length %q, base64 %v", len(ev.Body), ev.Headers["content-length"], ev.IsBase64Encoded)
	}
}
