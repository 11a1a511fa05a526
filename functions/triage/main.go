// Command triage is the DLQ-fed function: one review record per
// dead-lettered message, never an action. This file is the composition
// root only.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/genjobs/genjobs/internal/coldstart"
	"github.com/genjobs/genjobs/internal/triage"
)

func main() {
	d, err := coldstart.Load(context.Background(), "triage", triage.Needs)
	if err != nil {
		coldstart.Fatal("triage", err)
	}
	lambda.Start(triage.New(triage.Deps{Store: d.Store, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics}, triage.Config{Concurrency: d.Config.Concurrency}).Handle)
}
