package templatecheck

import (
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/dev/samlocal"
	"github.com/genjobs/genjobs/internal/dev/testenv"
)

var update = flag.Bool("update", false, "rewrite the broken copies in testdata/template from template.yaml and the Makefile")

const (
	realTemplate = "../../../template.yaml"
	realMakefile = "../../../Makefile"
	brokenDir    = "../../../testdata/template"
)

func TestRealTemplatePasses(t *testing.T) {
	t.Parallel()
	if problems := Check(realTemplate); len(problems) > 0 {
		t.Fatalf("template.yaml breaks %d rule(s):\n%v", len(problems), Err(problems))
	}
}

func TestTemplateLoadsAsPlainYAML(t *testing.T) {
	t.Parallel()
	tmpl, err := samlocal.Load(realTemplate)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Transform", "Globals", "Resources", "Outputs"} {
		if _, ok := tmpl.Doc[want]; !ok {
			t.Errorf("no top-level %s", want)
		}
	}
}

func TestParseErrorIsAProblem(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "template.yaml")
	if err := os.WriteFile(path, []byte("Resources:\n  A: [unclosed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	problems := Check(path)
	if len(problems) != 1 || problems[0].Rule != RuleParse {
		t.Fatalf("got %v, want one parse problem", problems)
	}
	if Err(problems) == nil || Err(nil) != nil {
		t.Fatal("Err must be nil exactly when there are no problems")
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	ref := func(s string) map[string]any { return map[string]any{"Ref": s} }
	getAtt := func(r, a string) map[string]any { return map[string]any{"Fn::GetAtt": []any{r, a}} }
	for _, tc := range []struct {
		input any
		want  any
	}{
		{ref("DispatchQueue"), "Ref(DispatchQueue)"},
		{getAtt("DispatchQueue", "Arn"), "GetAtt(DispatchQueue.Arn)"},
		{map[string]any{"Fn::Sub": "${T.Arn}/index/status"}, "Sub(${T.Arn}/index/status)"},
		{map[string]any{"Fn::Sub": []any{"${A}/x/${B}", map[string]any{"A": getAtt("T", "Arn"), "B": ref("G")}}}, "Sub(${T.Arn}/x/${G})"},
		{[]any{ref("A"), "b"}, []any{"Ref(A)", "b"}},
		// Malformed calls stay as they are, so they match no expectation.
		{map[string]any{"Fn::GetAtt": "7"}, map[string]any{"Fn::GetAtt": "7"}},
	} {
		if got := tokens(tc.input); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%v -> %v, want %v", tc.input, got, tc.want)
		}
	}
}

// edit replaces old, which must occur exactly once, by new.
type edit struct{ old, new string }

// brokenCase is one broken copy: the real template (and Makefile) with a
// minimal edit that breaks exactly one rule, and what catches it: the
// project's rules, cfn-lint (SAM's translator included), or both.
type brokenCase struct {
	name string
	// rule is the one project rule the copy breaks; "" when it breaks
	// none (cfn-lint catches it).
	rule Rule
	// also is a second rule the copy breaks as well ("" for none).
	also Rule
	// resource must be named by one of rule's problems (for topology,
	// where its message begins).
	resource string
	// cfnLint are the rules cfn-lint reports on the copy, exactly (E0001:
	// SAM's translator refuses it); nil when cfn-lint is not relied on.
	// Measured when the schema code went: cfn-lint passes every copy only
	// the project's rules catch.
	cfnLint  []string
	template []edit
	makefile []edit
}

var brokenCases = []brokenCase{
	{name: "topology-submit-reads-observe-queue", rule: RuleTopology, resource: "function SubmitFunction",
		template: []edit{{"        Dispatch:\n          Type: SQS\n          Properties:\n            Queue: !GetAtt DispatchQueue.Arn",
			"        Dispatch:\n          Type: SQS\n          Properties:\n            Queue: !GetAtt ObserveQueue.Arn"},
			// Timeout and lease as the observe queue needs them, so that
			// only the wiring breaks.
			{"      Role: !GetAtt SubmitRole.Arn\n      Timeout: !Ref SubmitTimeoutSeconds\n", "      Role: !GetAtt SubmitRole.Arn\n      Timeout: 900\n"},
			{"          QUEUE_VISIBILITY_SECONDS: \"360\"\n", "          QUEUE_VISIBILITY_SECONDS: \"5400\"\n"}}},
	{name: "topology-triage-misses-deliver-dlq", rule: RuleTopology, resource: "function TriageFunction",
		template: []edit{{"        DeliverDeadLetters:\n          Type: SQS\n          Properties:\n            Queue: !GetAtt DeliverDLQ.Arn\n            BatchSize: 10\n            MaximumBatchingWindowInSeconds: 5\n            FunctionResponseTypes: [ReportBatchItemFailures]\n            ScalingConfig:\n              MaximumConcurrency: 2\n", ""}}},
	// An observation chain sends to the queue that invokes it.
	{name: "wiring-recursive-loop-terminate", rule: RuleWiring, resource: "ObserveFunction",
		template: []edit{{"      # SubmitFunction).\n      RecursiveLoop: Allow\n",
			"      # SubmitFunction).\n      RecursiveLoop: Terminate\n"}}},
	// Triage sends nothing: an accidental loop must stay detectable.
	{name: "wiring-recursive-loop-on-triage", rule: RuleWiring, resource: "TriageFunction",
		template: []edit{{"      Role: !GetAtt TriageRole.Arn\n", "      Role: !GetAtt TriageRole.Arn\n      RecursiveLoop: Allow\n"}}},
	{name: "topology-observe-queue-without-redrive", rule: RuleTopology, resource: "queue ObserveQueue",
		template: []edit{{"      RedrivePolicy:\n        deadLetterTargetArn: !GetAtt ObserveDLQ.Arn\n        maxReceiveCount: 5\n", ""}}},
	{name: "dlq-redrive-allow-all", rule: RuleDLQ, resource: "DispatchDLQ",
		template: []edit{{"        redrivePermission: byQueue\n        sourceQueueArns:\n          - !Sub \"arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:${AWS::StackName}-dispatch\"\n",
			"        redrivePermission: allowAll\n"}}},
	// Triage takes its Timeout from Globals: the check must merge them.
	{name: "visibility-globals-timeout", rule: RuleVisibility, also: RuleTopology, resource: "DeliverDLQ",
		template: []edit{{"    Timeout: 30\n", "    Timeout: 45\n"}}},
	{name: "visibility-lease-mismatch", rule: RuleVisibility, resource: "ObserveFunction",
		template: []edit{{"          OBSERVE_POLICIES: !Ref ObservePolicies\n          QUEUE_VISIBILITY_SECONDS: \"5400\"",
			"          OBSERVE_POLICIES: !Ref ObservePolicies\n          QUEUE_VISIBILITY_SECONDS: \"300\""}}},
	{name: "batch-failures-deliver-unreported", rule: RuleBatchFailures, resource: "DeliverFunction event Deliver",
		template: []edit{{"            Queue: !GetAtt DeliverQueue.Arn\n            BatchSize: 10\n            MaximumBatchingWindowInSeconds: 1\n            FunctionResponseTypes: [ReportBatchItemFailures]\n",
			"            Queue: !GetAtt DeliverQueue.Arn\n            BatchSize: 10\n            MaximumBatchingWindowInSeconds: 1\n"}}},
	// The intake reads its caller from IAM: a public URL has none.
	{name: "least-privilege-intake-url-public", rule: RuleLeastPrivilege, resource: "IntakeFunction",
		template: []edit{{"        AuthType: AWS_IAM\n", "        AuthType: NONE\n"}}},
	{name: "least-privilege-resource-star", rule: RuleLeastPrivilege, resource: "DeliverRole",
		template: []edit{{"                Resource: !Sub \"${ArtifactBucket.Arn}/*\"", "                Resource: \"*\""}}},
	{name: "least-privilege-service-wildcard", rule: RuleLeastPrivilege, resource: "ObserveRole",
		template: []edit{{"              - Sid: OperationAndReviewRecords\n                Effect: Allow\n                Action: [dynamodb:GetItem, dynamodb:PutItem]",
			"              - Sid: OperationAndReviewRecords\n                Effect: Allow\n                Action: dynamodb:*"}}},
	// Confused deputy: any schedule in the account could use the role.
	{name: "least-privilege-scheduler-any-source", rule: RuleLeastPrivilege, resource: "SchedulerRole",
		template: []edit{{"                aws:SourceArn: !GetAtt ScheduleGroup.Arn\n", ""}}},
	// Scheduler could not dead-letter a failed delivery.
	{name: "least-privilege-scheduler-no-dlq", rule: RuleLeastPrivilege, resource: "SchedulerRole",
		template: []edit{{"                  - !GetAtt ObserveQueue.Arn\n                  - !GetAtt ObserveDLQ.Arn\n", "                  - !GetAtt ObserveQueue.Arn\n"}}},
	{name: "least-privilege-triage-sends", rule: RuleLeastPrivilege, resource: "TriageRole",
		template: []edit{{"              - Sid: ReviewRecords\n                Effect: Allow\n                Action: [dynamodb:GetItem, dynamodb:PutItem]\n                Resource: !GetAtt OperationsTable.Arn\n",
			"              - Sid: ReviewRecords\n                Effect: Allow\n                Action: [dynamodb:GetItem, dynamodb:PutItem]\n                Resource: !GetAtt OperationsTable.Arn\n              - Sid: Replay\n                Effect: Allow\n                Action: sqs:SendMessage\n                Resource: !GetAtt DispatchQueue.Arn\n"}}},
	// cfn-lint's CloudFormation schemas.
	{name: "cfnlint-resource-property", cfnLint: []string{"E3002"},
		template: []edit{{"      DisplayName: genjobs alarms\n", "      DisplayName: genjobs alarms\n      DisplayNme: typo\n"}}},
	{name: "cfnlint-wrong-type", cfnLint: []string{"E3012", "E3030"},
		template: []edit{{"-submit\"\n      RetentionInDays: 30\n", "-submit\"\n      RetentionInDays: a month\n"}}},
	// SQS allows at most 900 s.
	{name: "cfnlint-delay-seconds", cfnLint: []string{"E3034"},
		template: []edit{{"      QueueName: !Sub \"${AWS::StackName}-dispatch\"\n", "      QueueName: !Sub \"${AWS::StackName}-dispatch\"\n      DelaySeconds: 1000\n"}}},
	// Ranges and enumerations of the registry's current schemas.
	{name: "cfnlint-log-level", cfnLint: []string{"E3030"},
		template: []edit{{"      ApplicationLogLevel: INFO\n", "      ApplicationLogLevel: VERBOSE\n"}}},
	{name: "cfnlint-triage-concurrency-below-2", rule: RuleTopology, resource: "function TriageFunction", cfnLint: []string{"E3034"},
		template: []edit{{"            Queue: !GetAtt DispatchDLQ.Arn\n            BatchSize: 10\n            MaximumBatchingWindowInSeconds: 5\n            FunctionResponseTypes: [ReportBatchItemFailures]\n            ScalingConfig:\n              MaximumConcurrency: 2\n",
			"            Queue: !GetAtt DispatchDLQ.Arn\n            BatchSize: 10\n            MaximumBatchingWindowInSeconds: 5\n            FunctionResponseTypes: [ReportBatchItemFailures]\n            ScalingConfig:\n              MaximumConcurrency: 1\n"}}},
	// An on-demand table takes no ProvisionedThroughput.
	{name: "cfnlint-table-provisioned-throughput", cfnLint: []string{"E3638"},
		template: []edit{{"      BillingMode: PAY_PER_REQUEST\n", "      BillingMode: PAY_PER_REQUEST\n      ProvisionedThroughput:\n        ReadCapacityUnits: 5\n        WriteCapacityUnits: 5\n"}}},
	// SAM's translator (cfn-lint's E0001): an image function with a
	// Runtime and Handler (the build rule requires both), an SQS event's
	// properties, and Globals.
	{name: "cfnlint-package-type-image", cfnLint: []string{"E0001"},
		template: []edit{{"      Role: !GetAtt TriageRole.Arn\n", "      Role: !GetAtt TriageRole.Arn\n      PackageType: Image\n"}}},
	{name: "cfnlint-sqs-event-property", cfnLint: []string{"E0001"},
		template: []edit{{"            ScalingConfig:\n              MaximumConcurrency: 8\n",
			"            ScalingConfig:\n              MaximumConcurrency: 8\n            Enabeld: true\n"}}},
	{name: "cfnlint-globals", cfnLint: []string{"E0001"},
		template: []edit{{"    MemorySize: 128\n", "    MemorySize: 128\n    Tracer: Active\n"}}},
	{name: "table-status-index-projects-all", rule: RuleTable, resource: "OperationsTable",
		template: []edit{{"            ProjectionType: KEYS_ONLY\n        # Who holds", "            ProjectionType: ALL\n        # Who holds"}}},
	{name: "table-without-pitr", rule: RuleTable, resource: "OperationsTable",
		template: []edit{{"PointInTimeRecoveryEnabled: true", "PointInTimeRecoveryEnabled: false"}}},
	{name: "table-without-deletion-protection", rule: RuleTable, resource: "OperationsTable",
		template: []edit{{"      DeletionProtectionEnabled: true\n", ""}}},
	// The store writes expires_at; a TTL on another attribute deletes nothing.
	{name: "table-ttl-other-attribute", rule: RuleTable, resource: "OperationsTable",
		template: []edit{{"        AttributeName: expires_at\n", "        AttributeName: ttl\n"}}},
	// The CLI (config's default) and the stack would keep items for different times.
	{name: "table-retention-default-drift", rule: RuleTable, resource: "Parameters.RecordRetentionDays",
		template: []edit{{"    Default: \"90\"\n", "    Default: \"60\"\n"}}},
	{name: "table-sweep-without-retention", rule: RuleTable, resource: "SweepFunction",
		template: []edit{{"          SUBMIT_TIMEOUT_SECONDS: !Ref SubmitTimeoutSeconds\n          RECORD_RETENTION_DAYS: !Ref RecordRetentionDays\n",
			"          SUBMIT_TIMEOUT_SECONDS: !Ref SubmitTimeoutSeconds\n"}}},
	{name: "build-x86", rule: RuleBuild, resource: "SweepFunction",
		template: []edit{{"    Architectures: [arm64]", "    Architectures: [x86_64]"}}},
	{name: "build-missing-target", rule: RuleBuild, resource: "Makefile",
		makefile: []edit{{"build-%Function:\n\t$(SAM_GO_BUILD) ./functions/$(call lower,$*)\n", ""}}},
	{name: "build-makefile-amd64", rule: RuleBuild, resource: "Makefile",
		makefile: []edit{{"GOOS=linux GOARCH=arm64 CGO_ENABLED=0", "GOOS=linux GOARCH=amd64 CGO_ENABLED=0"}}},
	{name: "secrets-plain-api-key", rule: RuleSecretsEnv, resource: "GenaceApiKey",
		template: []edit{
			{"Parameters:\n", "Parameters:\n  GenaceApiKey:\n    Type: String\n    NoEcho: true\n"},
			{"          DELIVER_QUEUE_URL: !Ref DeliverQueue\n          QUEUE_VISIBILITY_SECONDS: \"360\"\n",
				"          DELIVER_QUEUE_URL: !Ref DeliverQueue\n          GENACE_API_KEY: !Ref GenaceApiKey\n          QUEUE_VISIBILITY_SECONDS: \"360\"\n"},
		}},
	// A name or a partial ARN: the role's policy would not match the secret read.
	{name: "secrets-arn-pattern-loose", rule: RuleSecretsEnv, resource: "Parameters.GenaceApiKeySecretArn",
		template: []edit{{`    AllowedPattern: "^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+-[A-Za-z0-9]{6}$"`,
			`    AllowedPattern: "^\\S+$"`}}},
	{name: "secrets-env-unknown", rule: RuleSecretsEnv, resource: "TriageFunction",
		template: []edit{{"      Role: !GetAtt TriageRole.Arn\n      Environment:\n        Variables:\n          TABLE_NAME: !Ref OperationsTable\n",
			"      Role: !GetAtt TriageRole.Arn\n      Environment:\n        Variables:\n          TABLE_NAME: !Ref OperationsTable\n          DEBUG: \"1\"\n"}}},
	// An endpoint set in the template would send a deployed function to it.
	{name: "secrets-env-endpoint-set", rule: RuleSecretsEnv, resource: "SweepFunction",
		template: []edit{{`        AWS_ENDPOINT_URL_SQS: ""`, `        AWS_ENDPOINT_URL_SQS: "http://127.0.0.1:4100"`}}},
	// The key would travel in clear.
	{name: "parameters-http-base-url", rule: RuleParameters, resource: "Parameters.GenaceBaseUrl",
		template: []edit{{`    AllowedPattern: "^https://[^\\s/]+(/\\S*)?$"`, `    AllowedPattern: "^https?://\\S+$"`}}},
	// CloudFormation would accept 200; every function would then fail its cold start.
	{name: "parameters-bound-drift", rule: RuleParameters, resource: "Parameters.BatchConcurrency",
		template: []edit{{"    MaxValue: \"100\"\n", "    MaxValue: \"200\"\n"}}},
	// LeaseRenewalFailures carries {Function, Action}: Function alone names a
	// metric that never receives data.
	{name: "observability-lease-alarm-function-only", rule: RuleObservability, resource: "LeaseRenewalFailuresAlarm",
		template: []edit{{`SCHEMA("genjobs", "Action", "Function")`, `SCHEMA("genjobs", "Function")`}}},
	{name: "observability-uncertain-alarm-extra-dimension", rule: RuleObservability, resource: "UncertainSubmissionsAlarm",
		template: []edit{{"        - Name: Function\n          Value: submit\n", "        - Name: Function\n          Value: submit\n        - Name: Action\n          Value: submit_generation\n"}}},
	// A park is the one sign that automation gave up on an operation.
	{name: "observability-no-parked-alarm", rule: RuleObservability, resource: "alarms",
		template: []edit{{`SELECT SUM(OperationsParked) FROM "genjobs"`, `SELECT SUM(ReviewsOpened) FROM "genjobs"`}}},
	{name: "observability-no-ok-actions", rule: RuleObservability, resource: "SweepFailuresAlarm",
		template: []edit{{"          Value: !GetAtt SweepFailureQueue.QueueName\n      Statistic: Maximum\n      Period: 300\n      EvaluationPeriods: 1\n      Threshold: 0\n      ComparisonOperator: GreaterThanThreshold\n      TreatMissingData: notBreaching\n      AlarmActions: [!Ref AlarmTopic]\n      OKActions: [!Ref AlarmTopic]\n",
			"          Value: !GetAtt SweepFailureQueue.QueueName\n      Statistic: Maximum\n      Period: 300\n      EvaluationPeriods: 1\n      Threshold: 0\n      ComparisonOperator: GreaterThanThreshold\n      TreatMissingData: notBreaching\n      AlarmActions: [!Ref AlarmTopic]\n"}}},
	{name: "observability-no-throttles-alarm", rule: RuleObservability, resource: "TriageFunction",
		template: []edit{{"  TriageThrottlesAlarm:\n    Type: AWS::CloudWatch::Alarm\n    Properties:\n      AlarmDescription: triage throttles in the last 5 minutes.\n      Namespace: AWS/Lambda\n      MetricName: Throttles\n      Dimensions:\n        - Name: FunctionName\n          Value: !Ref TriageFunction\n      Statistic: Sum\n      Period: 300\n      EvaluationPeriods: 1\n      Threshold: 0\n      ComparisonOperator: GreaterThanThreshold\n      TreatMissingData: notBreaching\n      AlarmActions: [!Ref AlarmTopic]\n      OKActions: [!Ref AlarmTopic]\n\n", ""}}},
	// coldstart.Fatal writes "msg", not "message": this filter counts nothing.
	{name: "observability-init-filter-wrong-field", rule: RuleObservability, resource: "SweepInitFailures",
		template: []edit{{"      LogGroupName: !Ref SweepLogGroup\n      FilterPattern: '{ $.msg = \"init failed\" }'\n",
			"      LogGroupName: !Ref SweepLogGroup\n      FilterPattern: '{ $.message = \"init failed\" }'\n"}}},
	// CloudWatch cannot use the AWS managed key: every alarm would be dropped.
	{name: "observability-topic-aws-managed-key", rule: RuleObservability, resource: "AlarmTopic",
		template: []edit{{"      KmsMasterKeyId: !Ref AlarmTopicKey\n", "      KmsMasterKeyId: alias/aws/sns\n"}}},
	{name: "observability-sweep-without-destination", rule: RuleObservability, resource: "SweepFunction",
		template: []edit{{"      EventInvokeConfig:\n        MaximumRetryAttempts: 0\n        MaximumEventAgeInSeconds: 300\n        DestinationConfig:\n          OnFailure:\n            Type: SQS\n            Destination: !GetAtt SweepFailureQueue.Arn\n", ""}}},
	{name: "observability-dashboard-mixes-measures", rule: RuleObservability, resource: "Dashboard widget 1",
		template: []edit{{`MetricName=\"QueueAge\"', 'Maximum', 60)", "id": "queueage"}]]`,
			`MetricName=\"QueueAge\"', 'Maximum', 60)", "id": "queueage"}], [{"expression": "SEARCH('{genjobs,Action,Function,Outcome} MetricName=\"ActionDuration\"', 'Average', 60)", "id": "mixed"}]]`}}},
}

func apply(t *testing.T, path string, edits []edit) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, e := range edits {
		if n := strings.Count(s, e.old); n != 1 {
			t.Fatalf("%s: the edit's old text occurs %d times, want 1 (update the case): %q", path, n, e.old)
		}
		s = strings.Replace(s, e.old, e.new, 1)
	}
	return s
}

// files are the broken copy's template and Makefile paths.
func (bc brokenCase) files() (template, makefile string) {
	template, makefile = realTemplate, realMakefile
	if bc.template != nil {
		template = filepath.Join(brokenDir, bc.name+".yaml")
	}
	if bc.makefile != nil {
		makefile = filepath.Join(brokenDir, bc.name+".Makefile")
	}
	return template, makefile
}

// TestBrokenCopiesAreCurrent keeps each committed copy equal to the real
// files plus its edit, so a copy differs from template.yaml by exactly the
// break it proves. Regenerate with: go test ./internal/dev/templatecheck -run BrokenCopies -update
func TestBrokenCopiesAreCurrent(t *testing.T) {
	for _, bc := range brokenCases {
		tmpl, mk := bc.files()
		for _, f := range []struct {
			path, source string
			edits        []edit
		}{{tmpl, realTemplate, bc.template}, {mk, realMakefile, bc.makefile}} {
			if f.edits == nil {
				continue
			}
			want := apply(t, f.source, f.edits)
			if *update {
				if err := os.MkdirAll(brokenDir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(f.path, []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(f.path)
			if err != nil || string(got) != want {
				t.Errorf("%s is missing or stale: run go test ./internal/dev/templatecheck -run BrokenCopies -update", f.path)
			}
		}
	}
	if *update {
		return
	}
	entries, err := os.ReadDir(brokenDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".yaml"), ".Makefile")
		if !slices.ContainsFunc(brokenCases, func(bc brokenCase) bool { return bc.name == name }) {
			t.Errorf("%s/%s belongs to no case", brokenDir, e.Name())
		}
	}
}

// TestEachRuleFailsOnItsBrokenCopy: each copy breaks its rule, and only
// it; a copy for cfn-lint breaks none.
func TestEachRuleFailsOnItsBrokenCopy(t *testing.T) {
	t.Parallel()
	for _, bc := range brokenCases {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			if bc.rule == "" && bc.cfnLint == nil {
				t.Fatal("nothing catches this copy: name its rule or its cfn-lint findings")
			}
			tmpl, mk := bc.files()
			problems := CheckWith(tmpl, Options{Makefile: mk})
			if bc.rule == "" {
				if len(problems) > 0 {
					t.Fatalf("breaks a project rule too; record it:\n%v", Err(problems))
				}
				return
			}
			if len(problems) == 0 {
				t.Fatalf("%s passes every rule; it must break %s", tmpl, bc.rule)
			}
			named := false
			for _, p := range problems {
				if p.Rule != bc.rule && p.Rule != bc.also {
					t.Errorf("breaks %s too (the copy must break only %s): %v", p.Rule, bc.rule, p)
				}
				named = named || strings.Contains(p.Resource, bc.resource) || p.Resource == "topology" && strings.HasPrefix(p.Message, bc.resource+":")
			}
			if !named {
				t.Errorf("no problem names %s:\n%v", bc.resource, Err(problems))
			}
			t.Logf("%v", Err(problems))
		})
	}
}

// TestCfnLint runs cfn-lint (required: testenv.Tool) once on template.yaml
// and on every broken copy it is relied on for. It validates after SAM's
// transform (its E0001 is the translator's refusal) against the
// CloudFormation registry's current schemas. template.yaml must pass
// without a finding; each copy must get exactly its recorded rules.
func TestCfnLint(t *testing.T) {
	t.Parallel()
	bin := testenv.Tool(t, "cfn-lint")
	want := map[string][]string{realTemplate: nil}
	args := []string{"--format", "parseable", realTemplate}
	for _, bc := range brokenCases {
		if bc.cfnLint != nil {
			tmpl, _ := bc.files()
			want[tmpl] = bc.cfnLint
			args = append(args, tmpl)
		}
	}
	out, err := exec.Command(bin, args...).Output()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("cfn-lint: %v", err)
	}
	got := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// path:line:column:endline:endcolumn:rule:message
		f := strings.SplitN(line, ":", 7)
		if len(f) < 7 {
			if line != "" {
				t.Errorf("cfn-lint printed %q", line)
			}
			continue
		}
		if !slices.Contains(got[f[0]], f[5]) {
			got[f[0]] = append(got[f[0]], f[5])
		}
		t.Log(line)
	}
	for path, rules := range want {
		slices.Sort(got[path])
		if !slices.Equal(got[path], rules) {
			t.Errorf("cfn-lint on %s reports %v, want %v", path, got[path], rules)
		}
	}
}

func TestEveryRuleHasABrokenCopy(t *testing.T) {
	t.Parallel()
	for _, r := range Rules() {
		if r == RuleParse {
			continue // TestParseErrorIsAProblem
		}
		if !slices.ContainsFunc(brokenCases, func(bc brokenCase) bool { return bc.rule == r }) {
			t.Errorf("rule %s has no broken copy", r)
		}
	}
}

// configConstants reads internal/config's exported Env* string constants
// from its source, so a variable added there is seen here.
func configConstants(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("../../config/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no internal/config sources: %v", err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Env") || !name.IsExported() || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						out[name.Name] = v
					}
				}
			}
		}
	}
	return out
}

// TestEnvNamesMatchConfig ties the check's variable lists to the names
// internal/config reads: by the constants themselves (a rename fails to
// compile) and by scanning config's source (an addition is noticed).
func TestEnvNamesMatchConfig(t *testing.T) {
	t.Parallel()
	explicit := map[string]string{
		"EnvTable": config.EnvTable, "EnvGenaceURL": config.EnvGenaceURL, "EnvGenaceKey": config.EnvGenaceKey,
		"EnvGenaceKeySecret": config.EnvGenaceKeySecret, "EnvDispatchQueueURL": config.EnvDispatchQueueURL,
		"EnvDispatchQueueARN": config.EnvDispatchQueueARN, "EnvObserveQueueURL": config.EnvObserveQueueURL,
		"EnvObserveQueueARN": config.EnvObserveQueueARN, "EnvDeliverQueueURL": config.EnvDeliverQueueURL,
		"EnvDeliverQueueARN": config.EnvDeliverQueueARN, "EnvVisibility": config.EnvVisibility,
		"EnvSchedulerRole": config.EnvSchedulerRole, "EnvScheduleGroup": config.EnvScheduleGroup,
		"EnvPolicies": config.EnvPolicies, "EnvConcurrency": config.EnvConcurrency,
		"EnvArtifactBucket": config.EnvArtifactBucket, "EnvSweepClaim": config.EnvSweepClaim,
		"EnvSweepOverdue": config.EnvSweepOverdue, "EnvScheduleDLQ": config.EnvScheduleDLQ,
		"EnvRecordRetention": config.EnvRecordRetention, "EnvAuditRetention": config.EnvAuditRetention,
		"EnvSubmitTimeout": config.EnvSubmitTimeout, "EnvBatchSize": config.EnvBatchSize,
		"EnvModelCatalog": config.EnvModelCatalog, "EnvMaxInputBytes": config.EnvMaxInputBytes,
		"EnvEventBus": config.EnvEventBus, "EnvObserveHold": config.EnvObserveHold,
		"EnvObserveMapping": config.EnvObserveMapping, "EnvObserveMaxConcurrency": config.EnvObserveMaxConcurrency,
	}
	scanned := configConstants(t)
	for name, v := range explicit {
		if scanned[name] != v {
			t.Errorf("source scan read %s = %q, the constant is %q", name, scanned[name], v)
		}
	}
	values := map[string]bool{}
	for name, v := range scanned {
		values[v] = true
		if !slices.Contains(configEnv, v) && !slices.Contains(localOnlyEnv, v) {
			t.Errorf("config.%s = %q is in neither configEnv nor localOnlyEnv: decide whether a deployed function may set it", name, v)
		}
	}
	for _, v := range append(append([]string(nil), configEnv...), localOnlyEnv...) {
		if !values[v] {
			t.Errorf("%s is listed in the check but internal/config reads no such variable", v)
		}
	}
}

// TestMakeTargets runs every function's build target as sam build does
// (the build rule reads its dry run): an arm64, static ELF bootstrap in
// ARTIFACTS_DIR.
func TestMakeTargets(t *testing.T) {
	t.Parallel()
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Fatal("no make on PATH")
	}
	if testing.Short() {
		t.Skip("-short: the build rule's dry run only")
	}
	for _, id := range slices.Sorted(maps.Keys(functions)) {
		t.Run(id, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			out, err := exec.Command(makeBin, "-C", "../../..", "--no-print-directory", "build-"+id, "ARTIFACTS_DIR="+dir).CombinedOutput()
			if err != nil {
				t.Fatalf("make build-%s: %v\n%s", id, err, out)
			}
			f, err := elf.Open(filepath.Join(dir, "bootstrap"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Machine != elf.EM_AARCH64 {
				t.Errorf("bootstrap is for %v, want EM_AARCH64", f.Machine)
			}
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Error("bootstrap is dynamically linked; provided.al2023 needs CGO_ENABLED=0")
				}
			}
		})
	}
}

// TestEmittedDimensionsMatchCode reads every metrics call in the code
// (Count, Duration, Put with a metrics.* name or a literal, and
// metrics.Dim{Name: ...} literals) and compares the dimension sets with
// emitted, the table the alarms and dashboard queries are checked against.
func TestEmittedDimensionsMatchCode(t *testing.T) {
	t.Parallel()
	names := map[string]string{} // metrics.<Const> -> metric name
	fset := token.NewFileSet()
	var files []*ast.File
	for _, root := range []string{"../../../internal", "../../../functions"} {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			if filepath.Base(filepath.Dir(path)) == "metrics" {
				for _, decl := range f.Decls {
					if gd, ok := decl.(*ast.GenDecl); ok && gd.Tok == token.CONST {
						for _, spec := range gd.Specs {
							vs := spec.(*ast.ValueSpec)
							for i, n := range vs.Names {
								if i < len(vs.Values) {
									if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
										names[n.Name], _ = strconv.Unquote(lit.Value)
									}
								}
							}
						}
					}
				}
			}
			files = append(files, f)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	found := map[string]map[string]bool{} // metric -> dimension sets seen
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !slices.Contains([]string{"Count", "Duration", "Put"}, sel.Sel.Name) {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "slog" {
				return true // slog.Duration("key", d) is a log attribute
			}
			var metric string
			switch a := call.Args[0].(type) {
			case *ast.SelectorExpr:
				if x, ok := a.X.(*ast.Ident); ok && x.Name == "metrics" {
					metric = names[a.Sel.Name]
				}
			case *ast.BasicLit:
				if a.Kind == token.STRING {
					metric, _ = strconv.Unquote(a.Value)
				}
			}
			if metric == "" {
				return true
			}
			dims := []string{"Function"}
			for _, arg := range call.Args[1:] {
				lit, ok := arg.(*ast.CompositeLit)
				if !ok {
					continue
				}
				for _, el := range lit.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" {
							if v, ok := kv.Value.(*ast.BasicLit); ok {
								s, _ := strconv.Unquote(v.Value)
								dims = append(dims, s)
							}
						}
					}
				}
			}
			if found[metric] == nil {
				found[metric] = map[string]bool{}
			}
			found[metric][strings.Join(slices.Sorted(slices.Values(dims)), ",")] = true
			return true
		})
	}
	if len(found) == 0 {
		t.Fatal("found no metrics calls; the scan is broken")
	}
	for metric, sets := range found {
		for s := range sets {
			if !slices.ContainsFunc(emitted[metric], func(e []string) bool { return strings.Join(e, ",") == s }) {
				t.Errorf("the code emits %s with {%s}; emitted lists %v", metric, s, emitted[metric])
			}
		}
	}
	for metric, sets := range emitted {
		for _, s := range sets {
			if !found[metric][strings.Join(s, ",")] {
				t.Errorf("emitted lists %s with %v, which no code emits (any more)", metric, s)
			}
		}
	}
}

// TestAwsSamIgnored: sam build writes the built functions and a resolved
// copy of the template to .aws-sam/; none of it belongs in the repository.
func TestAwsSamIgnored(t *testing.T) {
	t.Parallel()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git on PATH")
	}
	for _, path := range []string{".aws-sam/build/template.yaml", ".aws-sam/build.toml", ".aws-sam/cache/x"} {
		out, err := exec.Command(gitBin, "-C", "../../..", "check-ignore", "--no-index", "-v", path).CombinedOutput()
		if err != nil {
			t.Errorf("git does not ignore %s (.gitignore lacks /.aws-sam/): %v %s", path, err, out)
		}
	}
}
