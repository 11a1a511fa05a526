package submit

import (
	"time"

	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/message"
)

// Needs is what the submit function needs of its environment.
var Needs = config.Spec{
	Needs: []config.Need{config.NeedTable, config.NeedEvents, config.NeedGenace, config.NeedVisibility, config.NeedConcurrency, config.NeedRetention, config.NeedOverdue},
	// The function runs with the default Config's delays.
	FollowUps: func(config.Config) map[message.Action]time.Duration { return Config{}.Defaults().FollowUps() },
}

// FollowUps is the longest delay the handler asks its sender for, per
// action it sends: a dispatch again after a 429 (capped at SQS's limit)
// or after a POST that never left (ConnectBackoff); the first observation,
// and a delivery for a job found already succeeded, at once.
func (c Config) FollowUps() map[message.Action]time.Duration {
	return map[message.Action]time.Duration{
		message.ActionSubmitGeneration:  max(maxRetryDelay, c.ConnectBackoff),
		message.ActionObserveGeneration: 0,
		message.ActionDeliverArtifacts:  0,
	}
}
