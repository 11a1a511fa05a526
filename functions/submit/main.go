// Command submit is the submit function: SQS dispatch messages in, at most
// one POST per operation out. This file is the composition root only.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/genjobs/genjobs/internal/coldstart"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/submit"
)

func main() {
	ctx := context.Background()
	d, err := coldstart.Load(ctx, "submit", submit.Needs)
	if err != nil {
		coldstart.Fatal("submit", err)
	}
	h := submit.New(submit.Deps{
		Store: d.Store, Genace: d.Genace, Extender: d.Queue, Sender: d.Dispatcher, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics,
	}, submit.Config{
		QueueURL: d.Config.Queues[message.ActionSubmitGeneration].URL, Visibility: d.Config.Visibility, Concurrency: d.Config.Concurrency,
		OverdueAfter: d.Config.SweepOverdue,
	})
	lambda.Start(h.Handle)
}
