// Command deliver is the deliver function: it copies a succeeded
// operation's outputs into the S3 artifact store, each verified against
// the sha256 Genace reported and reused when already stored, then marks
// the operation delivered.
// This file is the composition root only: environment and clients
// (coldstart), the handler from the table (internal/stack), lambda.Start.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/genjobs/genjobs/internal/coldstart"
)

func main() {
	fn, d, err := coldstart.Load(context.Background(), "deliver")
	if err != nil {
		coldstart.Fatal("deliver", err)
	}
	lambda.Start(fn.Build(d).Lambda)
}
