package triage

import "github.com/genjobs/genjobs/internal/config"

// Needs is what the triage function needs of its environment: it writes
// reviews and sends nothing.
var Needs = config.Spec{Needs: []config.Need{config.NeedTable, config.NeedConcurrency}}
