// Command deliver is the deliver function: it copies a succeeded
// operation's outputs into the artifact store, each verified against the
// sha256 Genace reported and reused when already stored, then marks the
// operation delivered. This file is the composition root only.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/coldstart"
	"github.com/genjobs/genjobs/internal/deliver"
	"github.com/genjobs/genjobs/internal/message"
)

func main() {
	ctx := context.Background()
	d, err := coldstart.Load(ctx, "deliver", deliver.Needs)
	if err != nil {
		coldstart.Fatal("deliver", err)
	}
	// The endpoint comes from the SDK's AWS_ENDPOINT_URL_S3, like every client.
	artifacts := artifact.NewS3(s3.NewFromConfig(d.AWS), d.Config.ArtifactBucket)
	h := deliver.New(deliver.Deps{
		Store: d.Store, Genace: d.Genace, Artifacts: artifacts, Extender: d.Queue, Sender: d.Dispatcher, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics,
	}, deliver.Config{
		QueueURL: d.Config.Queues[message.ActionDeliverArtifacts].URL, Visibility: d.Config.Visibility, Concurrency: d.Config.Concurrency,
		OverdueAfter: d.Config.SweepOverdue,
	})
	lambda.Start(h.Handle)
}
