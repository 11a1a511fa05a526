package schedule

import (
	"context"
	"errors"
	"fmt"

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
	c *scheduler.Client
}

var _ ScheduleCreator = (*EventBridgeScheduler)(nil)

// NewEventBridgeScheduler wraps a client.
func NewEventBridgeScheduler(c *scheduler.Client) *EventBridgeScheduler {
	return &EventBridgeScheduler{c: c}
}

// CreateSchedule creates a schedule that sends s.Input to the queue once,
// at s.At, and then deletes itself (ActionAfterCompletion DELETE), so
// fired schedules do not pile up against the account's quota. The window
// is OFF — delivered at the time, not within a flexible window — because
// the delay was computed on purpose. A ConflictException (the name
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
