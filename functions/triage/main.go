// Command triage is the DLQ-fed function: one review record per
// dead-lettered message, never an action.
// This file is the composition root only: environment and clients
// (coldstart), the handler from the table (internal/stack), lambda.Start.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/genjobs/genjobs/internal/coldstart"
)

func main() {
	fn, d, err := coldstart.Load(context.Background(), "triage")
	if err != nil {
		coldstart.Fatal("triage", err)
	}
	lambda.Start(fn.Build(d).Lambda)
}
