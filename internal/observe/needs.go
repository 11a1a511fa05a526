package observe

import (
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
	Needs: []config.Need{config.NeedTable, config.NeedGenace, config.NeedVisibility, config.NeedConcurrency, config.NeedPolicies, config.NeedRetention},
	FollowUps: func(c config.Config) map[message.Action]time.Duration {
		return FollowUps(schedule.NewObservation(c.Policies))
	},
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
