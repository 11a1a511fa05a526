package samlocal

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	schedulertypes "github.com/aws/aws-sdk-go-v2/service/scheduler/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
)

const small = `
Parameters:
  Url:
    Type: String
  Level:
    Type: Number
    Default: 10
Globals:
  Function:
    Timeout: 30
    LoggingConfig:
      LogFormat: JSON
      ApplicationLogLevel: INFO
    Environment:
      Variables:
        AWS_ENDPOINT_URL_SQS: ""
        SHARED: global
Resources:
  Queue:
    Type: AWS::SQS::Queue
  Table:
    Type: AWS::DynamoDB::Table
  Weird:
    Type: AWS::EC2::VPC
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Timeout: 60
      Environment:
        Variables:
          SHARED: own
          TABLE: !Ref Table
          QUEUE_ARN: !GetAtt Queue.Arn
          QUEUE_URL: !GetAtt [Queue, QueueUrl]
          URL: !Ref Url
          LEVEL: !Ref Level
          SUB: !Sub "${AWS::StackName}/${Table}/${Queue.QueueName}/${!Literal}/${Level}"
          SUB_LIST: !Sub ["${X}-${Url}", {X: !Ref Table}]
          JOINED: !Join [":", [a, !Ref Level]]
      Events:
        Q:
          Type: SQS
          Properties:
            Queue: !GetAtt Queue.Arn
  Other:
    Type: AWS::Serverless::Function
    Properties:
      MemorySize: 512
      LoggingConfig:
        LogFormat: Text
`

func parse(t *testing.T, text string) *Template {
	t.Helper()
	tmpl, err := Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

func site() Site {
	return Site{Region: "eu-west-1", AccountID: "000000000000", Prefix: "stk", SQS: "http://127.0.0.1:4100"}
}

func TestParseMergesGlobals(t *testing.T) {
	t.Parallel()
	tmpl := parse(t, small)
	if got := []string{tmpl.Functions[0].LogicalID, tmpl.Functions[1].LogicalID}; got[0] != "Fn" || got[1] != "Other" {
		t.Fatalf("functions %v, want [Fn Other] (the template's order)", got)
	}
	fn, other := tmpl.Functions[0], tmpl.Functions[1]
	if fn.Timeout != time.Minute || fn.MemoryMB != 128 || other.Timeout != 30*time.Second || other.MemoryMB != 512 {
		t.Errorf("timeouts %v, %v; memory %d, %d", fn.Timeout, other.Timeout, fn.MemoryMB, other.MemoryMB)
	}
	if fn.Env["SHARED"] != "own" || other.Env["SHARED"] != "global" || fn.Env["AWS_ENDPOINT_URL_SQS"] != "" {
		t.Errorf("environments %v / %v", fn.Env, other.Env)
	}
	if lv := fn.Runtime("k", "s"); lv["AWS_LAMBDA_LOG_FORMAT"] != "JSON" || lv["AWS_LAMBDA_LOG_LEVEL"] != "INFO" {
		t.Errorf("Lambda's logging variables %v", lv)
	}
	// A function's own LoggingConfig merges key by key; Text logs carry
	// no level variable.
	if lv := other.Runtime("k", "s"); lv["AWS_LAMBDA_LOG_FORMAT"] != "Text" || lv["AWS_LAMBDA_LOG_LEVEL"] != "" {
		t.Errorf("Other's logging variables %v", lv)
	}
	if len(fn.Events) != 1 || fn.Events[0].Type != "SQS" {
		t.Errorf("events %+v", fn.Events)
	}
}

func TestEnvironmentResolves(t *testing.T) {
	t.Parallel()
	tmpl := parse(t, small)
	l := tmpl.Names(site())
	l.Parameters["Url"] = "http://sim"
	l.Variables["AWS_ENDPOINT_URL_SQS"] = "http://127.0.0.1:4100"
	env, err := tmpl.Environment("Fn", l)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:4100",
		"SHARED":               "own",
		"TABLE":                "stk-table",
		"QUEUE_ARN":            "arn:aws:sqs:eu-west-1:000000000000:stk-queue",
		"QUEUE_URL":            "http://127.0.0.1:4100/000000000000/stk-queue",
		"URL":                  "http://sim",
		"LEVEL":                "10",
		"SUB":                  "stk/stk-table/stk-queue/${Literal}/10",
		"SUB_LIST":             "stk-table-http://sim",
		"JOINED":               "a:10",
	}
	if !maps.Equal(env, want) {
		t.Errorf("environment\n%v\nwant\n%v", env, want)
	}
}

func TestEnvironmentNamesWhatItCannotResolve(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, value, want string }{
		{"parameter without default", `!Ref Url`, "Fn V: parameter Url has no default and no local value"},
		{"resource without local value", `!Ref Weird`, "Fn V: !Ref Weird (AWS::EC2::VPC): no local value"},
		{"unknown attribute", `!GetAtt Queue.Nope`, "!GetAtt Queue.Nope (AWS::SQS::Queue): no local value"},
		{"unknown name", `!Ref Nothing`, "!Ref Nothing: no such parameter or resource"},
		{"unsupported intrinsic", `!If [C, a, b]`, "Fn::If is not resolved locally"},
		{"unclosed sub", `!Sub "${Table"`, "unclosed ${"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tmpl := parse(t, strings.Replace(small, "          SHARED: own\n", "          SHARED: own\n          V: "+tc.value+"\n", 1))
			l := tmpl.Names(site())
			l.Parameters["Url"] = "u"
			if tc.name == "parameter without default" {
				delete(l.Parameters, "Url")
			}
			_, err := tmpl.Environment("Fn", l)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	// A variable a local run fills must be empty in the template.
	tmpl := parse(t, small)
	l := tmpl.Names(site())
	l.Parameters["Url"] = "u"
	l.Variables["SHARED"] = "local"
	if _, err := tmpl.Environment("Fn", l); err == nil || !strings.Contains(err.Error(), `Fn SHARED is "own" in the template`) {
		t.Errorf("error %v, want one refusing to replace a set value", err)
	}
}

func TestEnvFileFollowsSAM(t *testing.T) {
	t.Parallel()
	tmpl := parse(t, small)
	l := tmpl.Names(site())
	l.Parameters["Url"] = "http://sim"
	f, err := tmpl.EnvFile(l)
	if err != nil {
		t.Fatal(err)
	}
	// SHARED differs between the functions: under each; the endpoint is
	// the same for both: under Parameters.
	if f.Functions["Fn"]["SHARED"] != "own" || f.Functions["Other"]["SHARED"] != "global" || f.Shared["SHARED"] != "" {
		t.Errorf("SHARED placed wrongly: %+v", f)
	}
	if _, ok := f.Shared["AWS_ENDPOINT_URL_SQS"]; !ok {
		t.Errorf("the endpoint is not shared: %+v", f.Shared)
	}
	text, err := f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), `"Parameters": {`) || !strings.Contains(string(text), `"Fn": {`) {
		t.Errorf("not SAM's layout:\n%s", text)
	}
	back, err := ParseEnvFile(text)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := tmpl.Environment("Fn", l)
	got, err := tmpl.Apply(back, "Fn")
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("applied %v (%v), want %v", got, err, want)
	}
	// SAM's precedence: the function's section, then Parameters; an
	// undeclared variable never reaches the function; a declared one the
	// file leaves out is named.
	back.Shared["TABLE"], back.Shared["UNDECLARED"] = "shared-table", "x"
	back.Functions["Fn"]["TABLE"] = "own-table"
	delete(back.Functions["Fn"], "LEVEL")
	delete(back.Shared, "LEVEL")
	got, err = tmpl.Apply(back, "Fn")
	if err == nil || !strings.Contains(err.Error(), "gives Fn no value for LEVEL") {
		t.Errorf("error %v, want one naming LEVEL", err)
	}
	if got["TABLE"] != "own-table" || got["UNDECLARED"] != "" {
		t.Errorf("applied %v", got)
	}
	if _, err := ParseEnvFile([]byte(`{"Fn": {"A": 1}}`)); err == nil {
		t.Error("a number accepted as a value")
	}
}

func TestParameterOverrides(t *testing.T) {
	t.Parallel()
	params := map[string]string{
		"GenaceBaseUrl":   "http://127.0.0.1:3000",
		"ObservePolicies": `{"default":{"long_poll":"1s"}}`,
		"Spaced":          "a b",
		"Empty":           "",
	}
	text, err := FormatParameterOverrides(params)
	if err != nil {
		t.Fatal(err)
	}
	want := `Empty="" GenaceBaseUrl="http://127.0.0.1:3000" ObservePolicies="{\"default\":{\"long_poll\":\"1s\"}}" Spaced="a b"`
	if text != want {
		t.Errorf("formatted\n%s\nwant\n%s", text, want)
	}
	back, err := ParseParameterOverrides(text + "\n")
	if err != nil || !maps.Equal(back, params) {
		t.Errorf("parsed back %v (%v), want %v", back, err, params)
	}
	// SAM's own shorthand: bare values, escaped spaces in quotes.
	got, err := ParseParameterOverrides(`A=1 B="x\ y" C=http://h:1/p`)
	if err != nil || !maps.Equal(got, map[string]string{"A": "1", "B": "x y", "C": "http://h:1/p"}) {
		t.Errorf("parsed %v (%v)", got, err)
	}
	for _, bad := range []string{`A`, `A="x`, `A=x"y`, `-A=1`} {
		if _, err := ParseParameterOverrides(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := FormatParameterOverrides(map[string]string{"A": `back\slash`}); err == nil {
		t.Error("a backslash accepted: SAM would not read it back unchanged")
	}
}

func TestSlug(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ id, typ, want string }{
		{"DispatchQueue", "AWS::SQS::Queue", "dispatch"},
		{"DispatchDLQ", "AWS::SQS::Queue", "dispatch-dlq"},
		{"Queue", "AWS::SQS::Queue", "queue"},
		{"OperationsTable", "AWS::DynamoDB::Table", "operations-table"},
		{"GenaceApiKeySecret", "AWS::SecretsManager::Secret", "genace-api-key-secret"},
		{"APIKey", "", "api-key"},
	} {
		if got := Slug(tc.id, tc.typ); got != tc.want {
			t.Errorf("Slug(%s, %s) = %s, want %s", tc.id, tc.typ, got, tc.want)
		}
	}
}

// TestUnavailableThroughTheSDK: EventBridge Scheduler, called with the
// SDK's own client as the functions do, is refused with a message that
// says why.
func TestUnavailableThroughTheSDK(t *testing.T) {
	t.Parallel()
	u, err := StartUnavailable("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() })
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")}
	sc := scheduler.NewFromConfig(cfg, func(o *scheduler.Options) { o.BaseEndpoint = aws.String(u.URL()) })
	_, err = sc.CreateSchedule(context.Background(), &scheduler.CreateScheduleInput{
		Name: aws.String("x"), ScheduleExpression: aws.String("at(2030-01-01T00:00:00)"),
		FlexibleTimeWindow: &schedulertypes.FlexibleTimeWindow{Mode: schedulertypes.FlexibleTimeWindowModeOff},
		Target:             &schedulertypes.Target{Arn: aws.String("arn:q"), RoleArn: aws.String("arn:r")},
	})
	if err == nil || !strings.Contains(err.Error(), "POST /schedules/x is not available in a local run") {
		t.Errorf("CreateSchedule: %v, want a refusal", err)
	}
}

// TestSecretsPut: a secret put under a name reads back through the SDK by
// its ARN (Secrets Manager's) and by its name; putting it again (a stack
// of the same name before) gives it the new value, under the same ARN.
func TestSecretsPut(t *testing.T) {
	t.Parallel()
	s := MotoSecrets(t, "us-east-1")
	ctx := context.Background()
	name := "genjobs-samlocal-test-" + time.Now().Format("150405.000000000")
	t.Cleanup(func() {
		_, _ = s.Client.DeleteSecret(context.Background(), &secretsmanager.DeleteSecretInput{SecretId: aws.String(name), ForceDeleteWithoutRecovery: aws.Bool(true)})
	})
	arn, err := s.Put(ctx, name, "first")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(arn, "arn:aws:secretsmanager:us-east-1:") || !strings.Contains(arn, ":secret:"+name+"-") {
		t.Errorf("ARN %s, want Secrets Manager's for %s", arn, name)
	}
	again, err := s.Put(ctx, name, "second")
	if err != nil || again != arn {
		t.Fatalf("put again: %s, %v; want %s", again, err, arn)
	}
	for _, id := range []string{arn, name} {
		out, err := s.Client.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
		if err != nil || aws.ToString(out.SecretString) != "second" || aws.ToString(out.ARN) != arn {
			t.Errorf("GetSecretValue(%s): %+v, %v", id, out, err)
		}
	}
	_, err = s.Client.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(name + "-other")})
	var nf *smtypes.ResourceNotFoundException
	if !errors.As(err, &nf) {
		t.Errorf("unknown secret: %v, want ResourceNotFoundException", err)
	}
}

// TestWire covers both ways a template can hand a function the Genace
// key's secret (a secret resource, or a parameter passing an existing
// secret's ARN): either way the variable resolves to the ARN of a secret
// in Secrets Manager (moto's) holding the key. And the endpoint variables
// must match the local services both ways.
func TestWire(t *testing.T) {
	t.Parallel()
	const tmplText = `
Parameters:
  GenaceBaseUrl:
    Type: String
  KeyArn:
    Type: String
    AllowedPattern: "^arn:aws:secretsmanager:.+"
Globals:
  Function:
    Environment:
      Variables:
        AWS_ENDPOINT_URL_SQS: ""
Resources:
  Key:
    Type: AWS::SecretsManager::Secret
  ByResource:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          GENACE_BASE_URL: !Ref GenaceBaseUrl
          GENACE_API_KEY_SECRET_ID: !Ref Key
  ByParameter:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          GENACE_BASE_URL: !Ref GenaceBaseUrl
          GENACE_API_KEY_SECRET_ID: !Ref KeyArn
`
	tmpl := parse(t, tmplText)
	s := MotoSecrets(t, site().Region)
	ctx := context.Background()
	st := site()
	st.Prefix = "genjobs-samlocal-wire-" + time.Now().Format("150405.000000000")
	l := tmpl.Names(st)
	if err := tmpl.Wire(ctx, l, st, Wiring{GenaceURL: "http://sim", APIKey: "the-key", Secrets: s,
		Endpoints: map[string]string{"AWS_ENDPOINT_URL_SQS": "http://sqs"}}); err != nil {
		t.Fatal(err)
	}
	for _, arn := range []string{l.Resources["Key"]["Ref"], l.Parameters["KeyArn"]} {
		t.Cleanup(func() {
			_, _ = s.Client.DeleteSecret(context.Background(), &secretsmanager.DeleteSecretInput{SecretId: aws.String(arn), ForceDeleteWithoutRecovery: aws.Bool(true)})
		})
	}
	for _, id := range []string{"ByResource", "ByParameter"} {
		env, err := tmpl.Environment(id, l)
		if err != nil {
			t.Fatal(err)
		}
		if env["GENACE_BASE_URL"] != "http://sim" || env["AWS_ENDPOINT_URL_SQS"] != "http://sqs" {
			t.Errorf("%s: %v", id, env)
		}
		out, err := s.Client.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(env["GENACE_API_KEY_SECRET_ID"])})
		if err != nil || aws.ToString(out.SecretString) != "the-key" {
			t.Errorf("%s: secret %s: %+v, %v", id, env["GENACE_API_KEY_SECRET_ID"], out, err)
		}
	}

	for _, tc := range []struct {
		name      string
		endpoints map[string]string
		want      string
	}{
		{"an endpoint the template does not declare", map[string]string{"AWS_ENDPOINT_URL_SQS": "x", "AWS_ENDPOINT_URL_S3": "y"},
			"ByResource does not declare AWS_ENDPOINT_URL_S3"},
		{"an endpoint without a local service", map[string]string{},
			"the template declares AWS_ENDPOINT_URL_SQS, and the local stack has no service for it"},
	} {
		l := tmpl.Names(st)
		err := tmpl.Wire(ctx, l, st, Wiring{GenaceURL: "http://sim", Secrets: s, Endpoints: tc.endpoints})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := tmpl.Wire(ctx, tmpl.Names(st), st, Wiring{GenaceURL: "http://sim", Endpoints: map[string]string{"AWS_ENDPOINT_URL_SQS": "x"}}); err == nil ||
		!strings.Contains(err.Error(), "no Secrets Manager") {
		t.Errorf("secrets without a source: %v", err)
	}
}
