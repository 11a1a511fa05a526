// Command sweep is the scheduled safety net: it re-arms overdue chains and
// expires stale submission claims. This file is the composition root only.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/genjobs/genjobs/internal/coldstart"
	"github.com/genjobs/genjobs/internal/sweep"
)

func main() {
	d, err := coldstart.Load(context.Background(), "sweep", sweep.Needs)
	if err != nil {
		coldstart.Fatal("sweep", err)
	}
	lambda.Start(sweep.New(sweep.Deps{Store: d.Store, Sender: d.Dispatcher, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics}, sweep.Configured(d.Config)).Handle)
}
