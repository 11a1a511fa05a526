// Package coldstart builds, once per Lambda cold start, the clients every
// function shares: AWS SDK clients (endpoints from the SDK's standard
// AWS_ENDPOINT_URL_* variables, so local runs need no code path of their
// own), the operation store, the Genace client and the follow-up
// dispatcher.
package coldstart

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/queue"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/secret"
	"github.com/genjobs/genjobs/internal/store/dynamo"
)

// Deps are a function's shared clients.
type Deps struct {
	Config     config.Config
	AWS        aws.Config
	Store      *dynamo.Store
	Queue      *queue.SQS
	Dispatcher *schedule.Dispatcher
	Genace     *genace.Client
	Clock      clock.Clock
	Log        *slog.Logger
	Metrics    *metrics.Emitter
}

// Load reads the environment as spec says and builds the clients for
// function name: the Genace client when the spec needs Genace, the
// follow-up dispatcher when it sends follow-ups (with EventBridge
// Scheduler only when one of them can be delayed beyond SQS's limit).
func Load(ctx context.Context, name string, spec config.Spec) (*Deps, error) {
	cfg, err := config.Load(os.Getenv, spec)
	if err != nil {
		return nil, err
	}
	d := &Deps{Config: cfg, Clock: clock.Real{}, Metrics: metrics.New(os.Stdout, name, clock.Real{})}
	// Level and format come from the function's logging configuration
	// (AWS_LAMBDA_LOG_LEVEL, AWS_LAMBDA_LOG_FORMAT).
	d.Log = lambdacontext.NewLogger()
	d.AWS, err = awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("aws config: %w", err)
	}
	if cfg.Table != "" {
		client, err := dynamo.NewClient(ctx)
		if err != nil {
			return nil, err
		}
		d.Store = dynamo.New(client, cfg.Table).WithRetention(dynamo.Retention{Records: cfg.RecordRetention, Audit: cfg.AuditRetention}, nil)
	}
	d.Queue = queue.NewSQS(sqs.NewFromConfig(d.AWS))
	// Only functions that send follow-ups get a dispatcher: triage is
	// deployed with nothing but its table.
	if spec.FollowUps != nil {
		dc := cfg.DispatchConfig()
		var sched schedule.ScheduleCreator
		if len(dc.Scheduled()) > 0 {
			sched = schedule.NewEventBridgeScheduler(scheduler.NewFromConfig(d.AWS), cfg.ScheduleDLQ)
		}
		d.Dispatcher, err = schedule.NewDispatcher(dc, d.Queue, sched, d.Clock)
		if err != nil {
			return nil, err
		}
	}
	withGenace := slices.Contains(spec.Needs, config.NeedGenace)
	if withGenace {
		var sm secret.Getter
		if cfg.GenaceKey == "" {
			sm = secretsmanager.NewFromConfig(d.AWS)
		}
		key, err := secret.APIKey(ctx, cfg.GenaceKey, cfg.GenaceKeySecret, sm)
		if err != nil {
			return nil, err
		}
		// Per-call timeouts bound every request; the transport is shared
		// across warm invocations so connections are reused.
		d.Genace, err = genace.New(cfg.GenaceURL, key, &http.Client{Transport: http.DefaultTransport})
		if err != nil {
			return nil, err
		}
	}
	return d, nil
}

// InitFailed is the message of the line Fatal writes, and FunctionKey
// the key of the function's name in it: template.yaml's metric filters
// count these lines (InitFailures), one JSON object per line.
const (
	InitFailed  = "init failed"
	FunctionKey = "function"
)

// Fatal logs an init error and exits before lambda.Start, so the runtime
// reports an init failure instead of serving a half-built function.
func Fatal(name string, err error) {
	logInitFailure(os.Stderr, name, err)
	os.Exit(1)
}

func logInitFailure(w io.Writer, name string, err error) {
	slog.New(slog.NewJSONHandler(w, nil)).Error(InitFailed, FunctionKey, name, "error", err.Error())
}
