package queue

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
)

// The bounds Lambda puts on an SQS event source mapping's
// ScalingConfig.MaximumConcurrency. Checking them here turns a value Lambda
// would reject into an immediate, non-retryable error.
const (
	// MinMappingConcurrency is the lowest maximum concurrency Lambda
	// accepts: a mapping cannot be capped at one concurrent invocation.
	MinMappingConcurrency = 2
	// MaxMappingConcurrency is the highest maximum concurrency Lambda
	// accepts.
	MaxMappingConcurrency = 1000
)

// mappingAPI is the part of the Lambda API Mapping calls; *lambda.Client
// has it.
type mappingAPI interface {
	GetEventSourceMapping(context.Context, *lambda.GetEventSourceMappingInput, ...func(*lambda.Options)) (*lambda.GetEventSourceMappingOutput, error)
	UpdateEventSourceMapping(context.Context, *lambda.UpdateEventSourceMappingInput, ...func(*lambda.Options)) (*lambda.UpdateEventSourceMappingOutput, error)
}

// Mapping reads and sets the maximum concurrency of one SQS event source
// mapping: how many invocations Lambda's pollers may run at once for the
// queue. Lowering it at low load means fewer, fuller invocations; raising
// it lets the consumer keep up when the queue grows. It is safe for
// concurrent use, as the *lambda.Client it wraps is.
type Mapping struct {
	c    mappingAPI
	uuid string
}

// NewMapping addresses the event source mapping with that UUID (the
// mapping's Id in CloudFormation). Like NewSQS it takes the endpoint from
// the SDK's configuration (AWS_ENDPOINT_URL_LAMBDA for an emulator).
func NewMapping(c *lambda.Client, uuid string) *Mapping { return &Mapping{c: c, uuid: uuid} }

// MaxConcurrency returns the mapping's ScalingConfig.MaximumConcurrency.
// A mapping without one returns 0 and no error: Lambda then bounds it only
// by the function's (and the account's) concurrency, which is to say it is
// unbounded as far as the mapping goes.
func (m *Mapping) MaxConcurrency(ctx context.Context) (int, error) {
	if m.uuid == "" {
		return 0, fmt.Errorf("event source mapping max concurrency: %w: empty mapping UUID", ErrInvalidArgument)
	}
	out, err := m.c.GetEventSourceMapping(ctx, &lambda.GetEventSourceMappingInput{UUID: aws.String(m.uuid)})
	if err != nil {
		return 0, fmt.Errorf("event source mapping %s: get max concurrency: %w", m.uuid, err)
	}
	if out.ScalingConfig == nil || out.ScalingConfig.MaximumConcurrency == nil {
		return 0, nil
	}
	return int(*out.ScalingConfig.MaximumConcurrency), nil
}

// SetMaxConcurrency sets the mapping's ScalingConfig.MaximumConcurrency to
// n, leaving the rest of the mapping as it is. n must be within
// MinMappingConcurrency..MaxMappingConcurrency; anything else returns
// ErrInvalidArgument without calling Lambda. Lambda applies the change
// asynchronously (the mapping is Updating for a while); a second update
// meanwhile fails with ResourceInUseException, which Retryable counts as
// retryable.
func (m *Mapping) SetMaxConcurrency(ctx context.Context, n int) error {
	if m.uuid == "" {
		return fmt.Errorf("event source mapping set max concurrency: %w: empty mapping UUID", ErrInvalidArgument)
	}
	if n < MinMappingConcurrency || n > MaxMappingConcurrency {
		return fmt.Errorf("event source mapping %s: set max concurrency: %w: %d outside %d..%d",
			m.uuid, ErrInvalidArgument, n, MinMappingConcurrency, MaxMappingConcurrency)
	}
	_, err := m.c.UpdateEventSourceMapping(ctx, &lambda.UpdateEventSourceMappingInput{
		UUID:          aws.String(m.uuid),
		ScalingConfig: &types.ScalingConfig{MaximumConcurrency: aws.Int32(int32(n))},
	})
	if err != nil {
		return fmt.Errorf("event source mapping %s: set max concurrency %d: %w", m.uuid, n, err)
	}
	return nil
}

// Capacity is a queue together with the event source mapping that feeds
// its messages to a function: what a caller fitting the function's
// concurrency to the queue's load reads and sets, behind one value so it
// can declare one small interface for both.
type Capacity struct {
	// Queue reads the depth of the queue at QueueURL.
	Queue    *SQS
	QueueURL string
	// Mapping is the event source mapping from that queue.
	Mapping *Mapping
}

// Depth is Queue.Depth of QueueURL.
func (c Capacity) Depth(ctx context.Context) (Depth, error) { return c.Queue.Depth(ctx, c.QueueURL) }

// MaxConcurrency is Mapping.MaxConcurrency.
func (c Capacity) MaxConcurrency(ctx context.Context) (int, error) {
	return c.Mapping.MaxConcurrency(ctx)
}

// SetMaxConcurrency is Mapping.SetMaxConcurrency.
func (c Capacity) SetMaxConcurrency(ctx context.Context, n int) error {
	return c.Mapping.SetMaxConcurrency(ctx, n)
}
