// Command observe is the observe function: long polls chained back to
// back per message, a revision-guarded snapshot write per change, and
// exactly one follow-up.
// This file is the composition root only.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/genjobs/genjobs/internal/coldstart"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/schedule"
)

func main() {
	ctx := context.Background()
	d, err := coldstart.Load(ctx, "observe", observe.Needs)
	if err != nil {
		coldstart.Fatal("observe", err)
	}
	h := observe.New(observe.Deps{
		Store: d.Store, Genace: d.Genace, Delays: schedule.NewObservation(d.Config.Policies), Extender: d.Queue, Sender: d.Dispatcher, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics,
	}, observe.Configured(d.Config))
	lambda.Start(h.Handle)
}
