// Command sweep is the scheduled safety net: it re-arms overdue chains and
// expires stale submission claims.
// This file is the composition root only: environment and clients
// (coldstart), the handler from the table (internal/stack), lambda.Start.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/genjobs/genjobs/internal/coldstart"
)

func main() {
	fn, d, err := coldstart.Load(context.Background(), "sweep")
	if err != nil {
		coldstart.Fatal("sweep", err)
	}
	lambda.Start(fn.Build(d).Lambda)
}
