package template

import (
	"github.com/genjobs/genjobs/internal/samlocal"
	"github.com/genjobs/genjobs/internal/store"
)

// What the template must say. Everything the rules compare against is
// here, so a change to the template's design is a change to this file.

// Logical ids of the shared resources.
const (
	tableID       = "OperationsTable"
	bucketID      = "ArtifactBucket"
	secretID      = "GenaceApiKeySecret"
	groupID       = "ScheduleGroup"
	schedRoleID   = "SchedulerRole"
	alarmTopicID  = "AlarmTopic"
	metricsNS     = "genjobs"
	sweepSchedule = "rate(5 minutes)"
)

// queues maps each main queue to its dead-letter queue.
var queues = []struct{ main, dlq string }{
	{"DispatchQueue", "DispatchDLQ"},
	{"ObserveQueue", "ObserveDLQ"},
	{"DeliverQueue", "DeliverDLQ"},
}

const (
	maxReceiveCount = 5
	dlqRetention    = 14 * 24 * 60 * 60 // seconds
	visibilityRatio = 6                 // VisibilityTimeout >= 6 x the consumer's Timeout
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

func join(lists ...[]grant) []grant {
	var out []grant
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// Resource tokens the grants name.
var (
	tableArn  = GetAtt(tableID, "Arn")
	statusArn = Sub("${" + tableID + ".Arn}/index/" + store.StatusIndex)
	secretArn = Ref(secretID)
	objects   = Sub("${" + bucketID + ".Arn}/*")
	schedules = Sub("arn:${AWS::Partition}:scheduler:${AWS::Region}:${AWS::AccountId}:schedule/${" + groupID + "}/*")
)

func queueArn(id string) string { return GetAtt(id, "Arn") }

// consume is what Lambda's event source mapping needs on a queue it polls.
func consume(queue string) []grant {
	return grants(queueArn(queue), "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")
}

// lease is consume plus renewing a message's visibility (internal/lease).
func lease(queue string) []grant {
	return join(consume(queue), grants(queueArn(queue), "sqs:ChangeMessageVisibility"))
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
	records   = grants(tableArn, "dynamodb:GetItem", "dynamodb:PutItem")
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
	// schedule is its Schedule event's expression ("" for none).
	schedule string
}

// functions are the template's functions by logical id. Their
// environments are not listed here: each function's handler package
// declares what it needs (config.Spec), and internal/samlocal's tests
// check template.yaml gives each exactly that.
var functions = map[string]function{
	"SubmitFunction": {dir: "submit", role: "SubmitRole", logGroup: "SubmitLogGroup",
		consumes: []string{"DispatchQueue"}},
	"ObserveFunction": {dir: "observe", role: "ObserveRole", logGroup: "ObserveLogGroup",
		consumes: []string{"ObserveQueue"}},
	"DeliverFunction": {dir: "deliver", role: "DeliverRole", logGroup: "DeliverLogGroup",
		consumes: []string{"DeliverQueue"}},
	"TriageFunction": {dir: "triage", role: "TriageRole", logGroup: "TriageLogGroup",
		consumes: []string{"DispatchDLQ", "ObserveDLQ", "DeliverDLQ"}},
	"SweepFunction": {dir: "sweep", role: "SweepRole", logGroup: "SweepLogGroup",
		schedule: sweepSchedule},
}

// allowed is the allow-list: every role in the template and exactly the
// grants it may hold. A grant outside it is too broad; one missing from it
// would fail at run time.
var allowed = map[string][]grant{
	// Submit also sends deliver_artifacts: a dispatch that finds the job
	// already succeeded re-arms delivery (submit.ensureObservation).
	"SubmitRole": join(logs("SubmitLogGroup"), lease("DispatchQueue"),
		send("DispatchQueue", "ObserveQueue", "DeliverQueue"), records, apiKey),
	"ObserveRole": join(logs("ObserveLogGroup"), lease("ObserveQueue"),
		send("ObserveQueue", "DeliverQueue"), records, apiKey,
		grants(schedules, "scheduler:CreateSchedule"),
		grants(GetAtt(schedRoleID, "Arn"), "iam:PassRole")),
	// internal/artifact's S3 store: HeadObject (needs GetObject, and
	// ListBucket for a missing key to answer 404, not 403), a create-only
	// PutObject, DeleteObject. CopyObject would be GetObject + PutObject.
	"DeliverRole": join(logs("DeliverLogGroup"), lease("DeliverQueue"), send("DeliverQueue"), records, apiKey,
		grants(objects, "s3:GetObject", "s3:PutObject", "s3:DeleteObject"),
		grants(GetAtt(bucketID, "Arn"), "s3:ListBucket")),
	// Triage never sends a message.
	"TriageRole": join(logs("TriageLogGroup"), consume("DispatchDLQ"), consume("ObserveDLQ"), consume("DeliverDLQ"), records),
	"SweepRole": join(logs("SweepLogGroup"), records, grants(statusArn, "dynamodb:Query"),
		send(allQueues...)),
	schedRoleID: send("ObserveQueue"),
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
	"ARTIFACT_BUCKET":          Ref(bucketID),
	"GENACE_API_KEY_SECRET_ID": Ref(secretID),
}

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
}

// localEndpointPrefix starts the SDK's endpoint variables, which the
// template declares empty for `sam local invoke --env-vars` to fill
// (internal/samlocal).
const localEndpointPrefix = samlocal.EndpointPrefix

// localOnlyEnv are config's variables a template must never set.
var localOnlyEnv = []string{"GENACE_API_KEY", "ARTIFACT_DIR"}

// emitted lists, per genjobs metric, the dimension sets the code emits
// (internal/metrics adds Function to every point). An alarm or a SEARCH
// must name one of these sets exactly, or it watches a metric that never
// receives data.
var emitted = map[string][][]string{
	"QueueAge":                 {{"Action", "Function"}},                                 // internal/batch
	"ActionDuration":           {{"Action", "Function", "Outcome"}},                      // submit, observe, deliver
	"RemoteRenderAge":          {{"Function", "Model"}},                                  // observe
	"LeaseRenewalFailures":     {{"Action", "Function"}},                                 // submit, observe, deliver
	"PostOutcomes":             {{"Function", "Model", "Outcome"}},                       // submit
	"UncertainSubmissions":     {{"Function"}},                                           // submit
	"ReviewsOpened":            {{"Function", "Phase"}, {"Function", "Phase", "Reason"}}, // followup, triage
	"RecordFailures":           {{"Function", "Outcome"}},                                // internal/batch
	"ObservationsPerOperation": {{"Function", "Phase"}},                                  // observe
	"ObsoleteMessages":         {{"Action", "Function", "Reason"}},
	"StaleWritesRejected":      {{"Action", "Function"}},
	"ScheduledFollowUps":       {{"Action", "Function", "Route"}},
	"OutputsDelivered":         {{"Function", "Outcome"}}, // deliver
	"SweepRearmed":             {{"Function"}},            // sweep
	"SweepClaimsExpired":       {{"Function"}},            // sweep
	"SweepDispatchesDropped":   {{"Function"}},            // sweep
	"ReviewsResolved":          {{"Function", "Phase"}},   // followup
}

// seedMeasures must each have a dashboard widget of their own.
var seedMeasures = []string{"QueueAge", "ActionDuration", "RemoteRenderAge", "LeaseRenewalFailures"}

// Known keys of the parts goformation does not decode strictly.
var (
	templateKeys = set("AWSTemplateFormatVersion", "Transform", "Description", "Metadata", "Parameters",
		"Mappings", "Conditions", "Resources", "Outputs", "Globals", "Rules")
	globalsSections = set("Function", "Api", "HttpApi", "SimpleTable", "StateMachine", "LayerVersion", "CapacityProvider")
	// SAM's samtranslator/plugins/globals/globals.py supported_properties.
	globalFunctionKeys = set("Handler", "Runtime", "CodeUri", "DeadLetterQueue", "Description", "MemorySize",
		"Timeout", "VpcConfig", "Environment", "Tags", "PropagateTags", "Tracing", "KmsKeyArn",
		"AutoPublishAlias", "AutoPublishAliasAllProperties", "Layers", "DeploymentPreference", "RolePath",
		"PermissionsBoundary", "ReservedConcurrentExecutions", "ProvisionedConcurrencyConfig",
		"AssumeRolePolicyDocument", "EventInvokeConfig", "FileSystemConfigs", "CodeSigningConfigArn",
		"Architectures", "SnapStart", "EphemeralStorage", "FunctionUrlConfig", "RuntimeManagementConfig",
		"LoggingConfig", "RecursiveLoop", "SourceKMSKeyArn")
	loggingConfigKeys = set("LogFormat", "ApplicationLogLevel", "SystemLogLevel", "LogGroup")
	environmentKeys   = set("Variables")
	eventKeys         = set("Type", "Properties")
	eventPropertyKeys = map[string]map[string]bool{
		"SQS": set("Queue", "BatchSize", "Enabled", "FilterCriteria", "FunctionResponseTypes", "KmsKeyArn",
			"MaximumBatchingWindowInSeconds", "MetricsConfig", "ScalingConfig"),
		"Schedule": set("Schedule", "Name", "Description", "Enabled", "State", "Input", "DeadLetterConfig", "RetryPolicy"),
	}
	scalingConfigKeys    = set("MaximumConcurrency")
	functionMetadataKeys = set("BuildMethod", "BuildProperties")
	parameterKeys        = set("Type", "Default", "Description", "AllowedPattern", "AllowedValues",
		"ConstraintDescription", "MaxLength", "MinLength", "MaxValue", "MinValue", "NoEcho")
	outputKeys = set("Value", "Description", "Export", "Condition")
	logLevels  = set("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL")
)

func set(items ...string) map[string]bool {
	m := make(map[string]bool, len(items))
	for _, it := range items {
		m[it] = true
	}
	return m
}
