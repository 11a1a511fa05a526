package sweep

import (
	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/message"
)

// Needs is what the sweep function needs of its environment. It re-arms
// an overdue record's next action, whichever it is, at once.
var Needs = config.Spec{
	Needs:     []config.Need{config.NeedTable, config.NeedSweep, config.NeedRetention},
	FollowUps: config.AtOnce(message.Actions...),
}
