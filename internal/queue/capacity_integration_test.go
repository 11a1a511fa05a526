//go:build integration

package queue_test

// Capacity against moto: the queue's depth as SQS counts it, and an SQS
// event source mapping's maximum concurrency read and set through
// Lambda's API. moto serves Lambda's control plane without docker
// (creating a function and its mappings; only invoking one would need
// it), and checks that a function's role exists in its IAM, so the test
// creates one there.

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/genjobs/genjobs/internal/queue"
)

// TestCapacityIntegrationDepth: Depth tells apart what waits, what was
// received and what is delayed.
func TestCapacityIntegrationDepth(t *testing.T) {
	t.Parallel()
	c := newIntegrationClient(t)
	s := queue.NewSQS(c)
	url, _ := createQueue(t, c, queueName(t, ""), map[string]string{"VisibilityTimeout": "120"})
	ctx := context.Background()
	capacity := queue.Capacity{Queue: s, QueueURL: url}

	if d, err := capacity.Depth(ctx); err != nil || d != (queue.Depth{}) {
		t.Fatalf("empty queue: %+v, %v; want all zero", d, err)
	}
	for i := range 3 {
		if _, err := s.Send(ctx, url, testBody(t, "op-depth-"+strconv.Itoa(i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Send(ctx, url, testBody(t, "op-depth-delayed"), 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	receiveOne(t, s, url, 5*time.Second) // in flight for the queue's 120 s

	d, err := capacity.Depth(ctx)
	if want := (queue.Depth{Visible: 2, InFlight: 1, Delayed: 1}); err != nil || d != want || d.Total() != 4 {
		t.Fatalf("Depth = %+v (total %d), %v; want %+v, total 4", d, d.Total(), err, want)
	}

	missing := "https://sqs.us-east-1.amazonaws.com/000000000000/" + queueName(t, "-missing")
	_, err = s.Depth(ctx, missing)
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || queue.Retryable(err) {
		t.Errorf("missing queue: %v; want a non-retryable API error", err)
	}
}

// TestCapacityIntegrationMapping: a mapping created with a maximum
// concurrency of 8 reads 8, reads 3 after SetMaxConcurrency(3), and keeps
// its other settings; a mapping created without one reads 0.
func TestCapacityIntegrationMapping(t *testing.T) {
	t.Parallel()
	cfg := integrationConfig(t, "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_LAMBDA", "AWS_ENDPOINT_URL_IAM")
	sc := sqs.NewFromConfig(cfg)
	lc := lambda.NewFromConfig(cfg)
	ctx := context.Background()
	name := queueName(t, "")
	url, arn := createQueue(t, sc, name, map[string]string{"VisibilityTimeout": "60"})
	fn := createFunction(t, cfg, name)

	uuid := createMapping(t, lc, fn, arn, &lambdatypes.ScalingConfig{MaximumConcurrency: aws.Int32(8)})
	capacity := queue.Capacity{Queue: queue.NewSQS(sc), QueueURL: url, Mapping: queue.NewMapping(lc, uuid)}
	if n, err := capacity.MaxConcurrency(ctx); err != nil || n != 8 {
		t.Fatalf("MaxConcurrency = %d, %v; want 8 as created", n, err)
	}
	if err := capacity.SetMaxConcurrency(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if n, err := capacity.MaxConcurrency(ctx); err != nil || n != 3 {
		t.Fatalf("after SetMaxConcurrency(3): %d, %v; want 3", n, err)
	}
	got, err := lc.GetEventSourceMapping(ctx, &lambda.GetEventSourceMappingInput{UUID: aws.String(uuid)})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToInt32(got.BatchSize) != 7 || aws.ToString(got.EventSourceArn) != arn {
		t.Errorf("after the update: batch size %d, source %s; want 7 and %s as created", aws.ToInt32(got.BatchSize), aws.ToString(got.EventSourceArn), arn)
	}
	if err := capacity.SetMaxConcurrency(ctx, 1); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("SetMaxConcurrency(1) = %v, want ErrInvalidArgument", err)
	}
	if n, err := capacity.MaxConcurrency(ctx); err != nil || n != 3 {
		t.Errorf("after the rejected SetMaxConcurrency(1): %d, %v; want 3 still", n, err)
	}

	unbounded := queue.NewMapping(lc, createMapping(t, lc, fn, arn, nil))
	if n, err := unbounded.MaxConcurrency(ctx); err != nil || n != 0 {
		t.Errorf("mapping without a maximum: %d, %v; want 0", n, err)
	}

	gone := queue.NewMapping(lc, "00000000-0000-0000-0000-000000000000")
	_, err = gone.MaxConcurrency(ctx)
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "ResourceNotFoundException" || queue.Retryable(err) {
		t.Errorf("missing mapping: %v; want a non-retryable ResourceNotFoundException", err)
	}
}

// createFunction creates a Lambda function named name (with a role of the
// same name), to be the target of mappings; moto never runs it. Both are
// deleted when the test ends.
func createFunction(t *testing.T, cfg aws.Config, name string) string {
	t.Helper()
	ctx := context.Background()
	ic := iam.NewFromConfig(cfg)
	role, err := ic.CreateRole(ctx, &iam.CreateRoleInput{
		RoleName: aws.String(name[:min(len(name), 64)]),
		AssumeRolePolicyDocument: aws.String(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow",` +
			`"Principal":{"Service":"lambda.amazonaws.com"},"Action":"sts:AssumeRole"}]}`),
	})
	if err != nil {
		t.Fatalf("create role: %v", err)
	}
	t.Cleanup(func() { _, _ = ic.DeleteRole(context.Background(), &iam.DeleteRoleInput{RoleName: role.Role.RoleName}) })

	var code bytes.Buffer
	zw := zip.NewWriter(&code)
	w, err := zw.Create("bootstrap")
	if err == nil {
		_, err = w.Write([]byte("#!/bin/sh\nexit 1\n"))
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	lc := lambda.NewFromConfig(cfg)
	fn, err := lc.CreateFunction(ctx, &lambda.CreateFunctionInput{
		FunctionName: aws.String(name[:min(len(name), 64)]),
		Role:         role.Role.Arn,
		Runtime:      lambdatypes.RuntimeProvidedal2023,
		Handler:      aws.String("bootstrap"),
		Code:         &lambdatypes.FunctionCode{ZipFile: code.Bytes()},
	})
	if err != nil {
		t.Fatalf("create function: %v", err)
	}
	t.Cleanup(func() {
		_, _ = lc.DeleteFunction(context.Background(), &lambda.DeleteFunctionInput{FunctionName: fn.FunctionName})
	})
	return aws.ToString(fn.FunctionArn)
}

// createMapping maps the queue at queueARN to the function, with batch
// size 7 (to see that updates keep it) and scaling (nil: none), and
// returns its UUID; it is deleted when the test ends.
func createMapping(t *testing.T, lc *lambda.Client, function, queueARN string, scaling *lambdatypes.ScalingConfig) string {
	t.Helper()
	m, err := lc.CreateEventSourceMapping(context.Background(), &lambda.CreateEventSourceMappingInput{
		FunctionName:   aws.String(function),
		EventSourceArn: aws.String(queueARN),
		BatchSize:      aws.Int32(7),
		ScalingConfig:  scaling,
	})
	if err != nil {
		t.Fatalf("create event source mapping: %v", err)
	}
	uuid := aws.ToString(m.UUID)
	if uuid == "" {
		t.Fatal("event source mapping without a UUID")
	}
	t.Cleanup(func() {
		_, _ = lc.DeleteEventSourceMapping(context.Background(), &lambda.DeleteEventSourceMappingInput{UUID: aws.String(uuid)})
	})
	return uuid
}
