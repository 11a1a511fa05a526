package samlocal

import (
	"strings"
	"unicode"
)

// Site is where a local stack lives.
type Site struct {
	Region, AccountID string // the pseudo parameters, also in ARNs
	Prefix            string // starts every local resource's name; the stack name
	SQS               string // the SQS endpoint: a queue's URL is SQS/AccountID/name
}

// Slug is a resource's part of its local name: the logical id in kebab
// case, without a queue's "Queue" (DispatchQueue: dispatch, DispatchDLQ:
// dispatch-dlq, OperationsTable: operations-table).
func Slug(id, typ string) string {
	if typ == "AWS::SQS::Queue" {
		if s := strings.TrimSuffix(id, "Queue"); s != "" {
			id = s
		}
	}
	var b strings.Builder
	rs := []rune(id)
	for i, r := range rs {
		upper := unicode.IsUpper(r)
		// A word starts at an upper-case letter after a lower-case one,
		// or at the last capital of an acronym before lower case (DLQ,
		// APIKey: api-key).
		if i > 0 && upper && (unicode.IsLower(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1]) && unicode.IsUpper(rs[i-1])) {
			b.WriteByte('-')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// Name is a resource's local name on the site.
func (s Site) Name(id, typ string) string { return s.Prefix + "-" + Slug(id, typ) }

// Names returns the local values of every resource of a type the
// functions are configured with: its name, URL or ARN as the real service
// forms them, under the site's prefix. A stack that creates the resources
// creates them under these names. Other resources get no values, so an
// environment that refers to one fails to resolve, naming it.
func (t *Template) Names(s Site) Locals {
	l := Locals{Region: s.Region, AccountID: s.AccountID, Partition: "aws", StackName: s.Prefix, URLSuffix: "amazonaws.com",
		Parameters: map[string]string{}, Resources: map[string]map[string]string{}, Variables: map[string]string{}}
	arn := func(service, region, resource string) string {
		return "arn:" + l.Partition + ":" + service + ":" + region + ":" + s.AccountID + ":" + resource
	}
	for id, r := range t.Resources {
		name := s.Name(id, r.Type)
		var v map[string]string
		switch r.Type {
		case "AWS::DynamoDB::Table":
			v = map[string]string{"Ref": name, "Arn": arn("dynamodb", s.Region, "table/"+name)}
		case "AWS::SQS::Queue":
			url := strings.TrimSuffix(s.SQS, "/") + "/" + s.AccountID + "/" + name
			v = map[string]string{"Ref": url, "QueueUrl": url, "QueueName": name, "Arn": arn("sqs", s.Region, name)}
		case "AWS::S3::Bucket":
			v = map[string]string{"Ref": name, "Arn": "arn:" + l.Partition + ":s3:::" + name}
		case "AWS::SecretsManager::Secret":
			// Its ARN (Ref, Id) is Secrets Manager's, with a random
			// suffix: Wire fills it in when it creates the secret.
			v = map[string]string{"Name": name}
		case "AWS::IAM::Role":
			v = map[string]string{"Ref": name, "Arn": arn("iam", "", "role/"+name), "RoleId": "AROA" + strings.ToUpper(Slug(id, r.Type))}
		case "AWS::Events::EventBus":
			v = map[string]string{"Ref": name, "Name": name, "Arn": arn("events", s.Region, "event-bus/"+name)}
		case "AWS::Scheduler::ScheduleGroup":
			v = map[string]string{"Ref": name, "Arn": arn("scheduler", s.Region, "schedule-group/"+name)}
		default:
			continue
		}
		l.Resources[id] = v
	}
	for id := range t.mappings() {
		// Lambda names a mapping by a UUID of its own; locally its name
		// stands in, unique on the site.
		l.Resources[id] = map[string]string{"Ref": s.Name(id, mappingType)}
	}
	return l
}

// mappingType is the resource SAM generates for a function's SQS event.
const mappingType = "AWS::Lambda::EventSourceMapping"

// mappings are the event source mappings SAM generates from the
// functions' SQS events, by the logical ids it gives them (the function's
// and the event's: ObserveFunction's event Observe is
// ObserveFunctionObserve), which the template may refer to.
func (t *Template) mappings() map[string]bool {
	out := map[string]bool{}
	for _, f := range t.Functions {
		for _, e := range f.Events {
			if e.Type == "SQS" {
				out[f.LogicalID+e.Name] = true
			}
		}
	}
	return out
}
