package template

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/awslabs/goformation/v7/cloudformation/dynamodb"
	"github.com/awslabs/goformation/v7/cloudformation/sqs"

	"github.com/genjobs/genjobs/internal/store"
)

// ---------------------------------------------------------------- 1 wiring

func (c *checker) wiring() {
	present := set(c.ofType("AWS::Serverless::Function")...)
	for _, id := range sortedKeys(functions) {
		if !present[id] {
			c.add(RuleWiring, id, "missing: the template has no such AWS::Serverless::Function")
		}
	}
	for _, id := range c.ofType("AWS::Serverless::Function") {
		spec, ok := functions[id]
		if !ok {
			c.add(RuleWiring, id, "a function the check does not know: describe it in internal/template/spec.go (functions, allowed)")
			continue
		}
		c.wireEvents(id, spec)
		c.wireEnv(id)
		if role := str(c.props(id)["Role"]); role != GetAtt(spec.role, "Arn") {
			c.add(RuleWiring, id, "Role is %q, want !GetAtt %s.Arn (its own role)", role, spec.role)
		}
		c.wireLogGroup(id, spec)
		c.wireRecursion(id, spec)
	}
}

// wireRecursion: a function that sends to a queue it consumes forms a
// loop Lambda stops after 16 hops unless RecursiveLoop is Allow.
func (c *checker) wireRecursion(id string, spec function) {
	for _, q := range spec.consumes {
		if !slices.Contains(allowed[spec.role], grant{"sqs:SendMessage", queueArn(q)}) {
			continue
		}
		if v, _ := c.functionProp(id, "RecursiveLoop"); v != "Allow" {
			c.add(RuleWiring, id, "sends to %s, which invokes it: RecursiveLoop is %v, want Allow (Lambda stops such a chain after 16 hops)", q, v)
		}
	}
}

func (c *checker) wireEvents(id string, spec function) {
	var consumed, schedules []string
	for _, e := range c.events(id) {
		switch e.typ {
		case "SQS":
			q, ok := c.queueOf(e)
			if !ok {
				c.add(RuleWiring, id, "event %s: Queue %v is not !GetAtt <queue>.Arn of a queue in this template", e.name, e.props["Queue"])
				continue
			}
			consumed = append(consumed, q)
		case "Schedule":
			schedules = append(schedules, fmt.Sprint(e.props["Schedule"]))
		default:
			c.add(RuleWiring, id, "event %s: type %q; these functions are fed by SQS and Schedule events only", e.name, e.typ)
		}
	}
	for _, q := range spec.consumes {
		if n := count(consumed, q); n != 1 {
			c.add(RuleWiring, id, "has %d SQS events on %s, want exactly 1", n, q)
		}
	}
	for _, q := range consumed {
		if !slices.Contains(spec.consumes, q) {
			c.add(RuleWiring, id, "has an SQS event on %s, which it must not consume (it consumes %s)", q, strings.Join(spec.consumes, ", "))
		}
	}
	switch {
	case spec.schedule == "" && len(schedules) > 0:
		c.add(RuleWiring, id, "has a Schedule event; only the sweep runs on a schedule")
	case spec.schedule != "" && (len(schedules) != 1 || schedules[0] != spec.schedule):
		c.add(RuleWiring, id, "Schedule events %v, want exactly one %s", schedules, spec.schedule)
	}
}

// queueOf is the logical id of the queue an SQS event reads.
func (c *checker) queueOf(e event) (string, bool) {
	res, ok := unwrap(str(e.props["Queue"]), "GetAtt")
	if !ok {
		return "", false
	}
	q, attr, _ := strings.Cut(res, ".")
	return q, attr == "Arn" && str(c.resources[q]["Type"]) == "AWS::SQS::Queue"
}

// wireEnv: each resource-bound variable names the right resource. Which
// variables a function has is checked against its code by
// internal/samlocal's tests.
func (c *checker) wireEnv(id string) {
	env := c.env(id)
	for _, name := range sortedKeys(env) {
		if want, ok := envWiring[name]; ok && env[name] != want {
			c.add(RuleWiring, id, "%s is %v, want %s", name, env[name], want)
		}
	}
}

// wireLogGroup: the function has an explicit name, and its log group (the
// only one its role may write to) is /aws/lambda/<that name>.
func (c *checker) wireLogGroup(id string, spec function) {
	name, ok := unwrap(str(c.props(id)["FunctionName"]), "Sub")
	if !ok {
		c.add(RuleWiring, id, "FunctionName must be set (a !Sub on the stack name) so its log group can be created and named in its role")
		return
	}
	if str(c.resources[spec.logGroup]["Type"]) != "AWS::Logs::LogGroup" {
		c.add(RuleWiring, id, "its log group %s (AWS::Logs::LogGroup) is missing", spec.logGroup)
		return
	}
	if got, want := str(c.props(spec.logGroup)["LogGroupName"]), Sub("/aws/lambda/"+name); got != want {
		c.add(RuleWiring, spec.logGroup, "LogGroupName is %s, want %s (the function's default log group)", got, want)
	}
	if _, ok := num(c.props(spec.logGroup)["RetentionInDays"]); !ok {
		c.add(RuleWiring, spec.logGroup, "no RetentionInDays: logs would be kept forever")
	}
	if !slices.Contains(stringList(c.resources[id]["DependsOn"]), spec.logGroup) {
		c.add(RuleWiring, id, "DependsOn must name %s, so no invocation runs before its log group exists", spec.logGroup)
	}
}

// ------------------------------------------------------------------- 2 dlq

func (c *checker) dlq() {
	known := map[string]bool{}
	for _, q := range queues {
		known[q.main], known[q.dlq] = true, true
		main, okMain := c.queue(q.main)
		dlq, okDLQ := c.queue(q.dlq)
		for id, ok := range map[string]bool{q.main: okMain, q.dlq: okDLQ} {
			if _, exists := c.resources[id]; !ok && !exists {
				c.add(RuleDLQ, id, "missing: the template has no such AWS::SQS::Queue")
			}
		}
		if okMain {
			c.checkRedrive(q.main, q.dlq, main)
		}
		if okDLQ {
			if dlq.RedrivePolicy != nil {
				c.add(RuleDLQ, q.dlq, "a DLQ must not redrive anywhere: its messages wait for triage and an operator")
			}
			if got := intOr(dlq.MessageRetentionPeriod, 345600); got != dlqRetention {
				c.add(RuleDLQ, q.dlq, "MessageRetentionPeriod %d, want %d (14 days)", got, dlqRetention)
			}
		}
		if okMain && okDLQ && intOr(main.MessageRetentionPeriod, 345600) >= intOr(dlq.MessageRetentionPeriod, 345600) {
			c.add(RuleDLQ, q.dlq, "must keep messages longer than %s: a dead letter keeps its original enqueue time", q.main)
		}
	}
	for _, id := range c.ofType("AWS::SQS::Queue") {
		q, ok := c.queue(id)
		if !ok {
			continue
		}
		if !known[id] {
			c.add(RuleDLQ, id, "a queue the check does not know (queues in internal/template/spec.go)")
		}
		if (q.SqsManagedSseEnabled == nil || !*q.SqsManagedSseEnabled) && q.KmsMasterKeyId == nil {
			c.add(RuleDLQ, id, "not encrypted: set SqsManagedSseEnabled: true")
		}
	}
}

func (c *checker) checkRedrive(main, dlq string, q *sqs.Queue) {
	rp := mapOf(q.RedrivePolicy)
	if s, ok := q.RedrivePolicy.(string); ok { // CloudFormation also takes it as a JSON string
		_ = json.Unmarshal([]byte(s), &rp)
	}
	if rp == nil {
		c.add(RuleDLQ, main, "no RedrivePolicy: a message that keeps failing would cycle until its retention ends instead of reaching %s", dlq)
		return
	}
	if got, want := str(rp["deadLetterTargetArn"]), GetAtt(dlq, "Arn"); got != want {
		c.add(RuleDLQ, main, "RedrivePolicy deadLetterTargetArn is %q, want %s", got, want)
	}
	if n, ok := num(rp["maxReceiveCount"]); !ok || n != maxReceiveCount {
		c.add(RuleDLQ, main, "RedrivePolicy maxReceiveCount is %v, want %d", rp["maxReceiveCount"], maxReceiveCount)
	}
}

func (c *checker) queue(id string) (*sqs.Queue, bool) {
	q, ok := c.typed[id].(*sqs.Queue)
	return q, ok
}

func intOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// ------------------------------------------------------------ 3 visibility

func (c *checker) visibility() {
	for _, id := range c.sortedFunctions() {
		timeout := c.timeout(id)
		var consumed []string
		for _, e := range c.events(id) {
			if e.typ != "SQS" {
				continue
			}
			qid, ok := c.queueOf(e)
			if !ok {
				continue // a wiring problem already
			}
			consumed = append(consumed, qid)
			q, typed := c.queue(qid)
			if !typed {
				continue // a known-keys problem already
			}
			if vt := intOr(q.VisibilityTimeout, 30); vt < visibilityRatio*timeout {
				c.add(RuleVisibility, qid, "VisibilityTimeout %d < %d x %s Timeout %d = %d", vt, visibilityRatio, id, timeout, visibilityRatio*timeout)
			}
		}
		v, ok := c.env(id)["QUEUE_VISIBILITY_SECONDS"]
		if !ok {
			continue
		}
		if len(consumed) != 1 {
			c.add(RuleVisibility, id, "sets QUEUE_VISIBILITY_SECONDS but consumes %d queues", len(consumed))
			continue
		}
		q, typed := c.queue(consumed[0])
		if !typed {
			continue
		}
		if n, ok := num(v); !ok || n != intOr(q.VisibilityTimeout, 30) {
			c.add(RuleVisibility, id, "QUEUE_VISIBILITY_SECONDS is %v, want %s's VisibilityTimeout %d (the lease)", v, consumed[0], intOr(q.VisibilityTimeout, 30))
		}
	}
}

// -------------------------------------------------------- 4 batch failures

func (c *checker) batchFailures() {
	for _, id := range c.ofType("AWS::Serverless::Function") {
		for _, e := range c.events(id) {
			if e.typ != "SQS" {
				continue
			}
			where := id + " event " + e.name
			if !slices.Contains(stringList(e.props["FunctionResponseTypes"]), "ReportBatchItemFailures") {
				c.add(RuleBatchFailures, where, "no FunctionResponseTypes: [ReportBatchItemFailures]: one failed record would retry the whole batch, and the handlers' per-record failures would be ignored")
			}
			if n, ok := num(e.props["BatchSize"]); !ok || n < 1 || n > 10 {
				c.add(RuleBatchFailures, where, "BatchSize %v, want 1 to 10 (one batch must fit the function's deadline)", e.props["BatchSize"])
			}
			if n, ok := num(e.props["MaximumBatchingWindowInSeconds"]); !ok || n < 0 || n > 10 {
				c.add(RuleBatchFailures, where, "MaximumBatchingWindowInSeconds %v, want 0 to 10 (a long window delays every dispatch)", e.props["MaximumBatchingWindowInSeconds"])
			}
			if sc, ok := e.props["ScalingConfig"]; ok {
				if n, ok := num(mapOf(sc)["MaximumConcurrency"]); !ok || n < 2 || n > 1000 {
					c.add(RuleBatchFailures, where, "ScalingConfig MaximumConcurrency %v, want 2 to 1000", mapOf(sc)["MaximumConcurrency"])
				}
			}
		}
	}
}

// ------------------------------------------------------- 5 least privilege

func (c *checker) leastPrivilege() {
	for _, typ := range []string{"AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::IAM::RolePolicy", "AWS::IAM::User", "AWS::IAM::Group", "AWS::IAM::AccessKey"} {
		for _, id := range c.ofType(typ) {
			c.add(RuleLeastPrivilege, id, "%s is not allowed: grants live in the roles' inline policies, where the allow-list is checked", typ)
		}
	}
	for _, id := range c.ofType("AWS::Serverless::Function") {
		p := c.props(id)
		if _, ok := p["Policies"]; ok {
			c.add(RuleLeastPrivilege, id, "Policies: SAM policies are not allowed; the function's role holds its grants")
		}
		if _, ok := p["Role"]; !ok {
			c.add(RuleLeastPrivilege, id, "no Role: SAM would generate one with AWSLambdaBasicExecutionRole and AWSLambdaSQSQueueExecutionRole, whose statements use Resource \"*\"")
		}
	}
	for _, role := range c.ofType("AWS::IAM::Role") {
		want, ok := allowed[role]
		if !ok {
			c.add(RuleLeastPrivilege, role, "a role the check does not know: add its grants to allowed in internal/template/spec.go")
			continue
		}
		p := c.props(role)
		if len(stringList(p["ManagedPolicyArns"])) > 0 {
			c.add(RuleLeastPrivilege, role, "ManagedPolicyArns: managed policies are not allowed (their statements cannot be checked here; AWS's Lambda ones use Resource \"*\")")
		}
		c.checkTrust(role, mapOf(p["AssumeRolePolicyDocument"]))
		got := map[grant]bool{}
		for _, pol := range listOf(p["Policies"]) {
			for _, st := range statements(mapOf(pol)["PolicyDocument"]) {
				c.checkStatement(role, st, want, got)
			}
		}
		for _, g := range want {
			if !got[g] {
				c.add(RuleLeastPrivilege, role, "lacks %s on %s, which its function needs", g.action, g.resource)
			}
		}
	}
	for _, typ := range []string{"AWS::S3::BucketPolicy", "AWS::SQS::QueuePolicy", "AWS::SNS::TopicPolicy"} {
		for _, id := range c.ofType(typ) {
			for _, st := range statements(c.props(id)["PolicyDocument"]) {
				if str(st["Effect"]) != "Allow" {
					continue
				}
				if wildcard(stringList(st["Action"])) || slices.Contains(stringList(st["Resource"]), "*") || fmt.Sprint(st["Principal"]) == "*" {
					c.add(RuleLeastPrivilege, id, "an Allow statement with a wildcard action, resource or principal")
				}
			}
		}
	}
}

func (c *checker) checkStatement(role string, st map[string]any, want []grant, got map[grant]bool) {
	for _, k := range []string{"NotAction", "NotResource", "NotPrincipal"} {
		if _, ok := st[k]; ok {
			c.add(RuleLeastPrivilege, role, "%s is not allowed: it grants everything else", k)
		}
	}
	if str(st["Effect"]) != "Allow" {
		return // a Deny only narrows
	}
	actions, resources := stringList(st["Action"]), stringList(st["Resource"])
	for _, a := range actions {
		if strings.Contains(a, "*") {
			c.add(RuleLeastPrivilege, role, "wildcard action %q", a)
		}
	}
	for _, r := range resources {
		if r == "*" {
			c.add(RuleLeastPrivilege, role, "Resource \"*\" (no action here needs it)")
		}
	}
	for _, a := range actions {
		for _, r := range resources {
			g := grant{a, r}
			got[g] = true
			if !slices.Contains(want, g) && !strings.Contains(a, "*") && r != "*" {
				c.add(RuleLeastPrivilege, role, "grants %s on %s, which is not in its allow-list", a, r)
			}
		}
		if a == "iam:PassRole" && str(mapOf(mapOf(st["Condition"])["StringEquals"])["iam:PassedToService"]) == "" {
			c.add(RuleLeastPrivilege, role, "iam:PassRole without a StringEquals iam:PassedToService condition")
		}
	}
}

func (c *checker) checkTrust(role string, doc map[string]any) {
	sts := statements(doc)
	service := trustedService(role)
	if len(sts) != 1 {
		c.add(RuleLeastPrivilege, role, "trust policy has %d statements, want one allowing %s to assume it", len(sts), service)
		return
	}
	st := sts[0]
	principal := mapOf(st["Principal"])
	if str(st["Effect"]) != "Allow" || len(principal) != 1 || !slices.Equal(stringList(principal["Service"]), []string{service}) ||
		!slices.Equal(stringList(st["Action"]), []string{"sts:AssumeRole"}) {
		c.add(RuleLeastPrivilege, role, "trust policy must allow only %s to sts:AssumeRole", service)
	}
	if service == "scheduler.amazonaws.com" {
		if got := mapOf(mapOf(st["Condition"])["StringEquals"])["aws:SourceAccount"]; got != Ref("AWS::AccountId") {
			c.add(RuleLeastPrivilege, role, "trust policy lacks StringEquals aws:SourceAccount = !Ref AWS::AccountId (confused deputy)")
		}
	}
}

func statements(doc any) []map[string]any {
	var out []map[string]any
	switch s := mapOf(doc)["Statement"].(type) {
	case []any:
		for _, st := range s {
			out = append(out, mapOf(st))
		}
	case map[string]any:
		out = append(out, s)
	}
	return out
}

func wildcard(actions []string) bool {
	return slices.ContainsFunc(actions, func(a string) bool { return strings.Contains(a, "*") })
}

func listOf(v any) []any {
	l, _ := v.([]any)
	return l
}

// ------------------------------------------------------------ 6 known keys

func (c *checker) knownKeys() {
	c.unknownKeys("template", c.raw, templateKeys)
	globals := mapOf(c.raw["Globals"])
	c.unknownKeys("Globals", globals, globalsSections)
	c.unknownKeys("Globals.Function", c.globalFunction, globalFunctionKeys)
	c.unknownKeys("Globals.Function.LoggingConfig", mapOf(c.globalFunction["LoggingConfig"]), loggingConfigKeys)
	c.unknownKeys("Globals.Function.Environment", mapOf(c.globalFunction["Environment"]), environmentKeys)
	for _, name := range sortedKeys(mapOf(c.raw["Parameters"])) {
		c.unknownKeys("Parameters."+name, mapOf(mapOf(c.raw["Parameters"])[name]), parameterKeys)
	}
	for _, name := range sortedKeys(mapOf(c.raw["Outputs"])) {
		c.unknownKeys("Outputs."+name, mapOf(mapOf(c.raw["Outputs"])[name]), outputKeys)
	}
	for _, id := range c.ofType("AWS::Serverless::Function") {
		c.unknownKeys(id+" Metadata", mapOf(c.resources[id]["Metadata"]), functionMetadataKeys)
		for name, v := range mapOf(c.props(id)["Events"]) {
			where := id + " event " + name
			e := mapOf(v)
			c.unknownKeys(where, e, eventKeys)
			known, ok := eventPropertyKeys[str(e["Type"])]
			if !ok {
				c.add(RuleKnownKeys, where, "event type %q is not one this check knows (SQS, Schedule)", e["Type"])
				continue
			}
			c.unknownKeys(where+" Properties", mapOf(e["Properties"]), known)
			if sc, ok := mapOf(e["Properties"])["ScalingConfig"]; ok {
				c.unknownKeys(where+" ScalingConfig", mapOf(sc), scalingConfigKeys)
			}
		}
	}
}

func (c *checker) unknownKeys(where string, m map[string]any, known map[string]bool) {
	for _, k := range sortedKeys(m) {
		if !known[k] {
			c.add(RuleKnownKeys, where, "unknown key %q", k)
		}
	}
}

// ----------------------------------------------------------------- 7 table

func (c *checker) table() {
	for _, id := range c.ofType("AWS::DynamoDB::Table") {
		if id != tableID {
			c.add(RuleTable, id, "a second table: every record lives in %s (store's single-table design)", tableID)
		}
	}
	t, ok := c.typed[tableID].(*dynamodb.Table)
	if !ok {
		if _, exists := c.resources[tableID]; !exists {
			c.add(RuleTable, tableID, "missing: the template has no such AWS::DynamoDB::Table")
		}
		return
	}
	def := store.TableDefinition("check")
	if got := deref(t.BillingMode); got != string(def.BillingMode) {
		c.add(RuleTable, tableID, "BillingMode %q, want %s", got, def.BillingMode)
	}
	if t.ProvisionedThroughput != nil {
		c.add(RuleTable, tableID, "ProvisionedThroughput set on an on-demand table")
	}
	wantAttrs := map[string]string{}
	for _, a := range def.AttributeDefinitions {
		wantAttrs[deref(a.AttributeName)] = string(a.AttributeType)
	}
	gotAttrs := map[string]string{}
	for _, a := range t.AttributeDefinitions {
		gotAttrs[a.AttributeName] = a.AttributeType
	}
	if !mapsEqual(gotAttrs, wantAttrs) {
		c.add(RuleTable, tableID, "AttributeDefinitions %v, want %v", gotAttrs, wantAttrs)
	}
	var wantKeys []string
	for _, k := range def.KeySchema {
		wantKeys = append(wantKeys, deref(k.AttributeName)+" "+string(k.KeyType))
	}
	if got := keySchema(t.KeySchema); !slices.Equal(got, wantKeys) {
		c.add(RuleTable, tableID, "KeySchema %v, want %v", got, wantKeys)
	}
	if len(t.LocalSecondaryIndexes) > 0 {
		c.add(RuleTable, tableID, "LocalSecondaryIndexes: store defines none")
	}
	gsis := map[string]dynamodb.Table_GlobalSecondaryIndex{}
	for _, g := range t.GlobalSecondaryIndexes {
		gsis[g.IndexName] = g
	}
	if len(gsis) != len(def.GlobalSecondaryIndexes) {
		c.add(RuleTable, tableID, "%d global secondary indexes, want %d", len(gsis), len(def.GlobalSecondaryIndexes))
	}
	for _, want := range def.GlobalSecondaryIndexes {
		name := deref(want.IndexName)
		g, ok := gsis[name]
		if !ok {
			c.add(RuleTable, tableID, "no global secondary index %q (the sweep's and the review list's index)", name)
			continue
		}
		var wantKeys []string
		for _, k := range want.KeySchema {
			wantKeys = append(wantKeys, deref(k.AttributeName)+" "+string(k.KeyType))
		}
		if got := keySchema(g.KeySchema); !slices.Equal(got, wantKeys) {
			c.add(RuleTable, tableID, "index %s KeySchema %v, want %v", name, got, wantKeys)
		}
		if got := deref(g.Projection.ProjectionType); got != string(want.Projection.ProjectionType) {
			c.add(RuleTable, tableID, "index %s ProjectionType %q, want %s", name, got, want.Projection.ProjectionType)
		}
	}
	if p := t.PointInTimeRecoverySpecification; p == nil || p.PointInTimeRecoveryEnabled == nil || !*p.PointInTimeRecoveryEnabled {
		c.add(RuleTable, tableID, "point-in-time recovery is off: set PointInTimeRecoverySpecification.PointInTimeRecoveryEnabled: true")
	}
	if t.SSESpecification == nil || !t.SSESpecification.SSEEnabled {
		c.add(RuleTable, tableID, "SSESpecification.SSEEnabled is not true")
	}
}

func keySchema(ks []dynamodb.Table_KeySchema) []string {
	var out []string
	for _, k := range ks {
		out = append(out, k.AttributeName+" "+k.KeyType)
	}
	return out
}

func deref[T ~string](p *T) string {
	if p == nil {
		return ""
	}
	return string(*p)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// ----------------------------------------------------------------- 8 build

// buildLine is what every build target must run, besides its package.
var buildLine = []string{"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0", "go build", "-tags lambda.norpc", "-o $(ARTIFACTS_DIR)/bootstrap"}

func (c *checker) build() {
	makefiles := map[string]*makefile{}
	for _, id := range c.sortedFunctions() {
		spec := functions[id]
		for key, want := range map[string]string{"Runtime": "provided.al2023", "Handler": "bootstrap"} {
			if v, _ := c.functionProp(id, key); v != want {
				c.add(RuleBuild, id, "%s is %v, want %s", key, v, want)
			}
		}
		if v, _ := c.functionProp(id, "Architectures"); !slices.Equal(stringList(v), []string{"arm64"}) {
			c.add(RuleBuild, id, "Architectures %v, want [arm64] (the Makefile builds GOARCH=arm64)", v)
		}
		if v, ok := c.functionProp(id, "PackageType"); ok && v != "Zip" {
			c.add(RuleBuild, id, "PackageType %v, want Zip", v)
		}
		lc, _ := c.functionProp(id, "LoggingConfig")
		if f := mapOf(lc)["LogFormat"]; f != "JSON" {
			c.add(RuleBuild, id, "LoggingConfig LogFormat %v, want JSON (the functions log through the runtime's JSON logger)", f)
		}
		for _, k := range []string{"ApplicationLogLevel", "SystemLogLevel"} {
			if v, ok := mapOf(lc)[k]; ok && !logLevels[str(v)] {
				c.add(RuleBuild, id, "LoggingConfig %s %v is not a Lambda log level", k, v)
			}
		}
		if m := str(mapOf(c.resources[id]["Metadata"])["BuildMethod"]); m != "makefile" {
			c.add(RuleBuild, id, "Metadata BuildMethod %q, want makefile", m)
			continue
		}
		path := c.opts.Makefile
		if path == "" {
			codeURI, _ := c.functionProp(id, "CodeUri")
			if str(codeURI) == "" {
				c.add(RuleBuild, id, "CodeUri must be the directory holding the Makefile")
				continue
			}
			path = filepath.Join(filepath.Dir(c.path), str(codeURI), "Makefile")
		}
		mk, ok := makefiles[path]
		if !ok {
			data, err := os.ReadFile(path)
			if err != nil {
				c.add(RuleBuild, "Makefile", "%v", err)
			}
			mk = parseMakefile(string(data))
			makefiles[path] = mk
		}
		c.checkTarget(id, spec.dir, mk)
	}
}

func (c *checker) checkTarget(id, dir string, mk *makefile) {
	target := "build-" + id
	recipe, ok := mk.rules[target]
	if !ok {
		c.add(RuleBuild, "Makefile", "no %s target: sam build (BuildMethod: makefile) runs `make %s`", target, target)
		return
	}
	pkg := regexp.MustCompile(`(^|\s)\./functions/` + regexp.QuoteMeta(dir) + `/?(\s|$)`)
	for _, line := range recipe {
		line = mk.expand(line)
		if !pkg.MatchString(line) {
			continue
		}
		for _, part := range buildLine {
			if !strings.Contains(line, part) {
				c.add(RuleBuild, "Makefile", "%s builds ./functions/%s without %q", target, dir, part)
			}
		}
		return
	}
	c.add(RuleBuild, "Makefile", "%s does not build ./functions/%s", target, dir)
}

// ----------------------------------------------------------- 9 secrets/env

var secretName = regexp.MustCompile(`(?i)key|secret|passw|token|credential`)

func (c *checker) secretsEnv() {
	params := mapOf(c.raw["Parameters"])
	for _, name := range sortedKeys(params) {
		if !secretName.MatchString(name) {
			continue
		}
		p := mapOf(params[name])
		if strings.HasSuffix(name, "Arn") && strings.HasPrefix(str(p["AllowedPattern"]), "^arn:") {
			continue // a reference to a secret, not its value
		}
		c.add(RuleSecretsEnv, "Parameters."+name, "looks like a secret passed as a parameter (visible in the console, events and change sets); the Genace key lives in Secrets Manager only")
	}
	for _, id := range c.ofType("AWS::SecretsManager::Secret") {
		if _, ok := c.props(id)["SecretString"]; ok {
			c.add(RuleSecretsEnv, id, "SecretString puts the secret's value in the template")
		}
	}
	allowedEnv := set(configEnv...)
	for _, id := range c.ofType("AWS::Serverless::Function") {
		env := c.env(id)
		for _, name := range sortedKeys(env) {
			switch {
			case slices.Contains(localOnlyEnv, name):
				c.add(RuleSecretsEnv, id, "%s puts the API key in plain text (local runs only); set GENACE_API_KEY_SECRET_ID", name)
			case strings.HasPrefix(name, localEndpointPrefix):
				if env[name] != "" {
					c.add(RuleSecretsEnv, id, "%s is %v: it must be empty in the template (local runs set it; deployed, the SDK uses AWS's endpoints)", name, env[name])
				}
			case !allowedEnv[name]:
				c.add(RuleSecretsEnv, id, "%s is not a setting the code reads (internal/config)", name)
			}
		}
		if v, ok := env["GENACE_API_KEY_SECRET_ID"]; ok {
			ref, isRef := unwrap(str(v), "Ref")
			if !isRef || str(c.resources[ref]["Type"]) != "AWS::SecretsManager::Secret" {
				c.add(RuleSecretsEnv, id, "GENACE_API_KEY_SECRET_ID is %v, want !Ref of an AWS::SecretsManager::Secret", v)
			}
		}
	}
}

// --------------------------------------------------------- 10 observability

// metricRef is one metric a query or widget names.
type metricRef struct {
	namespace, metric string
	// dims is the exact dimension set (sorted) when the query names one.
	dims []string
	// exact reports whether dims is an exact set (SCHEMA, SEARCH schema,
	// or a metric alarm's Dimensions); a namespace-wide query is not.
	exact bool
}

var (
	searchRe = regexp.MustCompile(`SEARCH\(\s*'\{([^}]*)\}[^']*MetricName\s*=\s*"([^"]+)"`)
	insight  = regexp.MustCompile(`(?i)SELECT\s+\w+\(\s*"?([\w.-]+)"?\s*\)\s+FROM\s+(?:SCHEMA\(([^)]*)\)|"?([\w/.-]+)"?)`)
)

// queryRefs reads the metrics a SEARCH or Metrics Insights expression names.
func queryRefs(expr string) []metricRef {
	var out []metricRef
	for _, m := range searchRe.FindAllStringSubmatch(expr, -1) {
		schema := splitNames(m[1])
		if len(schema) > 0 {
			out = append(out, metricRef{namespace: schema[0], metric: m[2], dims: sorted(schema[1:]), exact: true})
		}
	}
	for _, m := range insight.FindAllStringSubmatch(expr, -1) {
		if m[2] != "" {
			schema := splitNames(m[2])
			if len(schema) > 0 {
				out = append(out, metricRef{namespace: schema[0], metric: m[1], dims: sorted(schema[1:]), exact: true})
			}
			continue
		}
		out = append(out, metricRef{namespace: m[3], metric: m[1]})
	}
	return out
}

func splitNames(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.Trim(strings.TrimSpace(p), `"`); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// checkRef reports a genjobs metric that the code does not emit with the
// dimension set named.
func (c *checker) checkRef(where string, r metricRef) {
	if r.namespace != metricsNS {
		return
	}
	sets, ok := emitted[r.metric]
	if !ok {
		c.add(RuleObservability, where, "genjobs emits no metric %q", r.metric)
		return
	}
	if r.exact && !slices.ContainsFunc(sets, func(s []string) bool { return slices.Equal(s, r.dims) }) {
		c.add(RuleObservability, where, "%s is emitted with dimensions %v, not %v: an exact dimension set that is never emitted has no data", r.metric, sets, r.dims)
	}
}

func (c *checker) observability() {
	alarmed := map[string]bool{} // genjobs metrics with an alarm
	sqsAlarms := map[string]bool{}
	for _, id := range c.ofType("AWS::CloudWatch::Alarm") {
		p := c.props(id)
		if len(stringList(p["AlarmActions"])) == 0 {
			c.add(RuleObservability, id, "no AlarmActions: nobody would hear of it")
		}
		var refs []metricRef
		if metric := str(p["MetricName"]); metric != "" {
			var dims []string
			values := map[string]string{}
			for _, d := range listOf(p["Dimensions"]) {
				dims = append(dims, str(mapOf(d)["Name"]))
				values[str(mapOf(d)["Name"])] = str(mapOf(d)["Value"])
			}
			refs = append(refs, metricRef{namespace: str(p["Namespace"]), metric: metric, dims: sorted(dims), exact: true})
			if str(p["Namespace"]) == "AWS/SQS" {
				sqsAlarms[metric+" "+values["QueueName"]+" "+str(p["ComparisonOperator"])+" "+fmt.Sprint(p["Threshold"])] = true
			}
			if fn, ok := values["Function"]; ok && str(p["Namespace"]) == metricsNS && !slices.ContainsFunc(sortedKeys(functions), func(k string) bool { return functions[k].dir == fn }) {
				c.add(RuleObservability, id, "Function dimension %q is no function's name", fn)
			}
		}
		for _, q := range listOf(p["Metrics"]) {
			refs = append(refs, queryRefs(str(mapOf(q)["Expression"]))...)
		}
		for _, r := range refs {
			c.checkRef(id, r)
			if r.namespace == metricsNS {
				alarmed[r.metric] = true
			}
		}
	}
	for _, q := range queues {
		if !sqsAlarms["ApproximateNumberOfMessagesVisible "+GetAtt(q.dlq, "QueueName")+" GreaterThanThreshold 0"] {
			c.add(RuleObservability, q.dlq, "no alarm on ApproximateNumberOfMessagesVisible > 0 for it (QueueName !GetAtt %s.QueueName)", q.dlq)
		}
		found := false
		for k := range sqsAlarms {
			found = found || strings.HasPrefix(k, "ApproximateAgeOfOldestMessage "+GetAtt(q.main, "QueueName")+" ")
		}
		if !found {
			c.add(RuleObservability, q.main, "no alarm on ApproximateAgeOfOldestMessage for it")
		}
	}
	for _, m := range []string{"LeaseRenewalFailures", "UncertainSubmissions"} {
		if !alarmed[m] {
			c.add(RuleObservability, "alarms", "no alarm on %s", m)
		}
	}
	c.dashboard()
}

var subVar = regexp.MustCompile(`\$\{[^}]*\}`)

func (c *checker) dashboard() {
	ids := c.ofType("AWS::CloudWatch::Dashboard")
	if len(ids) != 1 {
		c.add(RuleObservability, "dashboard", "%d AWS::CloudWatch::Dashboard resources, want 1", len(ids))
		return
	}
	id := ids[0]
	body, ok := unwrap(str(c.props(id)["DashboardBody"]), "Sub")
	if !ok {
		c.add(RuleObservability, id, "DashboardBody must be a !Sub (queue names and region come from the stack)")
		return
	}
	var dash struct {
		Widgets []struct {
			Type       string         `json:"type"`
			Properties map[string]any `json:"properties"`
		} `json:"widgets"`
	}
	if err := json.Unmarshal([]byte(subVar.ReplaceAllString(body, "x")), &dash); err != nil {
		c.add(RuleObservability, id, "DashboardBody is not valid JSON: %v", err)
		return
	}
	note := false
	holders := map[string]int{} // seed measure -> widgets showing it
	postsByOutcome := false
	for i, w := range dash.Widgets {
		where := fmt.Sprintf("%s widget %d", id, i)
		if w.Type == "text" && strings.Contains(str(w.Properties["markdown"]), "Genace") {
			note = true
		}
		var shown []string
		for _, entry := range listOf(w.Properties["metrics"]) {
			for _, r := range widgetRefs(listOf(entry)) {
				c.checkRef(where, r)
				shown = append(shown, r.metric)
				if r.metric == "PostOutcomes" && slices.Contains(r.dims, "Outcome") {
					postsByOutcome = true
				}
			}
		}
		var seeds []string
		for _, m := range seedMeasures {
			if slices.Contains(shown, m) {
				seeds = append(seeds, m)
				holders[m]++
			}
		}
		if len(seeds) > 1 {
			c.add(RuleObservability, where, "mixes %v: the seed keeps these measures apart (they tell backlog from workers, network waits and rendering capacity)", seeds)
		}
	}
	for _, m := range seedMeasures {
		if holders[m] == 0 {
			c.add(RuleObservability, id, "no widget shows %s", m)
		}
	}
	if !postsByOutcome {
		c.add(RuleObservability, id, "no widget shows PostOutcomes by Outcome")
	}
	for _, q := range queues {
		if !strings.Contains(body, `"ApproximateNumberOfMessagesVisible", "QueueName", "${`+q.dlq+`.QueueName}"`) {
			c.add(RuleObservability, id, "no widget shows %s's depth (ApproximateNumberOfMessagesVisible)", q.dlq)
		}
	}
	if !note {
		c.add(RuleObservability, id, "no text widget noting that phases are genjobs' own, not Genace's states")
	}
}

// widgetRefs reads one entry of a metric widget's "metrics" list: either
// [{"expression": ...}] or [namespace, metric, dim, value, ..., {options}].
func widgetRefs(entry []any) []metricRef {
	if len(entry) == 0 {
		return nil
	}
	if m, ok := entry[0].(map[string]any); ok {
		return queryRefs(str(m["expression"]))
	}
	var names []string
	for _, e := range entry {
		if s, ok := e.(string); ok {
			names = append(names, s)
		}
	}
	if len(names) < 2 {
		return nil
	}
	var dims []string
	for i := 2; i+1 < len(names); i += 2 {
		dims = append(dims, names[i])
	}
	return []metricRef{{namespace: names[0], metric: names[1], dims: sorted(dims), exact: true}}
}

// ------------------------------------------------------------------ helpers

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func count(list []string, s string) int {
	n := 0
	for _, e := range list {
		if e == s {
			n++
		}
	}
	return n
}
