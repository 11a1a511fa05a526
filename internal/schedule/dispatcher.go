package schedule

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/message"
)

// DefaultMaxQueueDelay is SQS's longest DelaySeconds.
const DefaultMaxQueueDelay = 900 * time.Second

// QueueSender puts a body on a queue after a delay of 0..MaxQueueDelay
// (rounded up to whole seconds by the sender). queue.SQS satisfies it.
type QueueSender interface {
	Send(ctx context.Context, queueURL string, body []byte, delay time.Duration) (messageID string, err error)
}

// Schedule is a one-time delivery of Input to the queue TargetARN at At.
type Schedule struct {
	// Name is unique within Group and deterministic for the envelope.
	Name string
	// Group is the schedule group; empty means Scheduler's "default".
	Group string
	// At is when to deliver, in UTC, a whole second.
	At time.Time
	// TargetARN is the queue's ARN.
	TargetARN string
	// RoleARN is the role Scheduler assumes to send to the queue.
	RoleARN string
	// Input is the message body, an encoded message.Envelope.
	Input string
	// ClientToken makes Scheduler treat a repeated request as one.
	ClientToken string
}

// ErrScheduleExists is what a ScheduleCreator returns (wrapped) when a
// schedule of that name already exists. Since names are deterministic, it
// means an earlier try of the same dispatch succeeded, and the Dispatcher
// counts it as success.
var ErrScheduleExists = errors.New("schedule already exists")

// ScheduleCreator creates one-time schedules. EventBridgeScheduler
// satisfies it; a local run can supply one that delivers through its
// embedded queue.
type ScheduleCreator interface {
	CreateSchedule(ctx context.Context, s Schedule) error
}

// ErrNoScheduler is returned (wrapped) for a delay longer than
// MaxQueueDelay when the Dispatcher has no ScheduleCreator, or no ARN for
// the action's queue (its MaxDelay did not say it would need one).
var ErrNoScheduler = errors.New("delay needs a scheduler and none is configured")

// Target is where the messages of one action go.
type Target struct {
	// URL is the queue URL, for SQS.
	URL string
	// ARN is the queue ARN, for Scheduler's target.
	ARN string
}

// Config wires a Dispatcher.
type Config struct {
	// Queues maps each action to its queue.
	Queues map[message.Action]Target
	// MaxDelay is the longest delay the process asks Send for, per action
	// it sends. Only an action whose longest delay exceeds MaxQueueDelay
	// goes through the scheduler, so only its queue needs an ARN (and the
	// Dispatcher a ScheduleCreator and SchedulerRoleARN). An action
	// without an entry is taken never to exceed MaxQueueDelay.
	MaxDelay map[message.Action]time.Duration
	// SchedulerRoleARN is the role Scheduler assumes to send to the queues.
	SchedulerRoleARN string
	// ScheduleGroup is the schedule group (empty: "default"). A group of
	// its own keeps genjobs' schedules apart for listing and permissions.
	ScheduleGroup string
	// NamePrefix starts every schedule name, so several deployments can
	// share a group: at most MaxNamePrefix of [0-9A-Za-z_.-].
	NamePrefix string
	// MaxQueueDelay is the longest delay sent through the queue; longer
	// ones become schedules. 0 means DefaultMaxQueueDelay (SQS's limit);
	// more than that only suits a sender that accepts it (a local queue).
	MaxQueueDelay time.Duration
}

// Scheduled lists, sorted, the actions whose longest delay (MaxDelay),
// rounded up to whole seconds as Send rounds it, exceeds MaxQueueDelay:
// those the Dispatcher sends through the scheduler.
func (c Config) Scheduled() []message.Action {
	limit := c.MaxQueueDelay
	if limit == 0 {
		limit = DefaultMaxQueueDelay
	}
	var out []message.Action
	for a, d := range c.MaxDelay {
		if ceilSecond(d) > limit {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// Route is the path a dispatch took, for metrics.
type Route string

// The routes.
const (
	// RouteSQS is a message sent with SQS's DelaySeconds.
	RouteSQS Route = "sqs"
	// RouteScheduler is a one-time EventBridge Scheduler schedule.
	RouteScheduler Route = "scheduler"
)

// Dispatcher delivers envelopes after a delay, choosing the path by the
// delay's length. It is safe for concurrent use if its sender and creator
// are.
type Dispatcher struct {
	cfg    Config
	sender QueueSender
	sched  ScheduleCreator
	clock  clock.Clock
}

// NewDispatcher checks cfg and builds a Dispatcher. Every queue needs a
// URL; the scheduler settings (sched, SchedulerRoleARN, the queue's ARN)
// are needed only for the actions cfg.Scheduled lists, so sched may be nil
// when there are none. c nil means the wall clock.
func NewDispatcher(cfg Config, sender QueueSender, sched ScheduleCreator, c clock.Clock) (*Dispatcher, error) {
	if sender == nil {
		return nil, errors.New("schedule dispatcher: nil QueueSender")
	}
	if c == nil {
		c = clock.Real{}
	}
	if cfg.MaxQueueDelay == 0 {
		cfg.MaxQueueDelay = DefaultMaxQueueDelay
	}
	var errs []error
	if cfg.MaxQueueDelay < 0 {
		errs = append(errs, fmt.Errorf("MaxQueueDelay %v is negative", cfg.MaxQueueDelay))
	}
	if len(cfg.Queues) == 0 {
		errs = append(errs, errors.New("no queues configured"))
	}
	queues := make(map[message.Action]Target, len(cfg.Queues))
	for action, t := range cfg.Queues {
		if !slices.Contains(message.Actions, action) {
			errs = append(errs, fmt.Errorf("queue for unknown action %q", action))
		}
		if t.URL == "" {
			errs = append(errs, fmt.Errorf("queue for %s has no URL", action))
		}
		queues[action] = t
	}
	scheduled := cfg.Scheduled()
	for _, action := range scheduled {
		why := fmt.Sprintf("%s is delayed up to %v, beyond the queue's %v", action, cfg.MaxDelay[action], cfg.MaxQueueDelay)
		t, ok := cfg.Queues[action]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("no queue for %s", action))
		case t.ARN == "":
			errs = append(errs, fmt.Errorf("queue for %s has no ARN, which the scheduler needs: %s", action, why))
		}
		if sched == nil {
			errs = append(errs, fmt.Errorf("no scheduler configured: %s", why))
		}
	}
	if len(scheduled) > 0 && cfg.SchedulerRoleARN == "" {
		errs = append(errs, errors.New("SchedulerRoleARN is empty"))
	}
	if len(cfg.NamePrefix) > MaxNamePrefix || !validName(cfg.NamePrefix) {
		errs = append(errs, fmt.Errorf("NamePrefix %q: want at most %d of [0-9A-Za-z_.-]", cfg.NamePrefix, MaxNamePrefix))
	}
	if cfg.ScheduleGroup != "" && (len(cfg.ScheduleGroup) > 64 || !validName(cfg.ScheduleGroup)) {
		errs = append(errs, fmt.Errorf("ScheduleGroup %q: want 1..64 of [0-9A-Za-z_.-]", cfg.ScheduleGroup))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("schedule dispatcher: %w", err)
	}
	cfg.Queues = queues // copies: later changes to the caller's maps do not leak in
	cfg.MaxDelay = maps.Clone(cfg.MaxDelay)
	return &Dispatcher{cfg: cfg, sender: sender, sched: sched, clock: c}, nil
}

// Send delivers env to its action's queue after delay: through SQS with
// DelaySeconds when the delay, rounded up to whole seconds, is at most
// MaxQueueDelay; otherwise as a one-time schedule at now+delay (rounded
// up to the next whole second, in UTC) that Scheduler deletes once it has
// fired. A negative delay means now. The body is always env.Encode()'s
// output: nothing but a valid envelope ever reaches a queue.
//
// Retrying Send with the same envelope is safe on the scheduler route:
// the name and client token derive from (action, operation id, expected
// revision, attempt), and an existing schedule of that name counts as
// success. On the SQS route a retry can send a second message; consumers
// tolerate that, as they must SQS's at-least-once delivery anyway. Both
// copies carry the same expected revision: a copy handled after the other
// one wrote is acknowledged as obsolete, and so is a dispatch that finds
// the other copy holding the submission claim. Two copies handled at once
// race on the record's conditional write, and what both may do costs
// nothing twice: never a second POST, at most a second read of the job, a
// second copy of an output to the same key, or an overdue observation
// re-armed at the current revision. A schedule that has already fired is
// deleted, so a retry later than the delay creates it again: a duplicate
// of the same kind.
//
// The route is returned with errors too, so failures can be counted per
// path; it is empty when the envelope was refused before choosing one.
func (d *Dispatcher) Send(ctx context.Context, env message.Envelope, delay time.Duration) (Route, error) {
	body, err := env.Encode()
	if err != nil {
		return "", fmt.Errorf("dispatch %s: %w", env.Action, err)
	}
	target, ok := d.cfg.Queues[env.Action]
	if !ok {
		return "", fmt.Errorf("dispatch %s for operation %s: no queue configured for the action", env.Action, env.OperationID)
	}
	if delay < 0 {
		delay = 0
	}
	if ceilSecond(delay) <= d.cfg.MaxQueueDelay {
		if _, err := d.sender.Send(ctx, target.URL, body, delay); err != nil {
			return RouteSQS, fmt.Errorf("dispatch %s for operation %s r%d via sqs: %w", env.Action, env.OperationID, env.ExpectedRevision, err)
		}
		return RouteSQS, nil
	}
	if d.sched == nil || target.ARN == "" {
		// A delay longer than the action's MaxDelay declared: the
		// scheduler settings were not asked for.
		return RouteScheduler, fmt.Errorf("dispatch %s for operation %s r%d, delay %v (longest expected %v): %w",
			env.Action, env.OperationID, env.ExpectedRevision, delay, d.cfg.MaxDelay[env.Action], ErrNoScheduler)
	}
	s := Schedule{
		Name:        ScheduleName(d.cfg.NamePrefix, env),
		Group:       d.cfg.ScheduleGroup,
		At:          ceilSecondTime(d.clock.Now().Add(delay)),
		TargetARN:   target.ARN,
		RoleARN:     d.cfg.SchedulerRoleARN,
		Input:       string(body),
		ClientToken: clientToken(d.cfg.NamePrefix, env),
	}
	if err := d.sched.CreateSchedule(ctx, s); err != nil && !errors.Is(err, ErrScheduleExists) {
		return RouteScheduler, fmt.Errorf("dispatch %s for operation %s r%d via scheduler: %w", env.Action, env.OperationID, env.ExpectedRevision, err)
	}
	return RouteScheduler, nil
}

// ceilSecond rounds d up to whole seconds, as SQS's DelaySeconds does.
func ceilSecond(d time.Duration) time.Duration {
	if r := d % time.Second; r > 0 {
		return d - r + time.Second
	}
	return d
}

// ceilSecondTime rounds t up to the next whole second in UTC: at()
// expressions have second precision, and rounding down would deliver
// before the delay has passed.
func ceilSecondTime(t time.Time) time.Time {
	t = t.UTC()
	if tr := t.Truncate(time.Second); !tr.Equal(t) {
		return tr.Add(time.Second)
	}
	return t
}
