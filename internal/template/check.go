package template

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
)

// Rule names one property of the template that Check enforces.
type Rule string

// The rules, in the order the issue lists them.
const (
	// RuleParse: the template must load at all.
	RuleParse Rule = "parse"
	// RuleWiring (1): every function has its queue(s) or schedule, its
	// role, its log group and environment pointing at the right resources,
	// and RecursiveLoop Allow where it feeds the queue that invokes it.
	RuleWiring Rule = "wiring"
	// RuleDLQ (2): every main queue redrives to its DLQ after 5 receives;
	// DLQs keep messages 14 days; every queue is encrypted.
	RuleDLQ Rule = "dlq"
	// RuleVisibility (3): VisibilityTimeout >= 6 x the consuming function's
	// Timeout (Globals merged), and QUEUE_VISIBILITY_SECONDS repeats it.
	RuleVisibility Rule = "visibility"
	// RuleBatchFailures (4): every SQS event reports partial batch
	// failures, with a sensible batch size and batching window.
	RuleBatchFailures Rule = "batch-failures"
	// RuleLeastPrivilege (5): each role holds exactly its allow-listed
	// (action, resource) grants: no wildcards, nothing extra, no managed
	// policies, and trusts only its service.
	RuleLeastPrivilege Rule = "least-privilege"
	// RuleKnownKeys (6): unknown properties are errors (goformation's
	// strict decoding, plus known-key lists for the SAM parts it skips).
	RuleKnownKeys Rule = "known-keys"
	// RuleTable (7): the table matches store.TableDefinition and has PITR
	// and encryption.
	RuleTable Rule = "table"
	// RuleBuild (8): provided.al2023, arm64, handler bootstrap, JSON logs,
	// BuildMethod makefile and a matching build-<LogicalId> target.
	RuleBuild Rule = "build"
	// RuleSecretsEnv (9): no plain-text secret (the API key only through
	// Secrets Manager) and every variable is one the code reads.
	RuleSecretsEnv Rule = "secrets-env"
	// RuleObservability (10): DLQ and queue-age alarms, alarms and
	// dashboard queries naming the dimension sets the code emits, the
	// seed's measures kept apart on the dashboard.
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
	d, problems, err := load(path)
	if err != nil {
		return []Problem{{RuleParse, filepath.Base(path), err.Error()}}
	}
	c := &checker{doc: d, opts: opts, problems: problems}
	c.wiring()
	c.dlq()
	c.visibility()
	c.batchFailures()
	c.leastPrivilege()
	c.knownKeys()
	c.table()
	c.build()
	c.secretsEnv()
	c.observability()
	sort.SliceStable(c.problems, func(i, j int) bool {
		a, b := c.problems[i], c.problems[j]
		if ra, rb := ruleOrder(a.Rule), ruleOrder(b.Rule); ra != rb {
			return ra < rb
		}
		if a.Resource != b.Resource {
			return a.Resource < b.Resource
		}
		return a.Message < b.Message
	})
	return c.problems
}

// Rules lists every rule in order.
func Rules() []Rule {
	return []Rule{RuleParse, RuleWiring, RuleDLQ, RuleVisibility, RuleBatchFailures, RuleLeastPrivilege,
		RuleKnownKeys, RuleTable, RuleBuild, RuleSecretsEnv, RuleObservability}
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
	sort.Strings(ids)
	return ids
}
