// Command submit is the submit function: SQS dispatch messages in, at most
// one POST per operation out.
// This file is the composition root only: environment and clients
// (coldstart), the handler from the table (internal/stack), lambda.Start.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/genjobs/genjobs/internal/coldstart"
)

func main() {
	fn, d, err := coldstart.Load(context.Background(), "submit")
	if err != nil {
		coldstart.Fatal("submit", err)
	}
	lambda.Start(fn.Build(d).Lambda)
}
