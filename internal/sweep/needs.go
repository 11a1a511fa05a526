package sweep

import (
	"fmt"
	"time"

	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/message"
)

// Needs is what the sweep function needs of its environment. It re-arms
// an overdue record's next action, whichever it is, at once, and fits
// observe's concurrency to its queue's load.
var Needs = config.Spec{
	Needs:     []config.Need{config.NeedTable, config.NeedEvents, config.NeedSweep, config.NeedRetention, config.NeedSubmitTimeout, config.NeedFit},
	FollowUps: config.AtOnce(message.Actions...),
	Check:     func(c config.Config) error { return Configured(c).Check(c.SubmitTimeout) },
}

// Configured is the sweep's Config as the function reads it from its
// environment.
func Configured(c config.Config) Config {
	return Config{ClaimTimeout: c.SweepClaimTimeout, OverdueAfter: c.SweepOverdue, Hold: c.Hold, MaxConcurrency: c.ObserveMaxConcurrency}
}

// Check holds the claim timeout against the submit function's timeout,
// naming both: a claim younger than that may have a live POST, which the
// sweep must never mark uncertain (its outcome would then wait for a
// reconciliation, though the POST is still being answered).
func (c Config) Check(submitTimeout time.Duration) error {
	if c = c.Defaults(); c.ClaimTimeout <= submitTimeout {
		return fmt.Errorf("%s is %v, want more than %s %v (the submit function's timeout): the sweep would mark a live POST uncertain",
			config.EnvSweepClaim, c.ClaimTimeout, config.EnvSubmitTimeout, submitTimeout)
	}
	return nil
}
