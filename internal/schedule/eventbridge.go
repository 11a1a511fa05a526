package schedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/scheduler/types"
	"github.com/aws/smithy-go"
)

// atLayout is the time format of Scheduler's at() expression: no zone,
// which ScheduleExpressionTimezone supplies.
const atLayout = "2006-01-02T15:04:05"

// EventBridgeScheduler creates one-time schedules with EventBridge
// Scheduler, the way to delay a message longer than SQS's 15 minutes
// without holding a function or a message in flight meanwhile.
type EventBridgeScheduler struct {
	c             *scheduler.Client
	deadLetterARN string
}

var _ ScheduleCreator = (*EventBridgeScheduler)(nil)

// NewEventBridgeScheduler wraps a client; deadLetterARN is the SQS queue
// Scheduler sends a delivery to once its retries are spent.
func NewEventBridgeScheduler(c *scheduler.Client, deadLetterARN string) *EventBridgeScheduler {
	return &EventBridgeScheduler{c: c, deadLetterARN: deadLetterARN}
}

// CreateSchedule creates a schedule that sends s.Input to the queue once,
// at s.At, and then deletes itself (ActionAfterCompletion DELETE), so
// fired schedules do not pile up against the account's quota. The window
// is OFF — delivered at the time, not within a flexible window — because
// the delay was computed on purpose. A delivery that fails is retried
// (TargetRetryAttempts, TargetMaxEventAge) and then sent to the
// dead-letter queue with Input as its body. A ConflictException (the name
// exists) returns an error wrapping ErrScheduleExists.
func (e *EventBridgeScheduler) CreateSchedule(ctx context.Context, s Schedule) error {
	in := &scheduler.CreateScheduleInput{
		Name:                       aws.String(s.Name),
		ScheduleExpression:         aws.String("at(" + s.At.UTC().Format(atLayout) + ")"),
		ScheduleExpressionTimezone: aws.String("UTC"),
		FlexibleTimeWindow:         &types.FlexibleTimeWindow{Mode: types.FlexibleTimeWindowModeOff},
		ActionAfterCompletion:      types.ActionAfterCompletionDelete,
		Target: &types.Target{
			Arn:     aws.String(s.TargetARN),
			RoleArn: aws.String(s.RoleARN),
			Input:   aws.String(s.Input),
			RetryPolicy: &types.RetryPolicy{
				MaximumRetryAttempts:     aws.Int32(TargetRetryAttempts),
				MaximumEventAgeInSeconds: aws.Int32(int32(TargetMaxEventAge / time.Second)),
			},
			DeadLetterConfig: &types.DeadLetterConfig{Arn: aws.String(e.deadLetterARN)},
		},
	}
	if s.Group != "" {
		in.GroupName = aws.String(s.Group)
	}
	if s.ClientToken != "" {
		in.ClientToken = aws.String(s.ClientToken)
	}
	if _, err := e.c.CreateSchedule(ctx, in); err != nil {
		var apiErr smithy.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode() == "ConflictException" {
			return fmt.Errorf("create schedule %s: %w: %w", s.Name, ErrScheduleExists, err)
		}
		return fmt.Errorf("create schedule %s: %w", s.Name, err)
	}
	return nil
}

// Scheduler's retries of a delivery to the queue that failed (throttled,
// the queue or its permission gone). Its defaults are 185 attempts within
// 24 h; a delayed observation that late has long been re-armed by the
// sweep (SWEEP_OVERDUE_SECONDS), so retrying for an hour and then handing
// the message to the dead-letter queue, where triage opens a review,
// tells an operator about a broken path the same day.
const (
	TargetRetryAttempts = 10
	TargetMaxEventAge   = time.Hour
)
