package invoke

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/genacesim"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/store"
)

// APIKey is the simulator's API key (GENACE_API_KEY). It guards nothing:
// the simulator listens on loopback for one invocation.
const APIKey = "genjobs-invoke-local-key"

// Bucket is the artifact bucket (ARTIFACT_BUCKET) in the in-process S3.
const Bucket = "genjobs-artifacts-local"

// Endpoints are the local AWS services and the credentials for them.
type Endpoints struct {
	// DynamoDB and SQS are AWS_ENDPOINT_URL_DYNAMODB (DynamoDB Local) and
	// AWS_ENDPOINT_URL_SQS (goaws). Both must be loopback URLs.
	DynamoDB, SQS string
	// Region, AccessKey and SecretKey are used by this process's clients
	// and handed to the function.
	Region, AccessKey, SecretKey string
}

// Check reports a missing or non-local endpoint: invoke creates tables
// and queues, and must never do so in a real account.
func (e Endpoints) Check() error {
	for _, v := range []struct{ name, value string }{
		{"AWS_ENDPOINT_URL_DYNAMODB", e.DynamoDB}, {"AWS_ENDPOINT_URL_SQS", e.SQS},
	} {
		if v.value == "" {
			return fmt.Errorf("%s is not set: run `make invoke FN=... EVENT=...`, which starts DynamoDB Local and goaws and sets both endpoints", v.name)
		}
		u, err := url.Parse(v.value)
		if err != nil || u.Host == "" {
			return fmt.Errorf("%s=%q is not a URL", v.name, v.value)
		}
		if !loopback(u.Hostname()) {
			return fmt.Errorf("%s=%s is not on this machine; invoke only runs against DynamoDB Local and goaws on loopback (make invoke starts them)", v.name, v.value)
		}
	}
	return nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Queue is one queue of the stack.
type Queue struct {
	// Kind is the queue's role: dispatch, observe, deliver, or one of
	// those with "-dlq".
	Kind string `json:"kind"`
	// Name, URL and ARN are goaws's.
	Name string `json:"name"`
	URL  string `json:"url"`
	ARN  string `json:"arn"`
}

// queueKinds are the template's queues: each main queue with its
// visibility timeout (6 x its consumer's timeout) and its DLQ.
var queueKinds = []struct {
	kind       string
	action     message.Action
	visibility int
}{
	{"dispatch", message.SubmitGeneration, 360},
	{"observe", message.ObserveGeneration, 360},
	{"deliver", message.DeliverArtifacts, 720},
}

// dlqVisibility is the DLQs' visibility timeout (6 x triage's 30 s).
const dlqVisibility = 180

// maxReceiveCount is the redrive policy's: 5 receives, then the DLQ.
const maxReceiveCount = 5

// Stack is what one invocation talks to, stood up for it alone: a fresh
// table in DynamoDB Local, the template's queues (with their DLQs) in
// goaws, the Genace simulator and an S3 (gofakes3) on loopback ports of
// this process. Nothing is shared, so invocations may run at once.
type Stack struct {
	// Table is the table's name (TABLE_NAME).
	Table string
	// Store is the operation store on the table.
	Store *store.Dynamo
	// Queues are the main queues then the DLQs.
	Queues []Queue
	// Sim is the Genace simulator, on the wall clock.
	Sim *genacesim.Simulator
	// SimURL is its base URL (GENACE_BASE_URL).
	SimURL string
	// Genace is a client on the simulator, for seeding jobs.
	Genace *genace.Client
	// S3URL is the in-process S3's endpoint (AWS_ENDPOINT_URL_S3).
	S3URL string

	endpoints Endpoints
	ddb       *dynamodb.Client
	sqs       *sqs.Client
	s3        *s3.Client
	cleanup   []func(context.Context)
}

// NewStack stands up the stack. On error, whatever was started is removed.
func NewStack(ctx context.Context, ep Endpoints) (_ *Stack, err error) {
	if err := ep.Check(); err != nil {
		return nil, err
	}
	st := &Stack{endpoints: ep}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	suffix, err := randomSuffix()
	if err != nil {
		return nil, err
	}
	creds := credentials.NewStaticCredentialsProvider(ep.AccessKey, ep.SecretKey, "")
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(ep.Region), awsconfig.WithCredentialsProvider(creds)}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("aws config: %w", err)
	}

	// The endpoints are given explicitly: this process's environment may
	// lack them (the integration test passes them in).
	st.ddb = dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(ep.DynamoDB)
		o.DisableValidateResponseChecksum = true // DynamoDB Local omits x-amz-crc32 on errors
	})
	st.Table = "genjobs-invoke-" + suffix
	if err := store.EnsureTable(ctx, st.ddb, st.Table); err != nil {
		return nil, fmt.Errorf("DynamoDB Local at %s: %w", ep.DynamoDB, err)
	}
	st.cleanup = append(st.cleanup, func(ctx context.Context) {
		_, _ = st.ddb.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(st.Table)})
	})
	st.Store = store.NewDynamo(st.ddb, st.Table)

	st.sqs = sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(ep.SQS) })
	if err := st.createQueues(ctx, "genjobs-invoke-"+suffix); err != nil {
		return nil, fmt.Errorf("goaws at %s: %w", ep.SQS, err)
	}

	st.Sim = genacesim.New(genacesim.Config{
		APIKey:       APIKey,
		DefaultModel: genacesim.ModelConfig{Price: samplePrice, QueueFor: 0, RunFor: 0, OutputCount: sampleOutputs},
	}, clock.Real{})
	base, stop, err := st.Sim.Start("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	st.cleanup = append(st.cleanup, func(context.Context) { stop() })
	st.SimURL = base
	if st.Genace, err = genace.New(base, APIKey, &http.Client{}); err != nil {
		return nil, err
	}

	if err := st.startS3(cfg); err != nil {
		return nil, err
	}
	return st, nil
}

// createQueues creates each DLQ, then its main queue redriving to it.
func (st *Stack) createQueues(ctx context.Context, prefix string) error {
	var mains, dlqs []Queue
	for _, k := range queueKinds {
		dlq, err := st.createQueue(ctx, k.kind+"-dlq", prefix+"-"+k.kind+"-dlq", map[string]string{
			"VisibilityTimeout": strconv.Itoa(dlqVisibility),
		})
		if err != nil {
			return err
		}
		dlqs = append(dlqs, dlq)
		redrive, _ := json.Marshal(map[string]string{"deadLetterTargetArn": dlq.ARN, "maxReceiveCount": strconv.Itoa(maxReceiveCount)})
		main, err := st.createQueue(ctx, k.kind, prefix+"-"+k.kind, map[string]string{
			"VisibilityTimeout": strconv.Itoa(k.visibility),
			"RedrivePolicy":     string(redrive),
		})
		if err != nil {
			return err
		}
		mains = append(mains, main)
	}
	st.Queues = append(mains, dlqs...)
	return nil
}

func (st *Stack) createQueue(ctx context.Context, kind, name string, attrs map[string]string) (Queue, error) {
	out, err := st.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		return Queue{}, fmt.Errorf("create queue %s: %w", name, err)
	}
	q := Queue{Kind: kind, Name: name, URL: aws.ToString(out.QueueUrl)}
	st.cleanup = append(st.cleanup, func(ctx context.Context) {
		_, _ = st.sqs.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(q.URL)})
	})
	a, err := st.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(q.URL), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return Queue{}, fmt.Errorf("queue %s: read its ARN: %w", name, err)
	}
	q.ARN = a.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	if q.ARN == "" {
		return Queue{}, fmt.Errorf("queue %s: goaws reported no ARN", name)
	}
	return q, nil
}

// startS3 serves gofakes3 on a loopback port with Bucket created. An IP
// endpoint makes the SDK address buckets path-style by itself, so the
// function's default client needs nothing but AWS_ENDPOINT_URL_S3.
func (st *Stack) startS3(cfg aws.Config) error {
	backend := s3mem.New()
	if err := backend.CreateBucket(Bucket); err != nil {
		return fmt.Errorf("s3: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("s3: %w", err)
	}
	srv := &http.Server{Handler: gofakes3.New(backend).Server(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	st.cleanup = append(st.cleanup, func(context.Context) { _ = srv.Close() })
	st.S3URL = "http://" + ln.Addr().String()
	st.s3 = s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(st.S3URL)
		o.UsePathStyle = true
	})
	return nil
}

// Close removes the table and queues and stops the simulator and S3, in
// reverse order of creation. It is safe to call more than once.
func (st *Stack) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := len(st.cleanup) - 1; i >= 0; i-- {
		st.cleanup[i](ctx)
	}
	st.cleanup = nil
}

// QueueOf returns the queue of a kind.
func (st *Stack) QueueOf(kind string) Queue {
	for _, q := range st.Queues {
		if q.Kind == kind {
			return q
		}
	}
	return Queue{}
}

// queueFor maps a record's eventSourceARN to the stack's queue of the same
// kind (a sample's genjobs-dispatch to this stack's ...-dispatch).
func (st *Stack) queueFor(arn string) (string, bool) {
	name := arn[strings.LastIndexByte(arn, ':')+1:]
	for _, q := range st.Queues {
		if strings.HasSuffix(name, "-"+q.Kind) {
			return q.URL, true
		}
	}
	return "", false
}

// QueuedMessage is a message waiting on a queue.
type QueuedMessage struct {
	// Body is the message body as sent.
	Body string `json:"body"`
	// Envelope is the body decoded, when it is one.
	Envelope *message.Envelope `json:"envelope,omitempty"`
}

// QueueContents is what a queue holds.
type QueueContents struct {
	Queue
	// Count is ApproximateNumberOfMessages (goaws counts delayed and
	// in-flight messages too).
	Count int `json:"count"`
	// Messages are those receivable now; delayed ones are only counted.
	Messages []QueuedMessage `json:"messages"`
}

// Peek reads every queue without consuming: it receives what is visible,
// then makes it visible again at once (ChangeMessageVisibility 0).
func (st *Stack) Peek(ctx context.Context) ([]QueueContents, error) {
	out := make([]QueueContents, 0, len(st.Queues))
	for _, q := range st.Queues {
		qc := QueueContents{Queue: q, Messages: []QueuedMessage{}}
		a, err := st.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(q.URL), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages},
		})
		if err != nil {
			return nil, fmt.Errorf("queue %s: %w", q.Name, err)
		}
		qc.Count, _ = strconv.Atoi(a.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
		var handles []string
		for range 10 { // at most 100 messages: more is not a sample
			r, err := st.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
				QueueUrl: aws.String(q.URL), MaxNumberOfMessages: 10, VisibilityTimeout: 30,
			})
			if err != nil {
				return nil, fmt.Errorf("queue %s: %w", q.Name, err)
			}
			if len(r.Messages) == 0 {
				break
			}
			for _, m := range r.Messages {
				qm := QueuedMessage{Body: aws.ToString(m.Body)}
				if env, err := message.Decode([]byte(qm.Body)); err == nil {
					qm.Envelope = &env
				}
				qc.Messages = append(qc.Messages, qm)
				handles = append(handles, aws.ToString(m.ReceiptHandle))
			}
		}
		var errs []error
		for _, h := range handles {
			_, err := st.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(q.URL), ReceiptHandle: aws.String(h), VisibilityTimeout: 0,
			})
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("queue %s: put messages back: %w", q.Name, err)
		}
		if qc.Count < len(qc.Messages) {
			qc.Count = len(qc.Messages)
		}
		out = append(out, qc)
	}
	return out, nil
}

// Object is one object in the artifact bucket.
type Object struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
}

// Artifacts lists the artifact bucket, by key.
func (st *Stack) Artifacts(ctx context.Context) ([]Object, error) {
	var out []Object
	p := s3.NewListObjectsV2Paginator(st.s3, &s3.ListObjectsV2Input{Bucket: aws.String(Bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("s3: list %s: %w", Bucket, err)
		}
		for _, o := range page.Contents {
			out = append(out, Object{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func randomSuffix() (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
