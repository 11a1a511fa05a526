package templatecheck

import (
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/dev/samlocal"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/store/dynamo"
)

// topology: the queues, event sources, timeouts and sweep thresholds are
// the ones internal/dev/topology declares, which the local tooling wires
// the stack from.
func (c *checker) topology() {
	for _, err := range topology.Stack.Check(c.tmpl) {
		c.add(RuleTopology, "topology", "%v", err)
	}
}

func (c *checker) wiring() {
	present := c.ofType("AWS::Serverless::Function")
	for _, id := range slices.Sorted(maps.Keys(functions)) {
		if !slices.Contains(present, id) {
			c.add(RuleWiring, id, "missing: the template has no such AWS::Serverless::Function")
		}
	}
	for _, id := range c.ofType("AWS::Serverless::Function") {
		spec, ok := functions[id]
		if !ok {
			c.add(RuleWiring, id, "a function the check does not know: describe it in internal/dev/templatecheck/spec.go (functions, allowed)")
			continue
		}
		c.wireEnv(id)
		if role := str(c.props(id)["Role"]); role != GetAtt(spec.role, "Arn") {
			c.add(RuleWiring, id, "Role is %q, want !GetAtt %s.Arn (its own role; without one SAM generates a role whose managed policies use Resource \"*\")", role, spec.role)
		}
		c.wireLogGroup(id, spec)
		c.wireRecursion(id, spec)
	}
}

// wireRecursion: a function that sends to a queue it consumes forms a
// loop Lambda stops after 16 hops unless RecursiveLoop is Allow; any
// other function keeps Lambda's detection (an accidental loop stops).
func (c *checker) wireRecursion(id string, spec function) {
	v, _ := c.functionProp(id, "RecursiveLoop")
	loop := ""
	for _, q := range spec.consumes {
		if slices.Contains(allowed[spec.role], grant{"sqs:SendMessage", queueArn(q)}) {
			loop = q
		}
	}
	switch {
	case loop != "" && v != "Allow":
		c.add(RuleWiring, id, "sends to %s, which invokes it: RecursiveLoop is %v, want Allow (Lambda stops such a chain after 16 hops)", loop, v)
	case loop == "" && v == "Allow":
		c.add(RuleWiring, id, "RecursiveLoop Allow, but it sends to no queue that invokes it: keep Lambda's loop detection (set it on the looping functions, not in Globals)")
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
// internal/dev/samlocal's tests.
func (c *checker) wireEnv(id string) {
	env := c.env(id)
	for _, name := range slices.Sorted(maps.Keys(env)) {
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
	if _, ok := c.props(spec.logGroup)["RetentionInDays"]; !ok {
		c.add(RuleWiring, spec.logGroup, "no RetentionInDays: logs would be kept forever")
	}
	if !slices.Contains(stringList(c.resources[id]["DependsOn"]), spec.logGroup) {
		c.add(RuleWiring, id, "DependsOn must name %s, so no invocation runs before its log group exists", spec.logGroup)
	}
}

func (c *checker) dlq() {
	known := map[string]bool{sweepFailuresID: true}
	for _, q := range queues {
		known[q.main], known[q.dlq] = true, true
		if c.isQueue(q.dlq) {
			c.checkDeadLetterQueue(q.dlq)
			c.checkRedriveAllow(q.main, q.dlq)
		}
		if c.isQueue(q.main) && c.isQueue(q.dlq) && c.retention(q.main) >= c.retention(q.dlq) {
			c.add(RuleDLQ, q.dlq, "must keep messages longer than %s: a dead letter keeps its original enqueue time", q.main)
		}
	}
	if c.isQueue(sweepFailuresID) {
		c.checkDeadLetterQueue(sweepFailuresID)
	}
	for _, id := range c.ofType("AWS::SQS::Queue") {
		if !known[id] {
			c.add(RuleDLQ, id, "a queue the check does not know (queues in internal/dev/templatecheck/spec.go)")
		}
		p := c.props(id)
		if !isTrue(p["SqsManagedSseEnabled"]) && p["KmsMasterKeyId"] == nil {
			c.add(RuleDLQ, id, "not encrypted: set SqsManagedSseEnabled: true")
		}
	}
}

// checkDeadLetterQueue: messages wait there for triage and an operator,
// and go nowhere else (the topology states how long).
func (c *checker) checkDeadLetterQueue(id string) {
	if c.props(id)["RedrivePolicy"] != nil {
		c.add(RuleDLQ, id, "a DLQ must not redrive anywhere: its messages wait for triage and an operator")
	}
}

func (c *checker) isQueue(id string) bool { return str(c.resources[id]["Type"]) == "AWS::SQS::Queue" }

// retention is a queue's MessageRetentionPeriod (SQS's default 4 days).
func (c *checker) retention(id string) int {
	return numOr(c.props(id)["MessageRetentionPeriod"], 345600)
}

// visibilityTimeout is a queue's VisibilityTimeout (SQS's default 30 s).
func (c *checker) visibilityTimeout(id string) int {
	return numOr(c.props(id)["VisibilityTimeout"], 30)
}

func numOr(v any, def int) int {
	if n, ok := num(v); ok {
		return n
	}
	return def
}

// jsonMap reads a policy that CloudFormation takes as an object or as a
// JSON string (RedrivePolicy, RedriveAllowPolicy).
func jsonMap(v any) map[string]any {
	if s, ok := v.(string); ok {
		var m map[string]any
		_ = json.Unmarshal([]byte(s), &m)
		return m
	}
	return mapOf(v)
}

// checkRedriveAllow: only its own main queue may dead-letter into a DLQ,
// so triage never reads another queue's failures as this one's. The main
// queue's ARN cannot be a !GetAtt (the main queue's RedrivePolicy already
// names the DLQ: a cycle), so the main queue has a QueueName and the ARN
// is built from it.
func (c *checker) checkRedriveAllow(main, dlq string) {
	rap := jsonMap(c.props(dlq)["RedriveAllowPolicy"])
	name, named := unwrap(str(c.props(main)["QueueName"]), "Sub")
	want := Sub("arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:" + name)
	switch {
	case rap == nil:
		c.add(RuleDLQ, dlq, "no RedriveAllowPolicy: any queue in the account could dead-letter into it (want byQueue, %s only)", main)
	case str(rap["redrivePermission"]) != "byQueue":
		c.add(RuleDLQ, dlq, "RedriveAllowPolicy redrivePermission %v, want byQueue with %s only", rap["redrivePermission"], main)
	case !named:
		c.add(RuleDLQ, main, "needs a QueueName (a !Sub on the stack name) so %s's RedriveAllowPolicy can name its ARN", dlq)
	case !slices.Equal(stringList(rap["sourceQueueArns"]), []string{want}):
		c.add(RuleDLQ, dlq, "RedriveAllowPolicy sourceQueueArns %v, want [%s] (%s's ARN)", rap["sourceQueueArns"], want, main)
	}
}

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
			if vt := c.visibilityTimeout(qid); vt < visibilityRatio*timeout {
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
		if n, ok := num(v); !ok || n != c.visibilityTimeout(consumed[0]) {
			c.add(RuleVisibility, id, "QUEUE_VISIBILITY_SECONDS is %v, want %s's VisibilityTimeout %d (the lease)", v, consumed[0], c.visibilityTimeout(consumed[0]))
		}
	}
}

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
			if n, ok := c.num(e.props["BatchSize"]); !ok || n < 1 || n > 10 {
				c.add(RuleBatchFailures, where, "BatchSize %v, want 1 to 10 (one batch must fit the function's deadline)", e.props["BatchSize"])
			}
			if n, ok := num(e.props["MaximumBatchingWindowInSeconds"]); !ok || n < 0 || n > 10 {
				c.add(RuleBatchFailures, where, "MaximumBatchingWindowInSeconds %v, want 0 to 10 (a long window delays every dispatch)", e.props["MaximumBatchingWindowInSeconds"])
			}
		}
	}
}

func (c *checker) leastPrivilege() {
	for _, typ := range []string{"AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::IAM::RolePolicy", "AWS::IAM::User", "AWS::IAM::Group", "AWS::IAM::AccessKey"} {
		for _, id := range c.ofType(typ) {
			c.add(RuleLeastPrivilege, id, "%s is not allowed: grants live in the roles' inline policies, where the allow-list is checked", typ)
		}
	}
	for _, id := range c.ofType("AWS::Serverless::Function") {
		if _, ok := c.props(id)["Policies"]; ok {
			c.add(RuleLeastPrivilege, id, "Policies: SAM policies are not allowed; the function's role holds its grants")
		}
		url, ok := c.props(id)["FunctionUrlConfig"]
		switch auth := str(mapOf(url)["AuthType"]); {
		case ok && auth != "AWS_IAM":
			c.add(RuleLeastPrivilege, id, "FunctionUrlConfig AuthType %q, want AWS_IAM: anyone could call it, and the caller it reads would be nobody's", auth)
		case !ok && functions[id].url:
			c.add(RuleLeastPrivilege, id, "no FunctionUrlConfig (AuthType AWS_IAM): its API has no way in")
		}
	}
	for _, role := range c.ofType("AWS::IAM::Role") {
		want, ok := allowed[role]
		if !ok {
			c.add(RuleLeastPrivilege, role, "a role the check does not know: add its grants to allowed in internal/dev/templatecheck/spec.go")
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
				if slices.ContainsFunc(stringList(st["Action"]), func(a string) bool { return strings.Contains(a, "*") }) || slices.Contains(stringList(st["Resource"]), "*") || fmt.Sprint(st["Principal"]) == "*" {
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
		// Confused deputy: only this account's schedules, in this group.
		eq := mapOf(mapOf(st["Condition"])["StringEquals"])
		if got := eq["aws:SourceAccount"]; got != Ref("AWS::AccountId") {
			c.add(RuleLeastPrivilege, role, "trust policy lacks StringEquals aws:SourceAccount = !Ref AWS::AccountId (confused deputy)")
		}
		if got := eq["aws:SourceArn"]; got != GetAtt(groupID, "Arn") {
			c.add(RuleLeastPrivilege, role, "trust policy's StringEquals aws:SourceArn is %v, want !GetAtt %s.Arn (only genjobs' schedule group may assume it)", got, groupID)
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

func listOf(v any) []any {
	l, _ := v.([]any)
	return l
}

func (c *checker) table() {
	for _, id := range c.ofType("AWS::DynamoDB::Table") {
		if id != tableID {
			c.add(RuleTable, id, "a second table: every record lives in %s (store's single-table design)", tableID)
		}
	}
	if str(c.resources[tableID]["Type"]) != "AWS::DynamoDB::Table" {
		c.add(RuleTable, tableID, "missing: the template has no such AWS::DynamoDB::Table")
		return
	}
	p := c.props(tableID)
	def := dynamo.TableDefinition("check")
	if got := str(p["BillingMode"]); got != string(def.BillingMode) {
		c.add(RuleTable, tableID, "BillingMode %q, want %s", got, def.BillingMode)
	}
	wantAttrs, gotAttrs := map[string]string{}, map[string]string{}
	for _, a := range def.AttributeDefinitions {
		wantAttrs[aws.ToString(a.AttributeName)] = string(a.AttributeType)
	}
	for _, a := range listOf(p["AttributeDefinitions"]) {
		gotAttrs[str(mapOf(a)["AttributeName"])] = str(mapOf(a)["AttributeType"])
	}
	if !maps.Equal(gotAttrs, wantAttrs) {
		c.add(RuleTable, tableID, "AttributeDefinitions %v, want %v", gotAttrs, wantAttrs)
	}
	if got, wantKeys := keySchema(p["KeySchema"]), codeKeySchema(def.KeySchema); !slices.Equal(got, wantKeys) {
		c.add(RuleTable, tableID, "KeySchema %v, want %v", got, wantKeys)
	}
	if p["LocalSecondaryIndexes"] != nil {
		c.add(RuleTable, tableID, "LocalSecondaryIndexes: store defines none")
	}
	gsis := map[string]map[string]any{}
	for _, g := range listOf(p["GlobalSecondaryIndexes"]) {
		gsis[str(mapOf(g)["IndexName"])] = mapOf(g)
	}
	if len(gsis) != len(def.GlobalSecondaryIndexes) {
		c.add(RuleTable, tableID, "%d global secondary indexes, want %d", len(gsis), len(def.GlobalSecondaryIndexes))
	}
	for _, want := range def.GlobalSecondaryIndexes {
		name := aws.ToString(want.IndexName)
		g, ok := gsis[name]
		if !ok {
			c.add(RuleTable, tableID, "no global secondary index %q (the sweep's and the review list's index)", name)
			continue
		}
		if got, wantKeys := keySchema(g["KeySchema"]), codeKeySchema(want.KeySchema); !slices.Equal(got, wantKeys) {
			c.add(RuleTable, tableID, "index %s KeySchema %v, want %v", name, got, wantKeys)
		}
		if got := str(mapOf(g["Projection"])["ProjectionType"]); got != string(want.Projection.ProjectionType) {
			c.add(RuleTable, tableID, "index %s ProjectionType %q, want %s", name, got, want.Projection.ProjectionType)
		}
	}
	if !isTrue(mapOf(p["PointInTimeRecoverySpecification"])["PointInTimeRecoveryEnabled"]) {
		c.add(RuleTable, tableID, "point-in-time recovery is off: set PointInTimeRecoverySpecification.PointInTimeRecoveryEnabled: true")
	}
	if !isTrue(mapOf(p["SSESpecification"])["SSEEnabled"]) {
		c.add(RuleTable, tableID, "SSESpecification.SSEEnabled is not true")
	}
	if !isTrue(p["DeletionProtectionEnabled"]) {
		c.add(RuleTable, tableID, "DeletionProtectionEnabled is not true: one mistaken delete would take every operation record and job id with it")
	}
	ttl := mapOf(p["TimeToLiveSpecification"])
	if str(ttl["AttributeName"]) != dynamo.AttrExpiresAt || !isTrue(ttl["Enabled"]) {
		c.add(RuleTable, tableID, "TimeToLiveSpecification %v, want AttributeName %s (dynamo.AttrExpiresAt, which the store writes on finished items), Enabled: true", ttl, dynamo.AttrExpiresAt)
	}
	c.retentionWiring()
}

// retentionWiring: the retention parameters default to what config uses
// when a variable is unset (the operator CLI, local runs), and every
// function that finishes records or closes reviews gets both.
func (c *checker) retentionWiring() {
	params := mapOf(c.raw["Parameters"])
	for _, name := range slices.Sorted(maps.Keys(retentionParams)) {
		want := retentionParams[name]
		p, ok := params[name]
		if !ok {
			c.add(RuleTable, "Parameters."+name, "missing: %s comes from it", want.env)
			continue
		}
		if n, ok := num(mapOf(p)["Default"]); !ok || n != want.def {
			c.add(RuleTable, "Parameters."+name, "Default %v, want %d (config's default for %s)", mapOf(p)["Default"], want.def, want.env)
		}
	}
	for _, id := range c.sortedFunctions() {
		if !functions[id].expires {
			continue
		}
		env := c.env(id)
		for _, name := range slices.Sorted(maps.Keys(retentionParams)) {
			if v := retentionParams[name].env; env[v] == nil {
				c.add(RuleTable, id, "environment lacks %s: the items it finishes would never expire", v)
			}
		}
	}
}

func codeKeySchema(ks []types.KeySchemaElement) []string {
	var out []string
	for _, k := range ks {
		out = append(out, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
	}
	return out
}

func keySchema(v any) []string {
	var out []string
	for _, k := range listOf(v) {
		out = append(out, str(mapOf(k)["AttributeName"])+" "+str(mapOf(k)["KeyType"]))
	}
	return out
}

// buildLine is what every build target must run, besides its package.
var buildLine = []string{"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0", "go build", "-tags lambda.norpc", "-o $(ARTIFACTS_DIR)/bootstrap"}

func (c *checker) build() {
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
		lc, _ := c.functionProp(id, "LoggingConfig")
		if f := mapOf(lc)["LogFormat"]; f != "JSON" {
			c.add(RuleBuild, id, "LoggingConfig LogFormat %v, want JSON (the functions log through the runtime's JSON logger)", f)
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
		c.checkTarget(id, spec.dir, path)
	}
}

// checkTarget runs `make -n build-<LogicalId>` on the Makefile, as sam
// build would run it, and reads the command it prints.
func (c *checker) checkTarget(id, dir, makefile string) {
	target := "build-" + id
	const artifacts = "/artifacts"
	makefile, err := filepath.Abs(makefile)
	if err != nil {
		c.add(RuleBuild, "Makefile", "%v", err)
		return
	}
	out, err := exec.Command("make", "-n", "--no-print-directory", "-f", makefile, "-C", filepath.Dir(makefile),
		target, "ARTIFACTS_DIR="+artifacts, "GO=go").CombinedOutput()
	if err != nil {
		c.add(RuleBuild, "Makefile", "make -n %s (sam build, BuildMethod: makefile, runs `make %s`): %v: %s", target, target, err, out)
		return
	}
	pkg := regexp.MustCompile(`(^|\s)\./functions/` + regexp.QuoteMeta(dir) + `/?(\s|$)`)
	for _, line := range strings.Split(string(out), "\n") {
		if !pkg.MatchString(line) {
			continue
		}
		for _, part := range buildLine {
			if !strings.Contains(line, strings.ReplaceAll(part, "$(ARTIFACTS_DIR)", artifacts)) {
				c.add(RuleBuild, "Makefile", "%s builds ./functions/%s without %q", target, dir, part)
			}
		}
		return
	}
	c.add(RuleBuild, "Makefile", "%s does not build ./functions/%s", target, dir)
}

var secretName = regexp.MustCompile(`(?i)key|secret|passw|token|credential`)

// Samples the secret's ARN parameter must accept or refuse. Secrets
// Manager appends six random characters to a secret's name in its ARN; a
// policy on the ARN without them (or on a name) would not match the
// secret the function reads, or would match more than it.
var (
	secretARNGood = []string{"arn:aws:secretsmanager:eu-west-1:123456789012:secret:genjobs/genace-api-key-AbC123"}
	secretARNBad  = []string{"", "genjobs/genace-api-key", "arn:aws:secretsmanager:eu-west-1:123456789012:secret:genjobs/genace-api-key",
		"arn:aws:secretsmanager:eu-west-1:123456789012:secret:*", "arn:aws:ssm:eu-west-1:123456789012:parameter/genace-AbC123"}
)

func (c *checker) secretsEnv() {
	params := mapOf(c.raw["Parameters"])
	for _, name := range slices.Sorted(maps.Keys(params)) {
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
		c.add(RuleSecretsEnv, id, "the stack must not create the key's secret: an empty secret would let functions start before the key is in; take the existing secret's ARN as %s", secretParam)
	}
	c.checkSecretParam(mapOf(params[secretParam]))
	for _, id := range c.ofType("AWS::Serverless::Function") {
		env := c.env(id)
		for _, name := range slices.Sorted(maps.Keys(env)) {
			switch {
			case slices.Contains(localOnlyEnv, name):
				c.add(RuleSecretsEnv, id, "%s puts the API key in plain text (local runs only); set GENACE_API_KEY_SECRET_ID", name)
			case strings.HasPrefix(name, samlocal.EndpointPrefix):
				if env[name] != "" {
					c.add(RuleSecretsEnv, id, "%s is %v: it must be empty in the template (local runs set it; deployed, the SDK uses AWS's endpoints)", name, env[name])
				}
			case !slices.Contains(configEnv, name):
				c.add(RuleSecretsEnv, id, "%s is not a setting the code reads (internal/config)", name)
			}
		}
	}
}

// checkSecretParam: the secret's ARN is a required parameter (no default:
// the stack cannot be deployed before the key is in Secrets Manager) that
// takes a full secret ARN and nothing else.
func (c *checker) checkSecretParam(p map[string]any) {
	where := "Parameters." + secretParam
	if p == nil {
		c.add(RuleSecretsEnv, where, "missing: the stack takes the ARN of an existing secret that already holds the Genace API key")
		return
	}
	if _, ok := p["Default"]; ok {
		c.add(RuleSecretsEnv, where, "has a Default: the ARN must be given at deploy time, after the key is stored")
	}
	c.checkPattern(RuleSecretsEnv, where, p, secretARNGood, secretARNBad)
}

// checkPattern compiles a parameter's AllowedPattern (CloudFormation
// matches the whole value) and tries it on samples it must accept and
// refuse.
func (c *checker) checkPattern(rule Rule, where string, p map[string]any, good, bad []string) {
	pat := str(p["AllowedPattern"])
	re, err := regexp.Compile(`^(?:` + pat + `)$`)
	if pat == "" || err != nil {
		c.add(rule, where, "AllowedPattern %q is missing or not a regular expression: %v", pat, err)
		return
	}
	for _, g := range good {
		if !re.MatchString(g) {
			c.add(rule, where, "AllowedPattern %q refuses %q", pat, g)
		}
	}
	for _, b := range bad {
		if re.MatchString(b) {
			c.add(rule, where, "AllowedPattern %q accepts %q", pat, b)
		}
	}
}

// Samples GenaceBaseUrl must accept or refuse: the key travels in a
// header, so only TLS.
var (
	baseURLGood = []string{"https://api.genace.example", "https://api.genace.example/v1/"}
	baseURLBad  = []string{"", "http://api.genace.example", "HTTP://api.genace.example", "ftp://api.genace.example", "https://", "api.genace.example"}
)

// parameters: each Number parameter feeds one variable internal/config
// reads, within the same bounds Load enforces at cold start, so a value
// CloudFormation accepts never fails a cold start; literal values of a
// bounded variable stay within them too.
func (c *checker) parameters() {
	params := mapOf(c.raw["Parameters"])
	feeds := map[string]map[string]bool{} // parameter -> variables set from it
	for _, id := range c.sortedFunctions() {
		for name, v := range c.env(id) {
			if ref, ok := unwrap(str(v), "Ref"); ok {
				if feeds[ref] == nil {
					feeds[ref] = map[string]bool{}
				}
				feeds[ref][name] = true
				continue
			}
			if b, ok := config.Bounds[name]; ok {
				if n, ok := num(v); !ok || n < b.Min || n > b.Max {
					c.add(RuleParameters, id, "%s is %v, outside %d..%d (what config accepts)", name, v, b.Min, b.Max)
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(params)) {
		p := mapOf(params[name])
		where := "Parameters." + name
		vars := slices.Sorted(maps.Keys(feeds[name]))
		if len(vars) == 0 {
			c.add(RuleParameters, where, "feeds no function's variable")
			continue
		}
		if len(vars) > 1 {
			c.add(RuleParameters, where, "feeds %v: one parameter, one variable", vars)
		}
		if str(p["Type"]) != "Number" {
			continue
		}
		b, ok := config.Bounds[vars[0]]
		if !ok {
			c.add(RuleParameters, where, "a Number feeding %s, which config does not bound (config.Bounds)", vars[0])
			continue
		}
		for _, k := range []struct {
			key  string
			want int
		}{{"MinValue", b.Min}, {"MaxValue", b.Max}} {
			if n, ok := num(p[k.key]); !ok || n != k.want {
				c.add(RuleParameters, where, "%s %v, want %d: config accepts %s from %d to %d", k.key, p[k.key], k.want, vars[0], b.Min, b.Max)
			}
		}
		if d, ok := num(p["Default"]); !ok || d < b.Min || d > b.Max {
			c.add(RuleParameters, where, "Default %v is outside %d..%d", p["Default"], b.Min, b.Max)
		}
	}
	// Local tools build the intake with config's catalog: the same one.
	if p, ok := params[catalogParam]; !ok || str(mapOf(p)["Default"]) != config.DefaultModelCatalog {
		c.add(RuleParameters, "Parameters."+catalogParam, "Default %v, want config.DefaultModelCatalog %s", mapOf(p)["Default"], config.DefaultModelCatalog)
	}
	if p, ok := params[baseURLParam]; ok {
		c.checkPattern(RuleParameters, "Parameters."+baseURLParam, mapOf(p), baseURLGood, baseURLBad)
	} else {
		c.add(RuleParameters, "Parameters."+baseURLParam, "missing: GENACE_BASE_URL comes from it")
	}
}

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
			out = append(out, metricRef{namespace: schema[0], metric: m[2], dims: slices.Sorted(slices.Values(schema[1:])), exact: true})
		}
	}
	for _, m := range insight.FindAllStringSubmatch(expr, -1) {
		if m[2] != "" {
			schema := splitNames(m[2])
			if len(schema) > 0 {
				out = append(out, metricRef{namespace: schema[0], metric: m[1], dims: slices.Sorted(slices.Values(schema[1:])), exact: true})
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

// checkRef reports a genjobs metric that the code does not emit with the
// dimension set named.
func (c *checker) checkRef(where string, r metricRef) {
	if r.namespace != metricsNS {
		return
	}
	sets, ok := emitted[r.metric]
	if !ok {
		sets, ok = logMetrics[r.metric]
	}
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
	lambdaAlarms := map[string]bool{} // "<metric> <FunctionName>"
	for _, id := range c.ofType("AWS::CloudWatch::Alarm") {
		p := c.props(id)
		actions := stringList(p["AlarmActions"])
		if len(actions) == 0 {
			c.add(RuleObservability, id, "no AlarmActions: nobody would hear of it")
		}
		if ok := stringList(p["OKActions"]); !slices.Equal(ok, actions) {
			c.add(RuleObservability, id, "OKActions %v, want the AlarmActions %v: whoever hears of the alarm must hear when it clears", ok, actions)
		}
		var refs []metricRef
		if metric := str(p["MetricName"]); metric != "" {
			var dims []string
			values := map[string]string{}
			for _, d := range listOf(p["Dimensions"]) {
				dims = append(dims, str(mapOf(d)["Name"]))
				values[str(mapOf(d)["Name"])] = str(mapOf(d)["Value"])
			}
			refs = append(refs, metricRef{namespace: str(p["Namespace"]), metric: metric, dims: slices.Sorted(slices.Values(dims)), exact: true})
			if str(p["Namespace"]) == "AWS/SQS" {
				sqsAlarms[metric+" "+values["QueueName"]+" "+str(p["ComparisonOperator"])+" "+fmt.Sprint(p["Threshold"])] = true
			}
			if str(p["Namespace"]) == "AWS/Lambda" && len(dims) == 1 {
				lambdaAlarms[metric+" "+values["FunctionName"]] = true
			}
			if fn, ok := values["Function"]; ok && str(p["Namespace"]) == metricsNS && !slices.ContainsFunc(slices.Sorted(maps.Keys(functions)), func(k string) bool { return functions[k].dir == fn }) {
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
	if !sqsAlarms["ApproximateNumberOfMessagesVisible "+GetAtt(sweepFailuresID, "QueueName")+" GreaterThanThreshold 0"] {
		c.add(RuleObservability, sweepFailuresID, "no alarm on ApproximateNumberOfMessagesVisible > 0 for it: a failed sweep would wait there unseen")
	}
	for _, m := range []string{"LeaseRenewalFailures", "UncertainSubmissions", "GenaceUnauthorized", "GenaceThrottled", "OperationsParked", initFailures} {
		if !alarmed[m] {
			c.add(RuleObservability, "alarms", "no alarm on %s", m)
		}
	}
	for _, id := range c.sortedFunctions() {
		for _, m := range []string{"Errors", "Throttles"} {
			if !lambdaAlarms[m+" "+Ref(id)] {
				c.add(RuleObservability, id, "no alarm on AWS/Lambda %s with the one dimension FunctionName = !Ref %s", m, id)
			}
		}
		c.initFailureFilter(id)
		c.asyncFailures(id)
	}
	c.alarmTopic()
	c.dashboard()
}

// initFailureFilter: the function's log group counts the line
// coldstart.Fatal writes (InitFailures, by Function), which an alarm
// watches: a function that cannot start otherwise shows up only as Errors
// of invocations that never ran.
func (c *checker) initFailureFilter(id string) {
	group := functions[id].logGroup
	for _, f := range c.ofType("AWS::Logs::MetricFilter") {
		p := c.props(f)
		if p["LogGroupName"] != Ref(group) {
			continue
		}
		if got := str(p["FilterPattern"]); got != initFailedPattern {
			c.add(RuleObservability, f, "FilterPattern %q, want %q: the line coldstart.Fatal writes", got, initFailedPattern)
		}
		ts := listOf(p["MetricTransformations"])
		if len(ts) != 1 {
			c.add(RuleObservability, f, "%d MetricTransformations, want 1 (%s)", len(ts), initFailures)
			return
		}
		t := mapOf(ts[0])
		var dims []string
		for _, d := range listOf(t["Dimensions"]) {
			dims = append(dims, str(mapOf(d)["Key"]))
			if str(mapOf(d)["Key"]) == "Function" && str(mapOf(d)["Value"]) != initFailedFunction {
				c.add(RuleObservability, f, "dimension Function is %v, want %s (the function's name in the line)", mapOf(d)["Value"], initFailedFunction)
			}
		}
		if str(t["MetricNamespace"]) != metricsNS || str(t["MetricName"]) != initFailures || fmt.Sprint(t["MetricValue"]) != "1" ||
			!slices.Equal(slices.Sorted(slices.Values(dims)), logMetrics[initFailures][0]) {
			c.add(RuleObservability, f, "publishes %v, want %s/%s = 1 by %v", t, metricsNS, initFailures, logMetrics[initFailures][0])
		}
		return
	}
	c.add(RuleObservability, id, "no AWS::Logs::MetricFilter on %s counting init failures (%s)", group, initFailedPattern)
}

// asyncFailures: a function invoked asynchronously (a Schedule event) has
// an on-failure destination: a queue, encrypted and alarmed (dlq and the
// SQS alarms above), that its role may send to. Lambda otherwise drops a
// failed asynchronous event after its retries.
func (c *checker) asyncFailures(id string) {
	async := slices.ContainsFunc(c.events(id), func(e event) bool { return e.typ == "Schedule" })
	if !async {
		return
	}
	eic, _ := c.functionProp(id, "EventInvokeConfig")
	onFailure := mapOf(mapOf(mapOf(eic)["DestinationConfig"])["OnFailure"])
	dest, ok := unwrap(str(onFailure["Destination"]), "GetAtt")
	q, attr, _ := strings.Cut(dest, ".")
	switch {
	case !ok || attr != "Arn" || str(onFailure["Type"]) != "SQS":
		c.add(RuleObservability, id, "EventInvokeConfig DestinationConfig OnFailure is %v, want Type SQS, Destination !GetAtt %s.Arn: a failed run would be dropped", onFailure, sweepFailuresID)
	case q != sweepFailuresID:
		c.add(RuleObservability, id, "its on-failure destination is %s, want %s (alarmed; triage does not read it)", q, sweepFailuresID)
	}
}

// alarmTopic: the topic is encrypted with a key of the stack's own whose
// policy lets CloudWatch use it. AWS's managed key alias/aws/sns cannot
// be: its policy cannot grant cloudwatch.amazonaws.com, and CloudWatch
// then fails to publish every alarm, silently.
func (c *checker) alarmTopic() {
	kms := c.props(alarmTopicID)["KmsMasterKeyId"]
	if kms == nil {
		c.add(RuleObservability, alarmTopicID, "not encrypted: set KmsMasterKeyId to a key of this stack that CloudWatch may use")
		return
	}
	if s := str(kms); strings.Contains(s, "alias/aws/sns") {
		c.add(RuleObservability, alarmTopicID, "KmsMasterKeyId %s: CloudWatch alarms cannot publish to a topic under the AWS managed key (its policy cannot grant cloudwatch.amazonaws.com); use a customer managed key", s)
		return
	}
	key, ok := unwrap(str(kms), "Ref")
	if !ok {
		if k, ok2 := unwrap(str(kms), "GetAtt"); ok2 && strings.HasSuffix(k, ".Arn") {
			key, ok = strings.TrimSuffix(k, ".Arn"), true
		}
	}
	if !ok || str(c.resources[key]["Type"]) != "AWS::KMS::Key" {
		c.add(RuleObservability, alarmTopicID, "KmsMasterKeyId %v is not !Ref (or !GetAtt .Arn) of an AWS::KMS::Key in this template", kms)
		return
	}
	granted := map[string]bool{}
	for _, st := range statements(c.props(key)["KeyPolicy"]) {
		if str(st["Effect"]) == "Allow" && slices.Contains(stringList(mapOf(st["Principal"])["Service"]), "cloudwatch.amazonaws.com") {
			for _, a := range stringList(st["Action"]) {
				granted[a] = true
			}
		}
	}
	for _, a := range []string{"kms:Decrypt", "kms:GenerateDataKey*"} {
		if !granted[a] {
			c.add(RuleObservability, key, "its KeyPolicy does not allow cloudwatch.amazonaws.com %s: alarms could not publish to %s", a, alarmTopicID)
		}
	}
	if !isTrue(c.props(key)["EnableKeyRotation"]) {
		c.add(RuleObservability, key, "EnableKeyRotation is not true")
	}
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
	return []metricRef{{namespace: names[0], metric: names[1], dims: slices.Sorted(slices.Values(dims)), exact: true}}
}
