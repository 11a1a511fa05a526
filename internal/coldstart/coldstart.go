// Package coldstart builds, once per Lambda cold start, a deployed
// function's clients into the composition table's dependency set
// (internal/stack): AWS SDK clients (endpoints from the SDK's standard
// AWS_ENDPOINT_URL_* variables, so local runs need no code path of their
// own), the operation store, the artifact store, the Genace client, the
// follow-up dispatcher and the completion events' EventBridge sink.
package coldstart

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"

	"github.com/aws/aws-lambda-go/lambdacontext"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/notify"
	"github.com/genjobs/genjobs/internal/queue"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/secret"
	"github.com/genjobs/genjobs/internal/stack"
	"github.com/genjobs/genjobs/internal/store/dynamo"
)

// MemoryLimit is the Go runtime's soft memory limit for a sandbox of
// AWS_LAMBDA_FUNCTION_MEMORY_SIZE megabytes: 85 % of it, so that the
// collector runs harder as the heap nears the sandbox's size instead of
// letting it grow to twice the live heap (GOGC's default), which an
// observe invocation holding OBSERVE_HOLD renders would carry past its
// 128 MB and be killed. False when GOMEMLIMIT is set (the operator's
// choice stands) or the size is not a positive number.
func MemoryLimit(getenv func(string) string) (int64, bool) {
	mb, err := strconv.Atoi(getenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE"))
	if err != nil || mb <= 0 || getenv("GOMEMLIMIT") != "" {
		return 0, false
	}
	return int64(mb) << 20 * 85 / 100, true
}

// Load reads the environment as the named function of the table needs
// it and builds its clients into the table's dependency set: the store,
// the queue (and, for a function that holds records, its own queue to
// receive from while it runs), the Genace client when the function needs Genace, the S3
// artifact store when it needs artifacts, and the follow-up dispatcher
// when it sends follow-ups (with EventBridge Scheduler only when one of
// them can be delayed beyond SQS's limit).
func Load(ctx context.Context, name string) (stack.Function, stack.Deps, error) {
	fn, ok := stack.Lookup(name)
	if !ok {
		return fn, stack.Deps{}, fmt.Errorf("no function %q in the table (internal/stack)", name)
	}
	if limit, ok := MemoryLimit(os.Getenv); ok {
		debug.SetMemoryLimit(limit)
	}
	spec := fn.Needs
	cfg, err := config.Load(os.Getenv, spec)
	if err != nil {
		return fn, stack.Deps{}, err
	}
	// Level and format come from the function's logging configuration
	// (AWS_LAMBDA_LOG_LEVEL, AWS_LAMBDA_LOG_FORMAT).
	d := stack.Deps{Config: cfg, Clock: clock.Real{}, Metrics: metrics.New(os.Stdout, name, clock.Real{}), Log: lambdacontext.NewLogger()}
	// Every endpoint comes from the SDK's AWS_ENDPOINT_URL_* variables.
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return fn, stack.Deps{}, fmt.Errorf("aws config: %w", err)
	}
	if cfg.Table != "" {
		client, err := dynamo.NewClient(ctx)
		if err != nil {
			return fn, stack.Deps{}, err
		}
		d.Store = dynamo.New(client, cfg.Table).WithRetention(dynamo.Retention{Records: cfg.RecordRetention, Audit: cfg.AuditRetention}, nil)
	}
	q := queue.NewSQS(sqs.NewFromConfig(awsCfg))
	d.Extender = q
	if slices.Contains(spec.Needs, config.NeedHold) {
		// Observe's feed: its own queue is the one its next observations
		// go to, whose URL its follow-ups read.
		own := cfg.Queues[message.ActionObserveGeneration]
		d.Receiver = q.Feed(own.URL, own.ARN)
	}
	if slices.Contains(spec.Needs, config.NeedFit) {
		// The sweep fits observe's concurrency to its queue's load.
		d.Capacity = queue.Capacity{Queue: q, QueueURL: cfg.Queues[message.ActionObserveGeneration].URL,
			Mapping: queue.NewMapping(lambda.NewFromConfig(awsCfg), cfg.ObserveMapping)}
	}
	// Only functions that send follow-ups get a dispatcher: triage is
	// deployed with nothing but its table.
	if spec.FollowUps != nil {
		dc := cfg.DispatchConfig()
		var sched schedule.ScheduleCreator
		if len(dc.Scheduled()) > 0 {
			sched = schedule.NewEventBridgeScheduler(scheduler.NewFromConfig(awsCfg), cfg.ScheduleDLQ)
		}
		if d.Sender, err = schedule.NewDispatcher(dc, q, sched, d.Clock); err != nil {
			return fn, stack.Deps{}, err
		}
	}
	if slices.Contains(spec.Needs, config.NeedEvents) {
		d.Events = notify.NewEventBridge(eventbridge.NewFromConfig(awsCfg), cfg.EventBus)
	}
	if slices.Contains(spec.Needs, config.NeedArtifacts) {
		d.Artifacts = artifact.NewS3(s3.NewFromConfig(awsCfg), cfg.ArtifactBucket)
	}
	if slices.Contains(spec.Needs, config.NeedGenace) {
		var sm secret.Getter
		if cfg.GenaceKey == "" {
			sm = secretsmanager.NewFromConfig(awsCfg)
		}
		key, err := secret.APIKey(ctx, cfg.GenaceKey, cfg.GenaceKeySecret, sm)
		if err != nil {
			return fn, stack.Deps{}, err
		}
		// Per-call timeouts bound every request; the transport is shared
		// across warm invocations so connections are reused, and keeps
		// one idle connection per poll an invocation may hold (observe's
		// OBSERVE_HOLD; the others' batch concurrency).
		held := max(cfg.Hold, cfg.Concurrency)
		if d.Genace, err = genace.New(cfg.GenaceURL, key, &http.Client{Transport: genace.Transport(held)}); err != nil {
			return fn, stack.Deps{}, err
		}
	}
	return fn, d, nil
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
