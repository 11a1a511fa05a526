//go:build integration

package notify_test

// Against moto (bash .ci/moto.sh run -- go test -tags integration ...),
// which the SDK reaches through AWS_ENDPOINT_URL_EVENTBRIDGE and
// AWS_ENDPOINT_URL_SQS on its own: the sink's events arrive on the bus,
// and a rule on it delivers them to a queue, where the test reads them.

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/genjobs/genjobs/client"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/genjobs/genjobs/internal/dev/testenv"
	"github.com/genjobs/genjobs/internal/notify"
	"github.com/genjobs/genjobs/internal/operation"
)

func motoConfig(t *testing.T) aws.Config {
	t.Helper()
	testenv.Endpoint(t, "AWS_ENDPOINT_URL_EVENTBRIDGE")
	testenv.Endpoint(t, "AWS_ENDPOINT_URL_SQS")
	var opts []func(*config.LoadOptions) error
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	}
	if os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
		opts = append(opts, config.WithRegion("us-east-1"))
	}
	cfg, err := config.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestEventBridgeSinkOnMoto(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := motoConfig(t)
	eb, q := eventbridge.NewFromConfig(cfg), sqs.NewFromConfig(cfg)
	name := fmt.Sprintf("genjobs-events-%d", time.Now().UnixNano())
	bus, err := eb.CreateEventBus(ctx, &eventbridge.CreateEventBusInput{Name: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = eb.DeleteEventBus(context.Background(), &eventbridge.DeleteEventBusInput{Name: aws.String(name)})
	})
	queue, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = q.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: queue.QueueUrl}) })
	attrs, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: queue.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eb.PutRule(ctx, &eventbridge.PutRuleInput{Name: aws.String("all"), EventBusName: aws.String(name),
		EventPattern: aws.String(`{"source":["` + notify.Source + `"]}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := eb.PutTargets(ctx, &eventbridge.PutTargetsInput{Rule: aws.String("all"), EventBusName: aws.String(name),
		Targets: []ebtypes.Target{{Id: aws.String("queue"), Arn: aws.String(attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)])}}}); err != nil {
		t.Fatal(err)
	}

	sink := notify.NewEventBridge(eb, aws.ToString(bus.EventBusArn))
	var events []notify.Event
	for i := range 12 { // more than one PutEvents holds
		events = append(events, notify.Event{DetailType: operation.EventFailed, Detail: client.EventDetail{
			EventID: fmt.Sprintf("op-%d:r3", i), OperationID: fmt.Sprintf("op-%d", i), Revision: 3,
			Phase: client.PhaseFailed, RemoteState: client.RemoteFailed, Settlement: client.SettlementSettled}})
	}
	if err := sink.Publish(ctx, events); err != nil {
		t.Fatal(err)
	}
	got := map[string]client.EventDetail{}
	for deadline := time.Now().Add(20 * time.Second); len(got) < len(events) && time.Now().Before(deadline); {
		out, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: queue.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			// What a target receives is what the client decodes.
			var env client.Event
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &env); err != nil {
				t.Fatalf("message %s: %v", aws.ToString(m.Body), err)
			}
			if env.Source != notify.Source || env.DetailType != operation.EventFailed {
				t.Fatalf("event source %q, detail type %q", env.Source, env.DetailType)
			}
			got[env.Detail.EventID] = env.Detail
		}
	}
	if len(got) != len(events) {
		t.Fatalf("%d of %d events arrived: %v", len(got), len(events), got)
	}
	if d := got["op-7:r3"]; d.OperationID != "op-7" || d.Settlement != client.SettlementSettled || d.RemoteState != client.RemoteFailed {
		t.Fatalf("detail %+v", d)
	}

	// A bus that does not exist: an error, whether the call or its entry
	// says so.
	missing := notify.NewEventBridge(eb, name+"-missing")
	if err := missing.Publish(ctx, events[:1]); err == nil || !strings.Contains(err.Error(), name+"-missing") {
		t.Fatalf("publish to a missing bus: %v, want an error naming it", err)
	}
}
