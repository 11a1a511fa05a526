package invoke

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/queue"
)

// fakeQueue is one SQS queue that already holds another message, which a
// receive hands out before the one sent.
type fakeQueue struct {
	url      string
	held     []queue.Message
	receives int
	putBack  []string
}

func (f *fakeQueue) Send(_ context.Context, url string, body []byte, _ time.Duration) (string, error) {
	if url != f.url {
		return "", fmt.Errorf("no queue %s", url)
	}
	id := fmt.Sprintf("id-%d", len(f.held))
	f.held = append(f.held, queue.Message{ID: id, Body: body})
	return id, nil
}

func (f *fakeQueue) Receive(context.Context, string, int, time.Duration, time.Duration) ([]queue.Message, error) {
	f.receives++
	out := make([]queue.Message, len(f.held))
	for i, m := range f.held {
		m.ReceiptHandle = fmt.Sprintf("%s#%d", m.ID, f.receives)
		out[i] = m
	}
	f.held = nil
	return out, nil
}

func (f *fakeQueue) ChangeVisibility(_ context.Context, _, handle string, _ time.Duration) error {
	f.putBack = append(f.putBack, handle)
	return nil
}

func TestPassThroughGivesIssuedReceiptHandles(t *testing.T) {
	body := `{"action":"observe_generation","operation_id":"op-sample-2","expected_remote_job_id":"job_sample_observe","expected_revision":3,"attempt":1}`
	raw, err := json.Marshal(map[string]any{"Records": []map[string]any{
		{"messageId": "m-1", "receiptHandle": "made-up", "body": body, "eventSource": "aws:sqs",
			"eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:genjobs-observe", "attributes": map[string]string{"ApproximateReceiveCount": "3"}},
		{"messageId": "m-2", "receiptHandle": "made-up-too", "body": body, "eventSource": "aws:sqs",
			"eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:elsewhere"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	q := &fakeQueue{url: "local://observe", held: []queue.Message{{ID: "someone-elses", Body: []byte("x")}}}
	out, got, err := PassThrough(context.Background(), q, raw, func(arn string) (string, bool) {
		return q.url, arn == "arn:aws:sqs:us-east-1:000000000000:genjobs-observe"
	})
	if err != nil {
		t.Fatal(err)
	}
	var ev events.SQSEvent
	if err := json.Unmarshal(out, &ev); err != nil {
		t.Fatal(err)
	}
	r := ev.Records
	if len(r) != 2 || r[0].ReceiptHandle != "id-1#1" || r[0].MessageId != "m-1" || r[0].Body != body || r[0].Attributes["ApproximateReceiveCount"] != "3" {
		t.Fatalf("record of a known queue: %+v; want the receive's handle and the event's id, body and attributes", r[0])
	}
	if r[1].ReceiptHandle != "made-up-too" {
		t.Fatalf("record of an unknown queue changed: %+v", r[1])
	}
	if len(got) != 1 || got[0] != (Received{QueueURL: q.url, ReceiptHandle: "id-1#1"}) {
		t.Fatalf("received %+v", got)
	}
	if len(q.putBack) != 1 || q.putBack[0] != "someone-elses#1" {
		t.Fatalf("put back %v, want the other message made visible again", q.putBack)
	}
}
