package templatecheck

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Rule names one property of the template that Check enforces.
type Rule string

// The rules: what only the Go code knows. What a valid SAM or
// CloudFormation template is, cfn-lint and SAM's translator check.
const (
	// RuleParse: the template must load at all.
	RuleParse Rule = "parse"
	// RuleTopology: the queues, which function consumes which and how,
	// redrive policies, retention, timeouts and schedules are
	// internal/dev/topology's (topology.Check).
	RuleTopology Rule = "topology"
	// RuleWiring: every function has its role,
	// its log group and environment pointing at the right resources, and
	// RecursiveLoop Allow exactly where it feeds the queue that invokes it.
	RuleWiring Rule = "wiring"
	// RuleDLQ: a DLQ accepts its main queue only, redrives nowhere and
	// keeps messages longer than it; every queue is encrypted.
	RuleDLQ Rule = "dlq"
	// RuleVisibility: VisibilityTimeout >= 6 x the consuming function's
	// Timeout (Globals merged), and QUEUE_VISIBILITY_SECONDS repeats it.
	RuleVisibility Rule = "visibility"
	// RuleBatchFailures: every SQS event reports partial batch
	// failures, with a sensible batch size and batching window.
	RuleBatchFailures Rule = "batch-failures"
	// RuleLeastPrivilege: each role holds exactly its allow-listed
	// (action, resource) grants, those of the SDK calls its function
	// makes: no wildcards, nothing extra, no managed policies; it trusts
	// only its service (Scheduler: this account's schedule group only);
	// a function URL authenticates its callers (AuthType AWS_IAM).
	RuleLeastPrivilege Rule = "least-privilege"
	// RuleTable: the table matches dynamo.TableDefinition, has PITR,
	// encryption, deletion protection and TTL on dynamo.AttrExpiresAt; the
	// retention parameters reach every function that finishes items.
	RuleTable Rule = "table"
	// RuleBuild: provided.al2023, arm64, handler bootstrap, JSON logs,
	// BuildMethod makefile and a matching build-<LogicalId> target.
	RuleBuild Rule = "build"
	// RuleSecretsEnv: no plain-text secret: the API key is read from
	// an existing secret whose full ARN the stack takes as a parameter;
	// every variable is one the code reads.
	RuleSecretsEnv Rule = "secrets-env"
	// RuleParameters: parameters feed the variables internal/config
	// reads, with the bounds it enforces; GenaceBaseUrl is https only.
	RuleParameters Rule = "parameters"
	// RuleObservability: DLQ, queue-age, Errors, Throttles and
	// init-failure alarms, each with OKActions, on an encrypted topic
	// CloudWatch can publish to; alarms and dashboard queries naming the
	// dimension sets the code emits; an on-failure destination for
	// asynchronous invocations; the seed's measures kept apart.
	RuleObservability Rule = "observability"
)

// Problem is one broken rule.
type Problem struct {
	Rule Rule
	// Resource is the logical id, or the part of the template or the
	// Makefile the problem is in.
	Resource string
	Message  string
}

func (p Problem) String() string { return fmt.Sprintf("[%s] %s: %s", p.Rule, p.Resource, p.Message) }

// Err joins problems into one error, nil when there are none.
func Err(problems []Problem) error {
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = errors.New(p.String())
	}
	return errors.Join(errs...)
}

// Options adjusts CheckWith.
type Options struct {
	// Makefile is the Makefile holding the build-<LogicalId> targets. By
	// default it is the one in the functions' CodeUri, relative to the
	// template, which is where `sam build` runs make.
	Makefile string
}

// Check checks the SAM template at path and returns every problem found,
// sorted by rule and resource; none means it passes.
func Check(path string) []Problem { return CheckWith(path, Options{}) }

// CheckWith is Check with options.
func CheckWith(path string, opts Options) []Problem {
	d, err := load(path)
	if err != nil {
		return []Problem{{RuleParse, filepath.Base(path), err.Error()}}
	}
	c := &checker{doc: d, opts: opts}
	for _, rule := range []func(){c.topology, c.wiring, c.dlq, c.visibility, c.batchFailures, c.leastPrivilege,
		c.table, c.build, c.secretsEnv, c.parameters, c.observability} {
		rule()
	}
	slices.SortStableFunc(c.problems, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(ruleOrder(a.Rule), ruleOrder(b.Rule)), strings.Compare(a.Resource, b.Resource), strings.Compare(a.Message, b.Message))
	})
	return c.problems
}

// Rules lists every rule in order.
func Rules() []Rule {
	return []Rule{RuleParse, RuleTopology, RuleWiring, RuleDLQ, RuleVisibility, RuleBatchFailures, RuleLeastPrivilege,
		RuleTable, RuleBuild, RuleSecretsEnv, RuleParameters, RuleObservability}
}

func ruleOrder(r Rule) int { return slices.Index(Rules(), r) }

type checker struct {
	*doc
	opts     Options
	problems []Problem
}

func (c *checker) add(rule Rule, resource, format string, args ...any) {
	c.problems = append(c.problems, Problem{rule, resource, fmt.Sprintf(format, args...)})
}

// sortedFunctions lists the expected functions present in the template.
func (c *checker) sortedFunctions() []string {
	var ids []string
	for id := range functions {
		if str(c.resources[id]["Type"]) == "AWS::Serverless::Function" {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
