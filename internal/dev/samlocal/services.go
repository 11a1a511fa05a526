package samlocal

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
)

// SecretStore keeps a local stack's secrets: Secrets does, in Secrets
// Manager.
type SecretStore interface {
	// Put makes name a secret holding value and returns its ARN.
	Put(ctx context.Context, name, value string) (arn string, err error)
}

// Secrets creates a local stack's secrets in Secrets Manager (moto's), so
// a function reads its Genace key from a real secret, as deployed.
type Secrets struct {
	// Client is a Secrets Manager client on the local endpoint.
	Client *secretsmanager.Client
}

// Put makes name a secret holding value and returns its ARN (Secrets
// Manager's, with its random suffix). A secret of that name left from an
// earlier run is given the value.
func (s Secrets) Put(ctx context.Context, name, value string) (string, error) {
	out, err := s.Client.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(value)})
	if err == nil {
		return aws.ToString(out.ARN), nil
	}
	var exists *smtypes.ResourceExistsException
	if !errors.As(err, &exists) {
		return "", fmt.Errorf("secret %s: %w", name, err)
	}
	put, err := s.Client.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String(name), SecretString: aws.String(value)})
	if err != nil {
		return "", fmt.Errorf("secret %s: %w", name, err)
	}
	return aws.ToString(put.ARN), nil
}

// Mapping is an SQS event source mapping SAM generates from a function's
// SQS event, as a local stack makes it.
type Mapping struct {
	ID       string // SAM's logical id: the function's and the event's (ObserveFunctionObserve)
	Function string // the local name of the function it invokes
	QueueARN string // the queue it reads
	// BatchSize and MaxConcurrency are the event's BatchSize and
	// ScalingConfig.MaximumConcurrency (0: not set).
	BatchSize, MaxConcurrency int32
}

// MappingStore keeps a local stack's event source mappings.
type MappingStore interface {
	// Map makes m (or finds the one an earlier run made, and sets it to
	// m's values) and returns its UUID.
	Map(ctx context.Context, m Mapping) (uuid string, err error)
}

// Mappings makes a local stack's event source mappings in Lambda (moto's),
// so a function given one (the sweep fits observe's concurrency) reads and
// updates a real mapping. Lambda maps a queue only to a function that
// exists, and moto creates one only with a role that exists in its IAM:
// each mapping invokes a placeholder under its function's local name,
// with one role for them all. The mappings are disabled: moto would
// otherwise take every message sent to the queue off it to run the
// placeholder, while the local run's functions are started by hand. Not
// for concurrent use.
type Mappings struct {
	Lambda *lambda.Client // on the local endpoint
	IAM    *iam.Client    // on the local endpoint
	Role   string         // the placeholders' role's name

	roleARN string
	undo    []func(context.Context)
}

// Map makes m, disabled, and returns its UUID. A role, function or mapping
// of the same names and queue left from an earlier run is used again.
func (s *Mappings) Map(ctx context.Context, m Mapping) (string, error) {
	fn, err := s.function(ctx, m.Function)
	if err != nil {
		return "", fmt.Errorf("event source mapping %s: %w", m.ID, err)
	}
	var scaling *lambdatypes.ScalingConfig
	if m.MaxConcurrency > 0 {
		scaling = &lambdatypes.ScalingConfig{MaximumConcurrency: aws.Int32(m.MaxConcurrency)}
	}
	batch := aws.Int32(m.BatchSize)
	if m.BatchSize == 0 {
		batch = nil
	}
	list, err := s.Lambda.ListEventSourceMappings(ctx, &lambda.ListEventSourceMappingsInput{FunctionName: aws.String(fn), EventSourceArn: aws.String(m.QueueARN)})
	if err != nil {
		return "", fmt.Errorf("event source mapping %s: list: %w", m.ID, err)
	}
	var uuid string
	if len(list.EventSourceMappings) > 0 {
		// An earlier run's, whose concurrency a sweep may have changed.
		uuid = aws.ToString(list.EventSourceMappings[0].UUID)
		if _, err := s.Lambda.UpdateEventSourceMapping(ctx, &lambda.UpdateEventSourceMappingInput{
			UUID: aws.String(uuid), BatchSize: batch, ScalingConfig: scaling, Enabled: aws.Bool(false),
		}); err != nil {
			return "", fmt.Errorf("event source mapping %s: reset %s: %w", m.ID, uuid, err)
		}
	} else {
		out, err := s.Lambda.CreateEventSourceMapping(ctx, &lambda.CreateEventSourceMappingInput{
			FunctionName: aws.String(fn), EventSourceArn: aws.String(m.QueueARN), BatchSize: batch, ScalingConfig: scaling, Enabled: aws.Bool(false),
		})
		if err != nil {
			return "", fmt.Errorf("event source mapping %s: create: %w", m.ID, err)
		}
		uuid = aws.ToString(out.UUID)
	}
	s.undo = append(s.undo, func(ctx context.Context) {
		_, _ = s.Lambda.DeleteEventSourceMapping(ctx, &lambda.DeleteEventSourceMappingInput{UUID: aws.String(uuid)})
	})
	return uuid, nil
}

// function makes the placeholder function called name (its code only
// fails: nothing runs it) and returns its name.
func (s *Mappings) function(ctx context.Context, name string) (string, error) {
	role, err := s.role(ctx)
	if err != nil {
		return "", err
	}
	var code bytes.Buffer
	zw := zip.NewWriter(&code)
	w, err := zw.Create("bootstrap")
	if err == nil {
		_, err = w.Write([]byte("#!/bin/sh\necho 'a placeholder on a local stack: genjobs invoke runs the function itself' >&2\nexit 1\n"))
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return "", err
	}
	_, err = s.Lambda.CreateFunction(ctx, &lambda.CreateFunctionInput{
		FunctionName: aws.String(name), Role: aws.String(role), Runtime: lambdatypes.RuntimeProvidedal2023,
		Handler: aws.String("bootstrap"), Code: &lambdatypes.FunctionCode{ZipFile: code.Bytes()},
	})
	var exists *lambdatypes.ResourceConflictException
	if err != nil && !errors.As(err, &exists) {
		return "", fmt.Errorf("placeholder function %s: %w", name, err)
	}
	s.undo = append(s.undo, func(ctx context.Context) {
		_, _ = s.Lambda.DeleteFunction(ctx, &lambda.DeleteFunctionInput{FunctionName: aws.String(name)})
	})
	return name, nil
}

// role makes the placeholders' role, once, and returns its ARN.
func (s *Mappings) role(ctx context.Context) (string, error) {
	if s.roleARN != "" {
		return s.roleARN, nil
	}
	out, err := s.IAM.CreateRole(ctx, &iam.CreateRoleInput{
		RoleName: aws.String(s.Role),
		AssumeRolePolicyDocument: aws.String(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow",` +
			`"Principal":{"Service":"lambda.amazonaws.com"},"Action":"sts:AssumeRole"}]}`),
	})
	var exists *iamtypes.EntityAlreadyExistsException
	switch {
	case err == nil:
		s.roleARN = aws.ToString(out.Role.Arn)
	case errors.As(err, &exists):
		got, err := s.IAM.GetRole(ctx, &iam.GetRoleInput{RoleName: aws.String(s.Role)})
		if err != nil {
			return "", fmt.Errorf("role %s: %w", s.Role, err)
		}
		s.roleARN = aws.ToString(got.Role.Arn)
	default:
		return "", fmt.Errorf("role %s: %w", s.Role, err)
	}
	s.undo = append(s.undo, func(ctx context.Context) {
		_, _ = s.IAM.DeleteRole(ctx, &iam.DeleteRoleInput{RoleName: aws.String(s.Role)})
	})
	return s.roleARN, nil
}

// Remove deletes the mappings, placeholders and role Map made or found,
// as far as it can, the mappings first.
func (s *Mappings) Remove(ctx context.Context) {
	for i := len(s.undo) - 1; i >= 0; i-- {
		s.undo[i](ctx)
	}
	s.undo, s.roleARN = nil, ""
}

// Unavailable answers, on one loopback port, the AWS APIs a local stack
// must not reach (EventBridge Scheduler, AWS_ENDPOINT_URL_SCHEDULER) with
// a ValidationException, so a delay longer than SQS allows fails loudly
// instead of creating a schedule that never fires.
type Unavailable struct {
	srv *http.Server
	url string
}

// StartUnavailable listens on host (an IP; a port is picked) and serves
// until Close.
func StartUnavailable(host string) (*Unavailable, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("local refusal endpoint: %w", err)
	}
	u := &Unavailable{url: "http://" + ln.Addr().String()}
	u.srv = &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = u.srv.Serve(ln) }()
	return u, nil
}

// URL is the endpoint (http://HOST:PORT).
func (u *Unavailable) URL() string { return u.url }

// Close stops serving.
func (u *Unavailable) Close() error { return u.srv.Close() }

func (u *Unavailable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	what := r.Header.Get("X-Amz-Target")
	if what == "" {
		what = r.Method + " " + r.URL.Path
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-Errortype", "ValidationException")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": "ValidationException",
		"message": fmt.Sprintf("%s is not available in a local run", what)})
}
