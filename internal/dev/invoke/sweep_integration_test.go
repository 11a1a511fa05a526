//go:build integration

package invoke

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/genjobs/genjobs/internal/dev/emulator"
	"github.com/genjobs/genjobs/internal/dev/testenv"
)

// TestInvokeSweepFitsObservesMapping runs the sweep as `genjobs invoke
// --function sweep --event events/sweep.json` does, on moto and DynamoDB
// Local: the stack made observe's event source mapping (the template's
// ceiling, 8) and gave the sweep its UUID, so the sweep reads the queue
// and lowers the mapping to what the queue's one observation needs:
// Lambda's least, 2.
func TestInvokeSweepFitsObservesMapping(t *testing.T) {
	for _, v := range []string{"AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_LAMBDA", "AWS_ENDPOINT_URL_IAM"} {
		testenv.Endpoint(t, v)
	}
	r := root(t)
	if _, err := emulator.Installed(r); err != nil {
		testenv.Skip(t, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ep := EndpointsFromEnv()
	var progress strings.Builder
	s, err := Prepare(ctx, Options{Root: r, Template: template(t), Function: "sweep", EventPath: filepath.Join(r, "events", "sweep.json"),
		Endpoints: ep, Progress: &progress})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	defer s.Close()

	uuid := s.stack.Locals.Resources["ObserveFunctionObserve"]["Ref"]
	lc := lambdaClient(t, ep)
	if got := maxConcurrency(t, lc, uuid); got != 8 {
		t.Fatalf("before the sweep: mapping %s MaximumConcurrency %d, want the template's 8", uuid, got)
	}
	res, err := s.Invoke(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Err(); err != nil {
		t.Fatalf("%v\nlog:\n%s\nemulator:\n%s", err, strings.Join(res.Log, "\n"), strings.Join(res.EmulatorLog, "\n"))
	}
	for _, l := range res.Log {
		if strings.Contains(l, "sweep: ") && strings.Contains(l, "failed") {
			t.Errorf("the sweep logged a failure: %s", l)
		}
	}
	// One observation queued fits Lambda's least, 2; a sweep halves the
	// template's 8 on the way (sweep.Toward).
	if got := maxConcurrency(t, lc, uuid); got != 4 {
		t.Errorf("after the sweep: mapping %s MaximumConcurrency %d, want 4 (8 halved towards 2 for one observation queued)\nlog:\n%s", uuid, got, strings.Join(res.Log, "\n"))
	}
	// The mapping is disabled, so moto did not take the sweep's
	// observation off the queue to run the placeholder function.
	for _, q := range res.Queues {
		if q.Kind == "observe" && q.Count != 1 {
			t.Errorf("observe queue holds %d message(s), want the sweep's 1", q.Count)
		}
	}
}

func lambdaClient(t *testing.T, ep Endpoints) *lambda.Client {
	t.Helper()
	cfg, err := awsconfig.LoadDefaultConfig(context.Background(), awsconfig.WithRegion(ep.Region),
		awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(ep.AccessKey, ep.SecretKey, "")))
	if err != nil {
		t.Fatal(err)
	}
	return lambda.NewFromConfig(cfg, func(o *lambda.Options) { o.BaseEndpoint = aws.String(ep.lambda()) })
}

func maxConcurrency(t *testing.T, lc *lambda.Client, uuid string) int32 {
	t.Helper()
	out, err := lc.GetEventSourceMapping(context.Background(), &lambda.GetEventSourceMappingInput{UUID: aws.String(uuid)})
	if err != nil {
		t.Fatalf("mapping %s: %v", uuid, err)
	}
	if out.ScalingConfig == nil {
		return 0
	}
	return aws.ToInt32(out.ScalingConfig.MaximumConcurrency)
}
