package templatecheck

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/genjobs/genjobs/internal/coldstart"
	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/store/dynamo"
)

// What the template must say. Everything the rules compare against is
// here, so a change to the template's design is a change to this file.

// Logical ids of the shared resources.
const (
	tableID      = "OperationsTable"
	bucketID     = "ArtifactBucket"
	busID        = "EventBus"
	groupID      = "ScheduleGroup"
	schedRoleID  = "SchedulerRole"
	alarmTopicID = "AlarmTopic"
	metricsNS    = "genjobs"
	// sweepFailuresID is where the sweep's failed invocations go.
	sweepFailuresID = "SweepFailureQueue"
)

// Parameters the checks name.
const (
	// secretParam is the ARN of the existing secret holding the Genace
	// API key; the stack never creates or sees the key.
	secretParam  = "GenaceApiKeySecretArn"
	baseURLParam = "GenaceBaseUrl"
	// catalogParam is MODEL_CATALOG's, defaulting to config's catalog.
	catalogParam = "ModelCatalog"
)

// retentionParams are the parameters behind config's retention variables,
// with the defaults config uses when a variable is unset.
var retentionParams = map[string]struct {
	env string
	def int
}{
	"RecordRetentionDays": {config.EnvRecordRetention, config.DefaultRecordRetentionDays},
	"AuditRetentionDays":  {config.EnvAuditRetention, config.DefaultAuditRetentionDays},
}

// queues maps each main queue to its dead-letter queue, as the one
// topology declares them.
var queues = func() []struct{ main, dlq string } {
	var out []struct{ main, dlq string }
	for _, q := range topology.Stack.Queues {
		if q.DeadLetter != "" {
			out = append(out, struct{ main, dlq string }{q.ID, q.DeadLetter})
		}
	}
	return out
}()

const (
	visibilityRatio = 6 // VisibilityTimeout >= 6 x the consumer's Timeout
)

// grant is one (action, resource) pair an Allow statement gives.
type grant struct{ action, resource string }

func grants(resource string, actions ...string) []grant {
	out := make([]grant, len(actions))
	for i, a := range actions {
		out[i] = grant{a, resource}
	}
	return out
}

// Resource tokens the grants name.
var (
	tableArn  = GetAtt(tableID, "Arn")
	statusArn = Sub("${" + tableID + ".Arn}/index/" + dynamo.StatusIndex)
	secretArn = Ref(secretParam)
	objects   = Sub("${" + bucketID + ".Arn}/*")
	schedules = Sub("arn:${AWS::Partition}:scheduler:${AWS::Region}:${AWS::AccountId}:schedule/${" + groupID + "}/*")
)

func queueArn(id string) string { return GetAtt(id, "Arn") }

// consume is what Lambda's event source mapping needs on a queue it polls.
func consume(queue string) []grant {
	return grants(queueArn(queue), "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")
}

// lease is consume plus renewing a message's visibility (internal/worker's Lease).
func lease(queue string) []grant {
	return slices.Concat(consume(queue), grants(queueArn(queue), "sqs:ChangeMessageVisibility"))
}

func send(queues ...string) []grant {
	var out []grant
	for _, q := range queues {
		out = append(out, grant{"sqs:SendMessage", queueArn(q)})
	}
	return out
}

func logs(group string) []grant {
	return grants(GetAtt(group, "Arn"), "logs:CreateLogStream", "logs:PutLogEvents")
}

var (
	records = grants(tableArn, "dynamodb:GetItem", "dynamodb:PutItem")
	// events: a function that writes records sends the completion event
	// a write leaves owed (internal/notify); triage writes only reviews.
	events    = grants(GetAtt(busID, "Arn"), "events:PutEvents")
	apiKey    = grants(secretArn, "secretsmanager:GetSecretValue")
	allQueues = []string{"DispatchQueue", "ObserveQueue", "DeliverQueue"}
)

// function is what the template must wire for one function.
type function struct {
	// dir is the package under functions/, the build target's argument
	// and the EMF Function dimension's value.
	dir      string
	role     string
	logGroup string
	// consumes lists the queues whose SQS events feed the function.
	consumes []string
	// expires: it finishes records or closes reviews, so it needs the
	// retention variables (dynamo.Retention) to give them an expiry.
	expires bool
	// url: it serves a function URL, whose callers IAM must authenticate
	// (the intake reads the caller from it).
	url bool
}

// functions are the topology's functions by logical id, with the role
// and log group named after each (SubmitFunction: SubmitRole,
// SubmitLogGroup). Their environments are not listed here: each
// function's handler package declares what it needs (config.Spec), and
// internal/dev/samlocal's tests check template.yaml gives each exactly that.
var functions = func() map[string]function {
	out := map[string]function{}
	for _, f := range topology.Stack.Functions {
		base := strings.TrimSuffix(f.ID, "Function")
		fn := function{dir: f.Name, role: base + "Role", logGroup: base + "LogGroup", expires: f.Name != topology.Triage, url: f.Name == topology.Intake}
		for _, m := range f.Mappings {
			fn.consumes = append(fn.consumes, m.Queue)
		}
		out[f.ID] = fn
	}
	return out
}()

// allowed is the allow-list: every role in the template and exactly the
// grants it may hold. A grant outside it is too broad; one missing from it
// would fail at run time.
var allowed = map[string][]grant{
	// Submit also sends deliver_artifacts: a dispatch that finds the job
	// already succeeded re-arms delivery (submit.ensureObservation).
	"SubmitRole": slices.Concat(logs("SubmitLogGroup"), lease("DispatchQueue"),
		send("DispatchQueue", "ObserveQueue", "DeliverQueue"), records, events, apiKey),
	"ObserveRole": slices.Concat(logs("ObserveLogGroup"), lease("ObserveQueue"),
		send("ObserveQueue", "DeliverQueue"), records, events, apiKey,
		grants(schedules, "scheduler:CreateSchedule"),
		grants(GetAtt(schedRoleID, "Arn"), "iam:PassRole")),
	// internal/artifact's S3 store: HeadObject (needs GetObject, and
	// ListBucket for a missing key to answer 404, not 403), a create-only
	// PutObject, DeleteObject. CopyObject would be GetObject + PutObject.
	"DeliverRole": slices.Concat(logs("DeliverLogGroup"), lease("DeliverQueue"), send("DeliverQueue"), records, events, apiKey,
		grants(objects, "s3:GetObject", "s3:PutObject", "s3:DeleteObject"),
		grants(GetAtt(bucketID, "Arn"), "s3:ListBucket")),
	// Triage never sends a message.
	"TriageRole": slices.Concat(logs("TriageLogGroup"), consume("DispatchDLQ"), consume("ObserveDLQ"), consume("DeliverDLQ"), records),
	// Lambda sends the sweep's failed invocations to its on-failure
	// destination with the function's own role.
	// The due index holds keys only: the sweep reads what it lists with
	// BatchGetItem.
	// It fits observe's concurrency to its queue's load (sweep.Fit): the
	// queue's depth, and observe's mapping, which SAM names after the
	// function and its event.
	"SweepRole": slices.Concat(logs("SweepLogGroup"), records, events, grants(tableArn, "dynamodb:BatchGetItem"), grants(statusArn, "dynamodb:Query"),
		send(allQueues...), send(sweepFailuresID), grants(GetAtt("ObserveQueue", "Arn"), "sqs:GetQueueAttributes"),
		grants(Sub("arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:event-source-mapping:${"+observeMappingID+"}"),
			"lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping")),
	// The intake: a create-only Put, a Get, a change's transaction of two
	// Puts, and the Query of audit entries that knows a transaction whose
	// answer was lost as its own (store.OwnWrite); the dispatch it owes.
	"IntakeRole": slices.Concat(logs("IntakeLogGroup"), grants(tableArn, "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"),
		send("DispatchQueue")),
	// Scheduler delivers to the observe queue, and a delivery that keeps
	// failing to its DLQ (schedule.EventBridgeScheduler's target).
	schedRoleID: send("ObserveQueue", "ObserveDLQ"),
}

// trustedService is the one service principal each role trusts.
func trustedService(role string) string {
	if role == schedRoleID {
		return "scheduler.amazonaws.com"
	}
	return "lambda.amazonaws.com"
}

// envWiring is the value each resource-bound variable must have.
// QUEUE_VISIBILITY_SECONDS is checked by the visibility rule; plain
// settings (GENACE_BASE_URL, BATCH_CONCURRENCY, ...) may hold any value.
var envWiring = map[string]string{
	"TABLE_NAME":               Ref(tableID),
	"DISPATCH_QUEUE_URL":       Ref("DispatchQueue"),
	"OBSERVE_QUEUE_URL":        Ref("ObserveQueue"),
	"DELIVER_QUEUE_URL":        Ref("DeliverQueue"),
	"DISPATCH_QUEUE_ARN":       GetAtt("DispatchQueue", "Arn"),
	"OBSERVE_QUEUE_ARN":        GetAtt("ObserveQueue", "Arn"),
	"DELIVER_QUEUE_ARN":        GetAtt("DeliverQueue", "Arn"),
	"SCHEDULER_ROLE_ARN":       GetAtt(schedRoleID, "Arn"),
	"SCHEDULE_GROUP":           Ref(groupID),
	"SCHEDULE_DLQ_ARN":         GetAtt("ObserveDLQ", "Arn"),
	"ARTIFACT_BUCKET":          Ref(bucketID),
	"GENACE_API_KEY_SECRET_ID": Ref(secretParam),
	"GENACE_BASE_URL":          Ref(baseURLParam),
	"RECORD_RETENTION_DAYS":    Ref("RecordRetentionDays"),
	"AUDIT_RETENTION_DAYS":     Ref("AuditRetentionDays"),
	"EVENT_BUS_NAME":           Ref(busID),
	"OBSERVE_MAPPING_ID":       Ref(observeMappingID),
}

// observeMappingID is the logical id SAM gives observe's event source
// mapping: the function's and its SQS event's.
const observeMappingID = "ObserveFunctionObserve"

// configEnv lists the variables internal/config reads that a deployed
// function may be given (its Env* constants; a test compares the two).
// GENACE_API_KEY is deliberately absent: it is for local runs only, and a
// template that sets it puts the key in plain text.
var configEnv = []string{
	"TABLE_NAME", "GENACE_BASE_URL", "GENACE_API_KEY_SECRET_ID",
	"DISPATCH_QUEUE_URL", "DISPATCH_QUEUE_ARN", "OBSERVE_QUEUE_URL", "OBSERVE_QUEUE_ARN",
	"DELIVER_QUEUE_URL", "DELIVER_QUEUE_ARN", "QUEUE_VISIBILITY_SECONDS",
	"SCHEDULER_ROLE_ARN", "SCHEDULE_GROUP", "OBSERVE_POLICIES", "BATCH_CONCURRENCY",
	"ARTIFACT_BUCKET", "SWEEP_CLAIM_TIMEOUT_SECONDS", "SWEEP_OVERDUE_SECONDS",
	"SCHEDULE_DLQ_ARN", "RECORD_RETENTION_DAYS", "AUDIT_RETENTION_DAYS",
	"SUBMIT_TIMEOUT_SECONDS", "BATCH_SIZE", "MODEL_CATALOG", "MAX_INPUT_BYTES", "EVENT_BUS_NAME",
	"OBSERVE_HOLD", "OBSERVE_MAPPING_ID", "OBSERVE_MAX_CONCURRENCY",
}

// localOnlyEnv are config's variables a template must never set.
var localOnlyEnv = []string{"GENACE_API_KEY"}

// emitted lists, per genjobs metric, the dimension sets the code emits
// (internal/metrics adds Function to every point). An alarm or a SEARCH
// must name one of these sets exactly, or it watches a metric that never
// receives data.
var emitted = map[string][][]string{
	"QueueAge":                 {{"Action", "Function"}},                                 // internal/worker (Runner)
	"ActionDuration":           {{"Action", "Function", "Outcome"}},                      // submit, observe, deliver
	"RemoteRenderAge":          {{"Function", "Model"}},                                  // observe
	"LeaseRenewalFailures":     {{"Action", "Function"}},                                 // submit, observe, deliver
	"PostOutcomes":             {{"Function", "Model", "Outcome"}},                       // submit
	"UncertainSubmissions":     {{"Function"}},                                           // submit
	"GenaceUnauthorized":       {{"Function"}},                                           // submit, observe, deliver
	"GenaceThrottled":          {{"Function"}},                                           // submit, observe, deliver
	"ReviewsOpened":            {{"Function", "Phase"}, {"Function", "Phase", "Reason"}}, // internal/worker (Emitter), triage
	"RecordFailures":           {{"Function", "Outcome"}},                                // internal/worker (Runner)
	"ObservationsPerOperation": {{"Function", "Phase"}},                                  // observe
	"DueRefreshes":             {{"Function"}},                                           // observe, deliver (internal/worker)
	"ObsoleteMessages":         {{"Action", "Function", "Reason"}},
	"StaleWritesRejected":      {{"Action", "Function"}},
	"ScheduledFollowUps":       {{"Action", "Function", "Route"}},
	"OutputsDelivered":         {{"Function", "Outcome"}}, // deliver
	"SweepRearmed":             {{"Function"}},            // sweep
	"ObserveConcurrency":       {{"Function"}},            // sweep
	"SweepClaimsExpired":       {{"Function"}},            // sweep
	"SweepDispatchesDropped":   {{"Function"}},            // sweep
	"ReviewsResolved":          {{"Function", "Phase"}},   // internal/worker (Emitter)
	"OperationsParked":         {{"Function", "Reason"}},  // internal/worker (Park): observe, deliver
	"EventsPublished":          {{"Function", "Phase"}},   // internal/notify
	"EventPublishFailures":     {{"Function", "Phase"}},   // internal/notify
	"FeedRecordsReceived":      {{"Function"}},            // observe (feed)
	"RecordsHeld":              {{"Function"}},            // observe (feed)
	"FeedDeleteFailures":       {{"Function"}},            // observe (feed)
}

// seedMeasures must each have a dashboard widget of their own.
var seedMeasures = []string{"QueueAge", "ActionDuration", "RemoteRenderAge", "LeaseRenewalFailures"}

// logMetrics are the metrics the template's own metric filters publish
// from the functions' log lines, with their dimension sets.
var logMetrics = map[string][][]string{initFailures: {{"Function"}}}

// initFailures counts the line coldstart.Fatal writes when a function
// cannot start. Lambda publishes no metric of its own for init failures,
// and Errors mixes them with handler errors; this line is the one the code
// itself guarantees, with the function's name in it.
const initFailures = "InitFailures"

// initFailedPattern is the CloudWatch Logs filter pattern that selects
// that line (a JSON log event).
var initFailedPattern = fmt.Sprintf(`{ $.%s = %q }`, slog.MessageKey, coldstart.InitFailed)

// initFailedFunction is the dimension value that names the function.
var initFailedFunction = "$." + coldstart.FunctionKey
