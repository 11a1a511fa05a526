// Package config reads a function's settings from its environment, once
// per cold start, and reports every missing or malformed setting at once
// so a broken deployment fails before lambda.Start with one clear error.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/schedule"
)

// The environment variables. template.yaml sets them (and is the one
// place that does: local runs resolve it, internal/dev/samlocal).
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
	EnvSweepClaim       = "SWEEP_CLAIM_TIMEOUT_SECONDS"
	EnvSweepOverdue     = "SWEEP_OVERDUE_SECONDS"
	// EnvSubmitTimeout is the submit function's timeout, which the sweep's
	// claim timeout must exceed; the template sets both from one parameter.
	EnvSubmitTimeout = "SUBMIT_TIMEOUT_SECONDS"
	// EnvBatchSize is the batch size of the function's own event source
	// mapping, which BATCH_CONCURRENCY must cover; the template sets both
	// from one parameter.
	EnvBatchSize = "BATCH_SIZE"
	// EnvScheduleDLQ is the queue EventBridge Scheduler sends a delivery
	// to once its retries are spent; required with EnvSchedulerRole.
	EnvScheduleDLQ = "SCHEDULE_DLQ_ARN"
	// EnvRecordRetention and EnvAuditRetention are the days finished
	// items stay in the table (see dynamo.Retention in internal/store/dynamo).
	EnvRecordRetention = "RECORD_RETENTION_DAYS"
	EnvAuditRetention  = "AUDIT_RETENTION_DAYS"
	// EnvModelCatalog is the intake's model catalog: a JSON object of
	// model name to the credits one render is estimated at.
	EnvModelCatalog = "MODEL_CATALOG"
	// EnvMaxInputBytes bounds the input one intake request may carry.
	EnvMaxInputBytes = "MAX_INPUT_BYTES"
	// EnvEventBus is the EventBridge bus the completion events go to
	// (internal/notify).
	EnvEventBus = "EVENT_BUS_NAME"
	// EnvObserveHold is the most records one observe invocation holds at
	// once, its batch and what it receives from its own queue while it
	// runs (observe's feed).
	EnvObserveHold = "OBSERVE_HOLD"
	// EnvObserveMapping is the id (UUID) of observe's event source
	// mapping, whose concurrency the sweep fits to the observe queue's
	// load; EnvObserveMaxConcurrency is the most it may set (the
	// template's MaximumConcurrency for that mapping).
	EnvObserveMapping        = "OBSERVE_MAPPING_ID"
	EnvObserveMaxConcurrency = "OBSERVE_MAX_CONCURRENCY"
)

// Bound is the inclusive range Load accepts for a numeric setting.
// template.yaml's parameters that feed these variables carry the same
// MinValue and MaxValue (internal/dev/templatecheck compares them).
type Bound struct{ Min, Max int }

// Bounds are the numeric settings' ranges, by variable.
var Bounds = map[string]Bound{
	EnvVisibility:  {1, 43200}, // SQS's longest VisibilityTimeout
	EnvConcurrency: {1, 100},
	// Above submit's longest timeout (60 s, below): a shorter claim
	// timeout lets the sweep mark a live POST uncertain.
	EnvSweepClaim: {61, 86400},
	// Above observe's chain (4 min) plus its last write (5 s): a shorter
	// threshold makes the sweep re-arm live chains. The functions check
	// both against the values they run with too (Spec.Check).
	EnvSweepOverdue: {246, 86400},
	// At least a POST of submit's shortest timeout (20 s) and its write
	// (5 s); at most a sixth of the dispatch queue's visibility (360 s).
	EnvSubmitTimeout: {25, 60},
	// SQS's largest batch without a batching window.
	EnvBatchSize: {1, 10},
	// At least 30 days: longer than any message can wait for the item it
	// names (a dead letter waits 14 days), so none meets an expired one.
	EnvRecordRetention: {30, 3650},
	EnvAuditRetention:  {30, 3650},
	// Far inside DynamoDB's 400 KB item, which holds the input and about
	// 1 KB more of the record.
	EnvMaxInputBytes: {1 << 10, 256 << 10},
	// At least the batch it is given; at most what one invocation's
	// memory and connections plausibly carry.
	EnvObserveHold: {1, 10000},
	// Lambda's range for an SQS event source mapping's
	// MaximumConcurrency.
	EnvObserveMaxConcurrency: {2, 1000},
}

// The retention defaults, used when the variable is unset (local runs,
// the operator CLI) and as the template parameters' defaults.
const (
	// DefaultRecordRetentionDays keeps finished records and closed
	// reviews 90 days.
	DefaultRecordRetentionDays = 90
	// DefaultAuditRetentionDays keeps audit entries 400 days.
	DefaultAuditRetentionDays = 400
)

// DefaultModelCatalog is the catalog local tools build the intake with,
// and template.yaml's ModelCatalog default.
const DefaultModelCatalog = `{"flux-pro-2": 12, "genace-video-2": 40}`

// QueueVars names the variables that hold one action's queue: its URL
// (to send through SQS) and its ARN (EventBridge Scheduler's target).
type QueueVars struct{ URL, ARN string }

// QueueEnv maps each action to its queue's variables.
var QueueEnv = map[message.Action]QueueVars{
	message.ActionSubmitGeneration:  {URL: EnvDispatchQueueURL, ARN: EnvDispatchQueueARN},
	message.ActionObserveGeneration: {URL: EnvObserveQueueURL, ARN: EnvObserveQueueARN},
	message.ActionDeliverArtifacts:  {URL: EnvDeliverQueueURL, ARN: EnvDeliverQueueARN},
}

// Config is what the functions read from the environment.
type Config struct {
	Table           string
	GenaceURL       string
	GenaceKey       string
	GenaceKeySecret string
	// Queues are the queues of the actions the function sends (its
	// Spec's FollowUps), with an ARN only for those it may delay beyond
	// SQS's limit.
	Queues map[message.Action]schedule.Target
	// FollowUps is the longest delay the function asks for, per action it
	// sends (Spec.FollowUps).
	FollowUps     map[message.Action]time.Duration
	Visibility    time.Duration
	SchedulerRole string
	ScheduleGroup string
	Policies      schedule.Policies
	// Concurrency is BATCH_CONCURRENCY (0 when the function does not
	// need it).
	Concurrency    int
	ArtifactBucket string
	// SweepClaimTimeout and SweepOverdue are the sweep's thresholds.
	SweepClaimTimeout time.Duration
	SweepOverdue      time.Duration
	// SubmitTimeout is the submit function's timeout (0 when not needed).
	SubmitTimeout time.Duration
	// BatchSize is the function's event source mapping's batch size (0
	// when not needed).
	BatchSize int
	// ScheduleDLQ is the ARN of the dead-letter queue of the schedules
	// the dispatcher creates.
	ScheduleDLQ string
	// RecordRetention and AuditRetention are how long finished records
	// and closed reviews, and audit entries, are kept.
	RecordRetention time.Duration
	AuditRetention  time.Duration
	// Catalog is MODEL_CATALOG, read (nil when not needed).
	Catalog map[string]int64
	// MaxInputBytes is MAX_INPUT_BYTES (0 when not needed).
	MaxInputBytes int
	// EventBus is the completion events' bus (empty when not needed).
	EventBus string
	// Hold is OBSERVE_HOLD (0 when not needed).
	Hold int
	// ObserveMapping and ObserveMaxConcurrency are OBSERVE_MAPPING_ID and
	// OBSERVE_MAX_CONCURRENCY (empty and 0 when not needed).
	ObserveMapping        string
	ObserveMaxConcurrency int
}

// Need names settings a function cannot start without.
type Need int

// What a function may need.
const (
	// NeedTable is TABLE_NAME.
	NeedTable Need = iota
	// NeedGenace is GENACE_BASE_URL and the key (GENACE_API_KEY_SECRET_ID,
	// or GENACE_API_KEY for local runs).
	NeedGenace
	// NeedVisibility is QUEUE_VISIBILITY_SECONDS.
	NeedVisibility
	// NeedArtifacts is ARTIFACT_BUCKET.
	NeedArtifacts
	// NeedConcurrency is BATCH_CONCURRENCY.
	NeedConcurrency
	// NeedPolicies is OBSERVE_POLICIES ("{}" for the built-in ones).
	NeedPolicies
	// NeedSweep is SWEEP_CLAIM_TIMEOUT_SECONDS and SWEEP_OVERDUE_SECONDS.
	NeedSweep
	// NeedRetention is RECORD_RETENTION_DAYS and AUDIT_RETENTION_DAYS: the
	// function finishes records or closes reviews, which then expire.
	NeedRetention
	// NeedOverdue is SWEEP_OVERDUE_SECONDS alone: the function keeps the
	// sweep informed of its work (observe's chains).
	NeedOverdue
	// NeedSubmitTimeout is SUBMIT_TIMEOUT_SECONDS.
	NeedSubmitTimeout
	// NeedBatchSize is BATCH_SIZE.
	NeedBatchSize
	// NeedCatalog is MODEL_CATALOG.
	NeedCatalog
	// NeedInputLimit is MAX_INPUT_BYTES.
	NeedInputLimit
	// NeedEvents is EVENT_BUS_NAME: the function writes records, and a
	// write may leave a completion event to send.
	NeedEvents
	// NeedHold is OBSERVE_HOLD: the function receives from its own queue
	// while it runs, up to that many records held at once.
	NeedHold
	// NeedFit is OBSERVE_MAPPING_ID, OBSERVE_MAX_CONCURRENCY and
	// OBSERVE_HOLD: the function fits observe's concurrency to its
	// queue's load (the sweep).
	NeedFit
)

// Spec is what one function needs of its environment. Each function's
// handler package declares its own (submit.Needs, ...); the functions'
// main packages load it, and a test checks it against template.yaml: the
// template gives every function exactly what its Spec asks for.
type Spec struct {
	// Needs are the settings it cannot start without.
	Needs []Need
	// FollowUps, for a function that sends messages, returns the longest
	// delay it asks for per action it sends, from the settings read; nil
	// for one that sends nothing. Each of those actions needs its queue's
	// URL; one delayed beyond SQS's limit goes through EventBridge
	// Scheduler, and needs its queue's ARN, SCHEDULER_ROLE_ARN and
	// SCHEDULE_GROUP too.
	FollowUps func(Config) map[message.Action]time.Duration
	// Check, if set, cross-checks the settings read against each other and
	// the handler's own constants; Load reports its error with the rest.
	// Each bound's error names both values.
	Check func(Config) error
}

// AtOnce is the FollowUps of a function that sends the actions without
// delay.
func AtOnce(actions ...message.Action) func(Config) map[message.Action]time.Duration {
	return func(Config) map[message.Action]time.Duration {
		out := make(map[message.Action]time.Duration, len(actions))
		for _, a := range actions {
			out[a] = 0
		}
		return out
	}
}

// Load reads the settings the spec asks for; getenv is os.Getenv in
// production. Every missing or malformed one is reported at once, each
// naming its variable.
func Load(getenv func(string) string, spec Spec) (Config, error) {
	var errs []error
	c := Config{
		Table: getenv(EnvTable), GenaceURL: getenv(EnvGenaceURL), GenaceKey: getenv(EnvGenaceKey),
		GenaceKeySecret: getenv(EnvGenaceKeySecret), SchedulerRole: getenv(EnvSchedulerRole), ScheduleGroup: getenv(EnvScheduleGroup),
		EventBus: strings.TrimSpace(getenv(EnvEventBus)),
	}
	require := func(name, v, why string) {
		if strings.TrimSpace(v) == "" {
			errs = append(errs, fmt.Errorf("%s is required%s", name, why))
		}
	}
	for _, n := range spec.Needs {
		switch n {
		case NeedTable:
			require(EnvTable, c.Table, "")
		case NeedGenace:
			require(EnvGenaceURL, c.GenaceURL, "")
			if c.GenaceKey == "" && c.GenaceKeySecret == "" {
				errs = append(errs, fmt.Errorf("%s (or %s for local runs) is required", EnvGenaceKeySecret, EnvGenaceKey))
			}
		case NeedVisibility:
			require(EnvVisibility, getenv(EnvVisibility), "")
		case NeedArtifacts:
			require(EnvArtifactBucket, getenv(EnvArtifactBucket), "")
		case NeedConcurrency:
			require(EnvConcurrency, getenv(EnvConcurrency), "")
		case NeedPolicies:
			require(EnvPolicies, getenv(EnvPolicies), ` ("{}" for the built-in policies)`)
		case NeedRetention:
			require(EnvRecordRetention, getenv(EnvRecordRetention), "")
			require(EnvAuditRetention, getenv(EnvAuditRetention), "")
		case NeedSweep:
			require(EnvSweepClaim, getenv(EnvSweepClaim), "")
			require(EnvSweepOverdue, getenv(EnvSweepOverdue), "")
		case NeedOverdue:
			require(EnvSweepOverdue, getenv(EnvSweepOverdue), "")
		case NeedSubmitTimeout:
			require(EnvSubmitTimeout, getenv(EnvSubmitTimeout), "")
		case NeedBatchSize:
			require(EnvBatchSize, getenv(EnvBatchSize), "")
		case NeedCatalog:
			require(EnvModelCatalog, getenv(EnvModelCatalog), ` (a JSON object of model to estimated credits)`)
		case NeedInputLimit:
			require(EnvMaxInputBytes, getenv(EnvMaxInputBytes), "")
		case NeedEvents:
			require(EnvEventBus, c.EventBus, "")
		case NeedHold:
			require(EnvObserveHold, getenv(EnvObserveHold), "")
		case NeedFit:
			require(EnvObserveMapping, getenv(EnvObserveMapping), "")
			require(EnvObserveMaxConcurrency, getenv(EnvObserveMaxConcurrency), "")
			require(EnvObserveHold, getenv(EnvObserveHold), "")
		}
	}
	whole := func(name string, def int) int {
		n, err := bounded(getenv, name, def)
		if err != nil {
			errs = append(errs, err)
		}
		return n
	}
	c.Visibility = time.Duration(whole(EnvVisibility, 0)) * time.Second
	c.SweepClaimTimeout = time.Duration(whole(EnvSweepClaim, 0)) * time.Second
	c.SweepOverdue = time.Duration(whole(EnvSweepOverdue, 0)) * time.Second
	c.Concurrency = whole(EnvConcurrency, 8)
	c.SubmitTimeout = time.Duration(whole(EnvSubmitTimeout, 0)) * time.Second
	c.BatchSize = whole(EnvBatchSize, 0)
	c.MaxInputBytes = whole(EnvMaxInputBytes, 0)
	c.Hold = whole(EnvObserveHold, 0)
	c.ObserveMapping = strings.TrimSpace(getenv(EnvObserveMapping))
	c.ObserveMaxConcurrency = whole(EnvObserveMaxConcurrency, 0)
	if v := getenv(EnvModelCatalog); strings.TrimSpace(v) != "" {
		var cerr error
		if c.Catalog, cerr = ParseCatalog(v); cerr != nil {
			errs = append(errs, fmt.Errorf("%s: %w", EnvModelCatalog, cerr))
		}
	}
	var err error
	if c.RecordRetention, c.AuditRetention, err = LoadRetention(getenv); err != nil {
		errs = append(errs, err)
	}
	c.ScheduleDLQ = strings.TrimSpace(getenv(EnvScheduleDLQ))
	if c.SchedulerRole != "" && c.ScheduleDLQ == "" {
		errs = append(errs, fmt.Errorf("%s is required with %s: a schedule whose delivery fails would be dropped silently", EnvScheduleDLQ, EnvSchedulerRole))
	}
	c.ArtifactBucket = strings.TrimSpace(getenv(EnvArtifactBucket))
	ps, perr := schedule.ParsePolicies(getenv(EnvPolicies))
	if perr != nil {
		errs = append(errs, fmt.Errorf("%s: %w", EnvPolicies, perr))
	}
	c.Policies = ps
	if spec.FollowUps != nil {
		errs = append(errs, c.followUps(getenv, spec.FollowUps(c))...)
	}
	if spec.Check != nil && len(errs) == 0 {
		// Only on settings that read well: a bound on a missing one says
		// nothing more.
		errs = append(errs, spec.Check(c))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("configuration: %w", err)
	}
	return c, nil
}

// followUps reads the queues of the actions the function sends: each
// one's URL, and for those delayed beyond SQS's limit the queue's ARN and
// the scheduler's role and group.
func (c *Config) followUps(getenv func(string) string, longest map[message.Action]time.Duration) []error {
	var errs []error
	c.FollowUps, c.Queues = longest, map[message.Action]schedule.Target{}
	scheduled := schedule.Config{MaxDelay: longest}.Scheduled()
	for _, a := range slices.Sorted(maps.Keys(longest)) {
		vars, ok := QueueEnv[a]
		if !ok {
			errs = append(errs, fmt.Errorf("follow-up %q: no queue variables for it", a))
			continue
		}
		t := schedule.Target{URL: getenv(vars.URL)}
		if strings.TrimSpace(t.URL) == "" {
			errs = append(errs, fmt.Errorf("%s is required (the function sends %s)", vars.URL, a))
		}
		if slices.Contains(scheduled, a) {
			t.ARN = getenv(vars.ARN)
			if strings.TrimSpace(t.ARN) == "" {
				errs = append(errs, fmt.Errorf("%s is required: %s", vars.ARN, beyondQueue(a, longest[a])))
			}
		}
		c.Queues[a] = t
	}
	if len(scheduled) > 0 {
		why := beyondQueue(scheduled[0], longest[scheduled[0]])
		if strings.TrimSpace(c.SchedulerRole) == "" {
			errs = append(errs, fmt.Errorf("%s is required: %s", EnvSchedulerRole, why))
		}
		if strings.TrimSpace(c.ScheduleGroup) == "" {
			errs = append(errs, fmt.Errorf("%s is required: %s", EnvScheduleGroup, why))
		}
	}
	return errs
}

func beyondQueue(a message.Action, d time.Duration) string {
	return fmt.Sprintf("%s can be delayed up to %v, beyond SQS's %v, so it goes through EventBridge Scheduler", a, d, schedule.DefaultMaxQueueDelay)
}

// bounded reads a whole number within Bounds[name]; def when unset.
func bounded(getenv func(string) string, name string, def int) (int, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	b := Bounds[name]
	n, err := strconv.Atoi(v)
	if err != nil || n < b.Min || n > b.Max {
		return n, fmt.Errorf("%s=%q: want a whole number from %d to %d", name, v, b.Min, b.Max)
	}
	return n, nil
}

// LoadRetention reads how long finished records and closed reviews, and
// audit entries, are kept (the defaults when unset). The operator CLI
// reads it too, so its audited writes expire as the stack's do.
func LoadRetention(getenv func(string) string) (records, audit time.Duration, err error) {
	const day = 24 * time.Hour
	r, rerr := bounded(getenv, EnvRecordRetention, DefaultRecordRetentionDays)
	a, aerr := bounded(getenv, EnvAuditRetention, DefaultAuditRetentionDays)
	if err := errors.Join(rerr, aerr); err != nil {
		return 0, 0, err
	}
	if a < r {
		// An audit entry explains a record's history: it must not go first.
		return 0, 0, fmt.Errorf("%s (%d days) is shorter than %s (%d days)", EnvAuditRetention, a, EnvRecordRetention, r)
	}
	return time.Duration(r) * day, time.Duration(a) * day, nil
}

// ParseCatalog reads a model catalog: one JSON object of model name (an
// identifier: letters, digits and . _ : -) to the whole number of credits
// a render of it is estimated at (0 or more), with at least one model. An
// empty catalog would refuse every request; a duplicated model is refused
// rather than resolved silently.
func ParseCatalog(s string) (map[string]int64, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New(`want a JSON object of model to estimated credits, e.g. {"flux-pro-2": 12}`)
	}
	out := map[string]int64{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not JSON: %w", err)
		}
		model, _ := t.(string)
		var credits int64
		if err := dec.Decode(&credits); err != nil || credits < 0 {
			return nil, fmt.Errorf("model %q: want a whole number of credits, 0 or more", model)
		}
		if !message.ValidOperationID(model) {
			return nil, fmt.Errorf("model %q: want letters, digits and . _ : - only, at most 128 bytes", model)
		}
		if _, dup := out[model]; dup {
			return nil, fmt.Errorf("model %q twice", model)
		}
		out[model] = credits
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	if len(out) == 0 {
		return nil, errors.New("no model: every request would be refused")
	}
	return out, nil
}

// DispatchConfig is the Dispatcher's part of the settings.
func (c Config) DispatchConfig() schedule.Config {
	return schedule.Config{Queues: c.Queues, MaxDelay: c.FollowUps, SchedulerRoleARN: c.SchedulerRole, ScheduleGroup: c.ScheduleGroup, NamePrefix: "genjobs"}
}
