package invoke

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/samlocal"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/queue"
	"github.com/genjobs/genjobs/internal/store/dynamo"
)

// APIKey is the simulator's API key, which the functions read from their
// secret in moto. It guards nothing: the simulator listens on loopback.
const APIKey = "genjobs-invoke-local-key"

// Endpoints are the local AWS services and the credentials for them.
type Endpoints struct {
	// DynamoDB is AWS_ENDPOINT_URL_DYNAMODB (DynamoDB Local); SQS, S3 and
	// SecretsManager are AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL_S3 and
	// AWS_ENDPOINT_URL_SECRETS_MANAGER (moto). All must be loopback URLs.
	DynamoDB, SQS, S3, SecretsManager string
	// EventBridge is AWS_ENDPOINT_URL_EVENTBRIDGE and Lambda
	// AWS_ENDPOINT_URL_LAMBDA (moto), SQS's when unset: moto serves every
	// service on one port. IAM is AWS_ENDPOINT_URL_IAM (moto; Lambda's when
	// unset), where the role of the functions standing in for the event
	// source mappings' targets is made: no function reaches it.
	EventBridge, Lambda, IAM string
	// Region, AccessKey and SecretKey are used by this process's clients
	// and handed to the function.
	Region, AccessKey, SecretKey string
}

// EndpointsFromEnv reads the endpoints from the SDK's standard variables
// (AWS_ENDPOINT_URL_DYNAMODB, _SQS, _S3, _SECRETS_MANAGER, AWS_REGION or
// AWS_DEFAULT_REGION, the access keys; _EVENTBRIDGE, _LAMBDA and _IAM
// default to SQS's), with a local region and dummy
// credentials where they are unset. Check them before use.
func EndpointsFromEnv() Endpoints {
	return Endpoints{
		DynamoDB:       os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"),
		SQS:            os.Getenv("AWS_ENDPOINT_URL_SQS"),
		S3:             os.Getenv("AWS_ENDPOINT_URL_S3"),
		SecretsManager: os.Getenv("AWS_ENDPOINT_URL_SECRETS_MANAGER"),
		EventBridge:    cmp.Or(os.Getenv("AWS_ENDPOINT_URL_EVENTBRIDGE"), os.Getenv("AWS_ENDPOINT_URL_SQS")),
		Lambda:         cmp.Or(os.Getenv("AWS_ENDPOINT_URL_LAMBDA"), os.Getenv("AWS_ENDPOINT_URL_SQS")),
		IAM:            cmp.Or(os.Getenv("AWS_ENDPOINT_URL_IAM"), os.Getenv("AWS_ENDPOINT_URL_LAMBDA"), os.Getenv("AWS_ENDPOINT_URL_SQS")),
		Region:         cmp.Or(os.Getenv("AWS_REGION"), os.Getenv("AWS_DEFAULT_REGION"), "us-east-1"),
		AccessKey:      cmp.Or(os.Getenv("AWS_ACCESS_KEY_ID"), "local"),
		SecretKey:      cmp.Or(os.Getenv("AWS_SECRET_ACCESS_KEY"), "local"),
	}
}

// Check reports a missing or non-local endpoint: invoke creates tables
// queues, buckets, secrets, buses, roles, functions and event source
// mappings, and must never do so in a real account.
func (e Endpoints) Check() error {
	for _, v := range []struct{ name, value string }{
		{"AWS_ENDPOINT_URL_DYNAMODB", e.DynamoDB}, {"AWS_ENDPOINT_URL_SQS", e.SQS},
		{"AWS_ENDPOINT_URL_S3", e.S3}, {"AWS_ENDPOINT_URL_SECRETS_MANAGER", e.SecretsManager},
		// Never empty once SQS is set: they default to it.
		{"AWS_ENDPOINT_URL_EVENTBRIDGE", e.eventBridge()}, {"AWS_ENDPOINT_URL_LAMBDA", e.lambda()}, {"AWS_ENDPOINT_URL_IAM", e.iam()},
	} {
		if v.value == "" {
			return fmt.Errorf("%s is not set: run `make invoke FN=... EVENT=...`, which starts DynamoDB Local and moto and sets the endpoints", v.name)
		}
		u, err := url.Parse(v.value)
		if err != nil || u.Host == "" {
			return fmt.Errorf("%s=%q is not a URL", v.name, v.value)
		}
		if ip := net.ParseIP(u.Hostname()); u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("%s=%s is not on this machine; invoke only runs against DynamoDB Local and moto on loopback (make invoke starts them)", v.name, v.value)
		}
	}
	return nil
}

// Queue is one queue of the stack.
type Queue struct {
	// Kind is the queue's role, from its logical id (samlocal.Slug):
	// dispatch, observe, deliver, or one of those with "-dlq".
	Kind      string `json:"kind"`
	LogicalID string `json:"logical_id"` // the template's resource
	// Name, URL and ARN are moto's.
	Name string `json:"name"`
	URL  string `json:"url"`
	ARN  string `json:"arn"`
}

// LoadTemplate reads the module's template.
func LoadTemplate(root string) (*samlocal.Template, error) {
	return samlocal.Load(filepath.Join(root, samlocal.TemplateFile))
}

// motoAccount is the account id in moto's queue URLs and ARNs: its
// default, which .ci/moto.sh keeps (it sets no MOTO_ACCOUNT_ID).
const motoAccount = "123456789012"

// StackConfig says what to stand up.
type StackConfig struct {
	Template  *samlocal.Template // whose resources the stack holds
	Endpoints Endpoints          // DynamoDB Local's and moto's
	// Sim configures the Genace simulator (its APIKey is replaced by
	// APIKey); nil: the samples' (every job done at once, one output).
	Sim *genacesim.Config
	// APIKey is the simulator's key, and the value of every secret the
	// template gives the functions; empty: the package's APIKey.
	APIKey string
	// Prefix names the stack and starts every resource's name; empty:
	// Stem (empty: genjobs-invoke), a dash and a random suffix.
	Prefix, Stem string
}

// Stack is what the functions talk to, stood up for one run: the
// template's table in DynamoDB Local, its queues, buckets, secrets and the
// event source mappings the functions are given in moto, and the Genace
// simulator. Every name starts with the stack's
// prefix, so stacks may run at once on the same services.
type Stack struct {
	Template *samlocal.Template   // the template the stack was made from
	Locals   samlocal.Locals      // the template's references resolved on this stack
	Prefix   string               // starts every resource's name
	Table    string               // the operations table (TABLE_NAME)
	Store    *dynamo.Store        // the operation store on the table
	Queues   []Queue              // the template's queues, in its order
	Sim      *genacesim.Simulator // the Genace simulator, on the wall clock
	SimURL   string               // its base URL (GENACE_BASE_URL)
	Genace   *genace.Client       // a client on the simulator, for seeding jobs
	Buckets  []string             // the template's buckets in S3 (moto)
	APIKey   string               // the simulator's key and every secret's value
	Queue    *queue.SQS           // a client on the stack's SQS (moto's)

	endpoints   Endpoints
	unavailable *samlocal.Unavailable
	ddb         *dynamodb.Client
	sqs         *sqs.Client
	s3          *s3.Client
	secrets     *secretsmanager.Client
	cleanup     []func(context.Context)
}

// NewStack stands up the stack. On error, whatever was started is removed.
func NewStack(ctx context.Context, cfg StackConfig) (_ *Stack, err error) {
	ep := cfg.Endpoints
	if err := ep.Check(); err != nil {
		return nil, err
	}
	t := cfg.Template
	if t == nil {
		return nil, errors.New("no template")
	}
	st := &Stack{Template: t, endpoints: ep, Prefix: cfg.Prefix, APIKey: cfg.APIKey}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	if st.Prefix == "" {
		var b [4]byte
		_, _ = rand.Read(b[:]) // it never fails
		st.Prefix = cmp.Or(cfg.Stem, "genjobs-invoke") + "-" + hex.EncodeToString(b[:])
	}
	st.APIKey = cmp.Or(st.APIKey, APIKey)
	site := samlocal.Site{Region: ep.Region, AccountID: motoAccount, Prefix: st.Prefix, SQS: ep.SQS}
	st.Locals = t.Names(site)
	creds := credentials.NewStaticCredentialsProvider(ep.AccessKey, ep.SecretKey, "")
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(ep.Region), awsconfig.WithCredentialsProvider(creds)}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("aws config: %w", err)
	}

	// Explicit endpoints: this process's environment may lack them.
	st.ddb = dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(ep.DynamoDB)
		o.DisableValidateResponseChecksum = true // DynamoDB Local omits x-amz-crc32 on errors
	})
	if err := st.createTable(ctx); err != nil {
		return nil, err
	}
	st.sqs = sqs.NewFromConfig(awsCfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(ep.SQS) })
	st.Queue = queue.NewSQS(st.sqs)
	if err := st.createQueues(ctx); err != nil {
		return nil, fmt.Errorf("SQS at %s: %w", ep.SQS, err)
	}

	sim := genacesim.Config{DefaultModel: genacesim.ModelConfig{Price: samplePrice, QueueFor: 0, RunFor: 0, OutputCount: sampleOutputs}}
	if cfg.Sim != nil {
		sim = *cfg.Sim
	}
	sim.APIKey = st.APIKey
	st.Sim = genacesim.New(sim, clock.Real{})
	base, stop, err := st.Sim.Start("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	st.cleanup = append(st.cleanup, func(context.Context) { stop() })
	st.SimURL = base
	if st.Genace, err = genace.New(base, st.APIKey, &http.Client{}); err != nil {
		return nil, err
	}

	if err := st.createBuckets(ctx, awsCfg); err != nil {
		return nil, err
	}
	if err := st.createBuses(ctx, awsCfg); err != nil {
		return nil, err
	}
	if st.unavailable, err = samlocal.StartUnavailable("127.0.0.1"); err != nil {
		return nil, err
	}
	st.cleanup = append(st.cleanup, func(context.Context) { _ = st.unavailable.Close() })
	st.secrets = secretsmanager.NewFromConfig(awsCfg, func(o *secretsmanager.Options) { o.BaseEndpoint = aws.String(ep.SecretsManager) })
	// Registered before Wire runs, so a half-wired stack leaves no secret
	// or mapping behind.
	st.cleanup = append(st.cleanup, st.deleteSecrets)
	mappings := &samlocal.Mappings{
		Lambda: lambda.NewFromConfig(awsCfg, func(o *lambda.Options) { o.BaseEndpoint = aws.String(ep.lambda()) }),
		IAM:    iam.NewFromConfig(awsCfg, func(o *iam.Options) { o.BaseEndpoint = aws.String(ep.iam()) }),
		Role:   site.Name("MappingTargetRole", "AWS::IAM::Role"),
	}
	st.cleanup = append(st.cleanup, mappings.Remove)
	err = t.Wire(ctx, st.Locals, site, samlocal.Wiring{
		GenaceURL: st.SimURL, APIKey: st.APIKey, Secrets: &samlocal.Secrets{Client: st.secrets}, Mappings: mappings,
		Endpoints: map[string]string{
			"AWS_ENDPOINT_URL_DYNAMODB":        ep.DynamoDB,
			"AWS_ENDPOINT_URL_SQS":             ep.SQS,
			"AWS_ENDPOINT_URL_S3":              ep.S3,
			"AWS_ENDPOINT_URL_SECRETS_MANAGER": ep.SecretsManager,
			"AWS_ENDPOINT_URL_SCHEDULER":       st.unavailable.URL(),
			"AWS_ENDPOINT_URL_EVENTBRIDGE":     st.eventBridge(),
			"AWS_ENDPOINT_URL_LAMBDA":          ep.lambda(),
		},
		Parameters: localParameters(t),
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", samlocal.TemplateFile, err)
	}
	return st, nil
}

// localParameters are the parameter values local runs change on purpose:
// the observe function's long poll. Genace holds a long poll for its whole
// wait unless the job changes state, and a finished job never does: 1 s
// instead of 25 keeps an invocation short without changing what the
// function decides.
func localParameters(t *samlocal.Template) map[string]string {
	out := map[string]string{}
	for _, p := range t.ParametersOf(config.EnvPolicies) {
		out[p] = ObservePolicies
	}
	return out
}

// ObservePolicies is OBSERVE_POLICIES on a local stack: the defaults with
// a 1 s long poll.
const ObservePolicies = `{"default":{"long_poll":"1s"}}`

// createTable creates the template's one table, with the store's
// definition (internal/dev/templatecheck checks the two are the same).
func (st *Stack) createTable(ctx context.Context) error {
	tables := st.Template.OfType("AWS::DynamoDB::Table")
	if len(tables) != 1 {
		return fmt.Errorf("%s has %d DynamoDB tables; the store uses exactly one", samlocal.TemplateFile, len(tables))
	}
	st.Table = st.Locals.Resources[tables[0]]["Ref"]
	if err := dynamo.EnsureTable(ctx, st.ddb, st.Table); err != nil {
		return fmt.Errorf("DynamoDB Local at %s: %w", st.endpoints.DynamoDB, err)
	}
	st.cleanup = append(st.cleanup, func(ctx context.Context) {
		_, _ = st.ddb.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(st.Table)})
	})
	st.Store = dynamo.New(st.ddb, st.Table)
	return nil
}

// createQueues creates the template's queues with their visibility
// timeouts and redrive policies: those without a redrive policy (the
// DLQs) first, so the others can name them.
func (st *Stack) createQueues(ctx context.Context) error {
	ids := st.Template.OfType("AWS::SQS::Queue")
	created := map[string]Queue{}
	for _, pass := range []bool{false, true} {
		for _, id := range ids {
			props := st.Template.Resources[id].Properties
			redrive, hasRedrive := props["RedrivePolicy"].(map[string]any)
			if hasRedrive != pass {
				continue
			}
			attrs := map[string]string{}
			if v, ok := props["VisibilityTimeout"]; ok {
				s, err := st.Template.Resolve(v, st.Locals)
				if err != nil {
					return fmt.Errorf("%s VisibilityTimeout: %w", id, err)
				}
				attrs["VisibilityTimeout"] = s
			}
			if hasRedrive {
				dlq, err := st.Template.Resolve(redrive["deadLetterTargetArn"], st.Locals)
				if err != nil {
					return fmt.Errorf("%s RedrivePolicy: %w", id, err)
				}
				receives, err := st.Template.Resolve(redrive["maxReceiveCount"], st.Locals)
				if err != nil {
					return fmt.Errorf("%s RedrivePolicy: %w", id, err)
				}
				b, _ := json.Marshal(map[string]string{"deadLetterTargetArn": dlq, "maxReceiveCount": receives})
				attrs["RedrivePolicy"] = string(b)
			}
			q, err := st.createQueue(ctx, id, attrs)
			if err != nil {
				return err
			}
			created[id] = q
		}
	}
	for _, id := range st.Template.Order {
		if q, ok := created[id]; ok {
			st.Queues = append(st.Queues, q)
		}
	}
	return nil
}

// createQueue creates one queue under its local name, and keeps moto's
// URL and ARN as the queue's local values.
func (st *Stack) createQueue(ctx context.Context, id string, attrs map[string]string) (Queue, error) {
	local := st.Locals.Resources[id]
	name := local["QueueName"]
	out, err := st.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		return Queue{}, fmt.Errorf("create queue %s: %w", name, err)
	}
	q := Queue{Kind: samlocal.Slug(id, "AWS::SQS::Queue"), LogicalID: id, Name: name, URL: aws.ToString(out.QueueUrl)}
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
		return Queue{}, fmt.Errorf("queue %s: SQS reported no ARN", name)
	}
	local["Ref"], local["QueueUrl"], local["Arn"] = q.URL, q.URL, q.ARN
	return q, nil
}

// createBuckets creates the template's buckets in S3 (moto's). An IP
// endpoint makes the SDK address buckets path-style by itself, so the
// function's default client needs nothing but AWS_ENDPOINT_URL_S3.
func (st *Stack) createBuckets(ctx context.Context, cfg aws.Config) error {
	st.s3 = s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(st.endpoints.S3)
		o.UsePathStyle = true
	})
	for _, id := range st.Template.OfType("AWS::S3::Bucket") {
		name := st.Locals.Resources[id]["Ref"]
		in := &s3.CreateBucketInput{Bucket: aws.String(name)}
		if st.endpoints.Region != "us-east-1" { // the one region S3 refuses a location constraint for
			in.CreateBucketConfiguration = &s3types.CreateBucketConfiguration{LocationConstraint: s3types.BucketLocationConstraint(st.endpoints.Region)}
		}
		if _, err := st.s3.CreateBucket(ctx, in); err != nil {
			return fmt.Errorf("S3 at %s: create bucket %s: %w", st.endpoints.S3, name, err)
		}
		st.Buckets = append(st.Buckets, name)
		st.cleanup = append(st.cleanup, func(ctx context.Context) { st.deleteBucket(ctx, name) })
	}
	return nil
}

// eventBridge is the EventBridge endpoint: moto's.
func (st *Stack) eventBridge() string { return st.endpoints.eventBridge() }

// eventBridge, lambda and iam are the endpoints with their defaults.
func (e Endpoints) eventBridge() string { return cmp.Or(e.EventBridge, e.SQS) }
func (e Endpoints) lambda() string      { return cmp.Or(e.Lambda, e.SQS) }
func (e Endpoints) iam() string         { return cmp.Or(e.IAM, e.lambda()) }

// createBuses creates the template's event buses in moto, so the
// functions' completion events land there.
func (st *Stack) createBuses(ctx context.Context, cfg aws.Config) error {
	eb := eventbridge.NewFromConfig(cfg, func(o *eventbridge.Options) { o.BaseEndpoint = aws.String(st.eventBridge()) })
	for _, id := range st.Template.OfType("AWS::Events::EventBus") {
		name := st.Locals.Resources[id]["Name"]
		if _, err := eb.CreateEventBus(ctx, &eventbridge.CreateEventBusInput{Name: aws.String(name)}); err != nil {
			return fmt.Errorf("EventBridge at %s: create bus %s: %w", st.eventBridge(), name, err)
		}
		st.cleanup = append(st.cleanup, func(ctx context.Context) {
			_, _ = eb.DeleteEventBus(ctx, &eventbridge.DeleteEventBusInput{Name: aws.String(name)})
		})
	}
	return nil
}

// deleteBucket empties a bucket and deletes it, as far as it can.
func (st *Stack) deleteBucket(ctx context.Context, name string) {
	objects, _ := st.list(ctx, name)
	for _, o := range objects {
		_, _ = st.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(name), Key: aws.String(o.Key)})
	}
	_, _ = st.s3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(name)})
}

// list lists a bucket's objects; on an error, those listed before it.
func (st *Stack) list(ctx context.Context, bucket string) ([]Object, error) {
	var out []Object
	p := s3.NewListObjectsV2Paginator(st.s3, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return out, fmt.Errorf("s3: list %s: %w", bucket, err)
		}
		for _, o := range page.Contents {
			out = append(out, Object{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size)})
		}
	}
	return out, nil
}

// deleteSecrets deletes the secrets Wire created (their ARNs are in
// Locals), without a recovery window.
func (st *Stack) deleteSecrets(ctx context.Context) {
	var arns []string
	for _, id := range st.Template.OfType("AWS::SecretsManager::Secret") {
		arns = append(arns, st.Locals.Resources[id]["Ref"])
	}
	for _, p := range st.Template.ParametersOf(config.EnvGenaceKeySecret) {
		arns = append(arns, st.Locals.Parameters[p])
	}
	for _, arn := range arns {
		if arn != "" {
			_, _ = st.secrets.DeleteSecret(ctx, &secretsmanager.DeleteSecretInput{SecretId: aws.String(arn), ForceDeleteWithoutRecovery: aws.Bool(true)})
		}
	}
}

// Close removes the table, queues, buckets, secrets and mappings and stops the
// simulator, in reverse order of creation. It is safe to call more than once.
func (st *Stack) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := len(st.cleanup) - 1; i >= 0; i-- {
		st.cleanup[i](ctx)
	}
	st.cleanup = nil
}

// QueueFor maps a record's eventSourceARN to the stack's queue of the same
// kind (a sample's genjobs-dispatch to this stack's ...-dispatch).
func (st *Stack) QueueFor(arn string) (string, bool) {
	i := slices.IndexFunc(st.Queues, func(q Queue) bool { return ofKind(arn, q.Kind) })
	if i < 0 {
		return "", false
	}
	return st.Queues[i].URL, true
}

// ofKind reports whether the queue an ARN names is of the kind.
func ofKind(arn, kind string) bool {
	return strings.HasSuffix(arn[strings.LastIndexByte(arn, ':')+1:], "-"+kind)
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
	// Count is ApproximateNumberOfMessages: the messages available now,
	// not the delayed or in-flight ones.
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
			msgs, err := st.Queue.Receive(ctx, q.URL, queue.MaxReceive, 0, 30*time.Second)
			if err != nil {
				return nil, err
			}
			if len(msgs) == 0 {
				break
			}
			for _, m := range msgs {
				qm := QueuedMessage{Body: string(m.Body)}
				if env, err := message.Decode(m.Body); err == nil {
					qm.Envelope = &env
				}
				qc.Messages = append(qc.Messages, qm)
				handles = append(handles, m.ReceiptHandle)
			}
		}
		var errs []error
		for _, h := range handles {
			errs = append(errs, st.Queue.ChangeVisibility(ctx, q.URL, h, 0))
		}
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("queue %s: put messages back: %w", q.Name, err)
		}
		qc.Count = max(qc.Count, len(qc.Messages))
		out = append(out, qc)
	}
	return out, nil
}

// Object is one object in the artifact bucket.
type Object struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
}

// Artifacts lists the objects in the stack's buckets, by key.
func (st *Stack) Artifacts(ctx context.Context) ([]Object, error) {
	var out []Object
	for _, bucket := range st.Buckets {
		objects, err := st.list(ctx, bucket)
		if err != nil {
			return nil, err
		}
		out = append(out, objects...)
	}
	slices.SortFunc(out, func(a, b Object) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}
