// Package config reads a function's settings from its environment, once
// per cold start, and reports every missing or malformed setting at once
// so a broken deployment fails before lambda.Start with one clear error.
package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/schedule"
)

// The environment variables. template.yaml sets them; `make invoke`
// sets them for the local emulator.
const (
	EnvTable            = "TABLE_NAME"
	EnvGenaceURL        = "GENACE_BASE_URL"
	EnvGenaceKey        = "GENACE_API_KEY"           // local runs only
	EnvGenaceKeySecret  = "GENACE_API_KEY_SECRET_ID" // Secrets Manager id or ARN (deployed)
	EnvDispatchQueueURL = "DISPATCH_QUEUE_URL"
	EnvDispatchQueueARN = "DISPATCH_QUEUE_ARN"
	EnvObserveQueueURL  = "OBSERVE_QUEUE_URL"
	EnvObserveQueueARN  = "OBSERVE_QUEUE_ARN"
	EnvDeliverQueueURL  = "DELIVER_QUEUE_URL"
	EnvDeliverQueueARN  = "DELIVER_QUEUE_ARN"
	EnvVisibility       = "QUEUE_VISIBILITY_SECONDS"
	EnvSchedulerRole    = "SCHEDULER_ROLE_ARN"
	EnvScheduleGroup    = "SCHEDULE_GROUP"
	EnvPolicies         = "OBSERVE_POLICIES"
	EnvConcurrency      = "BATCH_CONCURRENCY"
	EnvArtifactBucket   = "ARTIFACT_BUCKET"
	EnvArtifactDir      = "ARTIFACT_DIR" // local runs only: a Lambda's disk does not last
	EnvSweepClaim       = "SWEEP_CLAIM_TIMEOUT_SECONDS"
	EnvSweepOverdue     = "SWEEP_OVERDUE_SECONDS"
)

// Config is what the functions read from the environment.
type Config struct {
	Table           string
	GenaceURL       string
	GenaceKey       string
	GenaceKeySecret string
	Queues          map[message.Action]schedule.Target
	Visibility      time.Duration
	SchedulerRole   string
	ScheduleGroup   string
	Policies        schedule.Policies
	Concurrency     int
	ArtifactBucket  string
	ArtifactDir     string
	// SweepClaimTimeout and SweepOverdue are the sweep's thresholds (0:
	// the sweep's defaults).
	SweepClaimTimeout time.Duration
	SweepOverdue      time.Duration
}

// Need names the settings a function cannot start without.
type Need int

// What a function may need.
const (
	NeedTable Need = iota
	NeedGenace
	NeedQueues
	NeedVisibility
	NeedArtifacts
)

// Load reads the settings; getenv is os.Getenv in production.
func Load(getenv func(string) string, needs ...Need) (Config, error) {
	var errs []error
	c := Config{
		Table: getenv(EnvTable), GenaceURL: getenv(EnvGenaceURL), GenaceKey: getenv(EnvGenaceKey),
		GenaceKeySecret: getenv(EnvGenaceKeySecret), SchedulerRole: getenv(EnvSchedulerRole), ScheduleGroup: getenv(EnvScheduleGroup),
		Queues: map[message.Action]schedule.Target{
			message.SubmitGeneration:  {URL: getenv(EnvDispatchQueueURL), ARN: getenv(EnvDispatchQueueARN)},
			message.ObserveGeneration: {URL: getenv(EnvObserveQueueURL), ARN: getenv(EnvObserveQueueARN)},
			message.DeliverArtifacts:  {URL: getenv(EnvDeliverQueueURL), ARN: getenv(EnvDeliverQueueARN)},
		},
	}
	require := func(name, v string) {
		if strings.TrimSpace(v) == "" {
			errs = append(errs, fmt.Errorf("%s is required", name))
		}
	}
	for _, n := range needs {
		switch n {
		case NeedTable:
			require(EnvTable, c.Table)
		case NeedGenace:
			require(EnvGenaceURL, c.GenaceURL)
			if c.GenaceKey == "" && c.GenaceKeySecret == "" {
				errs = append(errs, fmt.Errorf("%s (or %s for local runs) is required", EnvGenaceKeySecret, EnvGenaceKey))
			}
		case NeedQueues:
			require(EnvDispatchQueueURL, c.Queues[message.SubmitGeneration].URL)
			require(EnvObserveQueueURL, c.Queues[message.ObserveGeneration].URL)
			require(EnvDeliverQueueURL, c.Queues[message.DeliverArtifacts].URL)
		case NeedVisibility:
			require(EnvVisibility, getenv(EnvVisibility))
		case NeedArtifacts:
			// Exactly one, so a deployment never writes outputs to an
			// instance's disk by accident.
			bucket, dir := strings.TrimSpace(getenv(EnvArtifactBucket)), strings.TrimSpace(getenv(EnvArtifactDir))
			switch {
			case bucket != "" && dir != "":
				errs = append(errs, fmt.Errorf("set %s or %s, not both", EnvArtifactBucket, EnvArtifactDir))
			case bucket == "" && dir == "":
				errs = append(errs, fmt.Errorf("%s is required", EnvArtifactBucket))
			}
		}
	}
	seconds := func(name string, max int) time.Duration {
		v := getenv(name)
		if v == "" {
			return 0
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > max {
			errs = append(errs, fmt.Errorf("%s=%q: want whole seconds from 1 to %d", name, v, max))
		}
		return time.Duration(n) * time.Second
	}
	c.Visibility = seconds(EnvVisibility, 43200)
	c.SweepClaimTimeout = seconds(EnvSweepClaim, 86400)
	c.SweepOverdue = seconds(EnvSweepOverdue, 86400)
	c.ArtifactBucket = strings.TrimSpace(getenv(EnvArtifactBucket))
	c.ArtifactDir = strings.TrimSpace(getenv(EnvArtifactDir))
	c.Concurrency = 8
	if v := getenv(EnvConcurrency); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			errs = append(errs, fmt.Errorf("%s=%q: want a number from 1 to 100", EnvConcurrency, v))
		}
		c.Concurrency = n
	}
	ps, err := schedule.ParsePolicies(getenv(EnvPolicies))
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", EnvPolicies, err))
	}
	c.Policies = ps
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("configuration: %w", err)
	}
	return c, nil
}

// DispatchConfig is the Dispatcher's part of the settings.
func (c Config) DispatchConfig() schedule.Config {
	return schedule.Config{Queues: c.Queues, SchedulerRoleARN: c.SchedulerRole, ScheduleGroup: c.ScheduleGroup, NamePrefix: "genjobs"}
}
