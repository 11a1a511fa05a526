package lambdatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/genacesim"
	"github.com/genjobs/genjobs/internal/invoke"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/queue"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/testenv"
)

// APIKey is the simulator's key in these tests. It is distinctive so a
// test can search the function's output for it: it must never appear.
const APIKey = "lambdatest-genace-key-must-never-be-logged"

// Visibility is the queues' visibility timeout and the functions'
// QUEUE_VISIBILITY_SECONDS.
const Visibility = 3 * time.Minute

// Stack is what a function talks to, stood up locally for one test: a
// fresh table in DynamoDB Local, fresh dispatch, observe and deliver
// queues in goaws, and the Genace simulator on a loopback port. Nothing
// is shared between tests, so they may run in parallel and a test's
// assertions see only its own writes and messages.
type Stack struct {
	// Table is the table's name (TABLE_NAME).
	Table string
	// Store is the operation store on the table, for arranging records and
	// reading what the function wrote.
	Store *store.Dynamo
	// Queue reads the queues.
	Queue *queue.SQS
	// QueueURLs maps each action to its queue's URL.
	QueueURLs map[message.Action]string
	// Sim is the Genace simulator, on the wall clock (the function runs in
	// another process, so time cannot be driven by hand).
	Sim *genacesim.Simulator
	// SimURL is the simulator's base URL (GENACE_BASE_URL).
	SimURL string
	// Genace is a client on the simulator, for creating jobs a test needs
	// to exist beforehand.
	Genace *genace.Client

	dynamoEndpoint, sqsEndpoint string
	accessKey, secretKey        string
}

// NewStack stands up the stack; sim configures the simulator (its APIKey
// is replaced by APIKey). The endpoints come from AWS_ENDPOINT_URL_DYNAMODB
// and AWS_ENDPOINT_URL_SQS, set by .ci/dynamodb-local.sh and .ci/goaws.sh;
// without them the test skips (fails under GENJOBS_REQUIRE_INTEGRATION=1).
// Everything is removed on t.Cleanup.
func NewStack(t testing.TB, sim genacesim.Config) *Stack {
	t.Helper()
	s := &Stack{
		dynamoEndpoint: testenv.Endpoint(t, "AWS_ENDPOINT_URL_DYNAMODB"),
		sqsEndpoint:    testenv.Endpoint(t, "AWS_ENDPOINT_URL_SQS"),
		accessKey:      envOr("AWS_ACCESS_KEY_ID", "local"),
		secretKey:      envOr("AWS_SECRET_ACCESS_KEY", "local"),
	}
	ctx := context.Background()
	// The test's own clients get the same region and credentials as the
	// function, whatever the shell exported.
	opts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRegion(envOr("AWS_REGION", DefaultRegion)),
		awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(s.accessKey, s.secretKey, "")),
	}
	suffix := randomSuffix(t)

	ddb, err := store.NewDynamoClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	s.Table = "genjobs-rie-" + suffix
	if err := store.EnsureTable(ctx, ddb, s.Table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = ddb.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(s.Table)})
	})
	s.Store = store.NewDynamo(ddb, s.Table)

	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	sqsClient := sqs.NewFromConfig(awsCfg)
	s.Queue = queue.NewSQS(sqsClient)
	s.QueueURLs = map[message.Action]string{}
	for action, kind := range map[message.Action]string{
		message.SubmitGeneration: "dispatch", message.ObserveGeneration: "observe", message.DeliverArtifacts: "deliver",
	} {
		out, err := sqsClient.CreateQueue(ctx, &sqs.CreateQueueInput{
			QueueName:  aws.String("genjobs-rie-" + suffix + "-" + kind),
			Attributes: map[string]string{"VisibilityTimeout": strconv.Itoa(int(Visibility / time.Second))},
		})
		if err != nil {
			t.Fatalf("create %s queue: %v", kind, err)
		}
		url := aws.ToString(out.QueueUrl)
		s.QueueURLs[action] = url
		t.Cleanup(func() {
			_, _ = sqsClient.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)})
		})
	}

	sim.APIKey = APIKey
	s.Sim = genacesim.New(sim, clock.Real{})
	base, stop, err := s.Sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	s.SimURL = base
	s.Genace, err = genace.New(base, APIKey, &http.Client{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Env is the function's environment for this stack: what template.yaml
// sets (with the API key given directly, as for local runs, instead of a
// Secrets Manager id) plus the SDK's endpoint variables, which point the
// function's unchanged clients at the local services.
func (s *Stack) Env() map[string]string {
	return map[string]string{
		config.EnvTable:             s.Table,
		config.EnvGenaceURL:         s.SimURL,
		config.EnvGenaceKey:         APIKey,
		config.EnvDispatchQueueURL:  s.QueueURLs[message.SubmitGeneration],
		config.EnvObserveQueueURL:   s.QueueURLs[message.ObserveGeneration],
		config.EnvDeliverQueueURL:   s.QueueURLs[message.DeliverArtifacts],
		config.EnvVisibility:        strconv.Itoa(int(Visibility / time.Second)),
		"AWS_LAMBDA_LOG_FORMAT":     "JSON",
		"AWS_ENDPOINT_URL_DYNAMODB": s.dynamoEndpoint,
		"AWS_ENDPOINT_URL_SQS":      s.sqsEndpoint,
		"AWS_ACCESS_KEY_ID":         s.accessKey,
		"AWS_SECRET_ACCESS_KEY":     s.secretKey,
	}
}

// Messages returns the envelopes waiting on action's queue: it long-polls
// up to wait for the first, then reads on until a one-second poll comes
// back empty, so a test can assert that exactly the expected messages
// were sent. Messages stay hidden for Visibility afterwards (nothing is
// deleted). An undecodable body fails the test: only envelopes may reach
// a queue.
func (s *Stack) Messages(t testing.TB, action message.Action, wait time.Duration) []message.Envelope {
	t.Helper()
	ctx := context.Background()
	var out []message.Envelope
	for {
		msgs, err := s.Queue.Receive(ctx, s.QueueURLs[action], queue.MaxReceive, wait, Visibility)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			return out
		}
		for _, m := range msgs {
			env, err := message.Decode(m.Body)
			if err != nil {
				t.Fatalf("%s queue: message %s: %v (body %s)", action, m.ID, err, m.Body)
			}
			out = append(out, env)
		}
		wait = time.Second
	}
}

// Received returns event (a sample SQS event) with each record passed
// through its queue of this stack, as the event source mapping hands
// records over: with a receipt handle goaws issued, which a function can
// renew (submit does before every POST; the samples' handles are made up,
// as `sam local invoke` ones are). The records stay in flight; the
// function's answer decides nothing about them here.
func (s *Stack) Received(t testing.TB, event []byte) []byte {
	t.Helper()
	out, _, err := invoke.PassThrough(context.Background(), s.Queue, event, func(arn string) (string, bool) {
		for action, kind := range map[message.Action]string{
			message.SubmitGeneration: "dispatch", message.ObserveGeneration: "observe", message.DeliverArtifacts: "deliver",
		} {
			if strings.HasSuffix(arn, "-"+kind) {
				return s.QueueURLs[action], true
			}
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// randomSuffix names one test's table and queues.
func randomSuffix(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
