package observe

import (
	"errors"
	"fmt"
	"time"

	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/schedule"
)

// Needs is what the observe function needs of its environment. Its
// observations are delayed by OBSERVE_POLICIES, up to the policies'
// longest cap: beyond SQS's 15 minutes (the defaults' 30) they go through
// EventBridge Scheduler, which then needs its settings.
var Needs = config.Spec{
	Needs: []config.Need{config.NeedTable, config.NeedEvents, config.NeedGenace, config.NeedVisibility, config.NeedConcurrency, config.NeedPolicies, config.NeedRetention,
		config.NeedOverdue, config.NeedBatchSize, config.NeedHold},
	FollowUps: func(c config.Config) map[message.Action]time.Duration {
		return FollowUps(schedule.NewObservation(c.Policies))
	},
	Check: func(c config.Config) error { return Configured(c).Check(c.BatchSize) },
}

// Configured is the handler's Config as the function reads it from its
// environment.
func Configured(c config.Config) Config {
	return Config{QueueURL: c.Queues[message.ActionObserveGeneration].URL, Visibility: c.Visibility, Concurrency: c.Concurrency, OverdueAfter: c.SweepOverdue, Hold: c.Hold}
}

// Check holds the settings against each other and the handler's own
// timing, each error naming both values: a quiet chain writes at least
// every Chain, so each write must land before the sweep takes the record
// as overdue (or the sweep re-arms every live chain, however it
// refreshes); every record of a batch of batchSize must be observed at
// once (a record waiting for a slot waits out a whole chain). Nothing
// ties Span to the visibility: the lease renews as a chain outlasts it
// (window, Lease.Ensure), and deployed a chain ends before the function's
// deadline, which SQS keeps within the queue's visibility (a Lambda
// queue's visibility must be at least the function's timeout).
func (c Config) Check(batchSize int) error {
	c = c.Defaults()
	need := c.Chain + c.Overhead
	var errs []error
	if c.OverdueAfter <= need {
		errs = append(errs, fmt.Errorf("%s is %v, want more than observe's chain %v plus its write %v (%v): the sweep would re-arm live chains",
			config.EnvSweepOverdue, c.OverdueAfter, c.Chain, c.Overhead, need))
	}
	if c.Concurrency < batchSize {
		errs = append(errs, fmt.Errorf("%s is %d, want at least %s %d: a record waiting for a slot would wait out a whole chain",
			config.EnvConcurrency, c.Concurrency, config.EnvBatchSize, batchSize))
	}
	return errors.Join(errs...)
}

// FollowUps is the longest delay the handler asks its sender for, per
// action it sends: the next observation (the delay policy's longest) and
// the delivery of a succeeded job (at once).
func FollowUps(d Delays) map[message.Action]time.Duration {
	return map[message.Action]time.Duration{
		message.ActionObserveGeneration: d.Longest(),
		message.ActionDeliverArtifacts:  0,
	}
}
