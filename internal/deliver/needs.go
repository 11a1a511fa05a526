package deliver

import (
	"time"

	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/message"
)

// Needs is what the deliver function needs of its environment.
var Needs = config.Spec{
	Needs: []config.Need{config.NeedTable, config.NeedEvents, config.NeedGenace, config.NeedVisibility, config.NeedConcurrency, config.NeedArtifacts, config.NeedRetention, config.NeedOverdue},
	// The function runs with the default Config's retry backoff.
	FollowUps: func(config.Config) map[message.Action]time.Duration { return Config{}.Defaults().FollowUps() },
}

// FollowUps is the longest delay the handler asks its sender for, per
// action it sends: only deliveries, retried or handed on within the retry
// backoff's cap.
func (c Config) FollowUps() map[message.Action]time.Duration {
	return map[message.Action]time.Duration{message.ActionDeliverArtifacts: c.Retry.Cap}
}
