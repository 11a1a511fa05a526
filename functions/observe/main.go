// Command observe is the observe function: long polls chained back to
// back per message, a revision-guarded snapshot write per change, and
// exactly one follow-up.
// This file is the composition root only: environment and clients
// (coldstart, which builds the feed's receiver on the function's own
// queue once per cold start, OBSERVE_HOLD bounding what an invocation
// holds), the handler from the table (internal/stack), lambda.Start.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/genjobs/genjobs/internal/coldstart"
)

func main() {
	fn, d, err := coldstart.Load(context.Background(), "observe")
	if err != nil {
		coldstart.Fatal("observe", err)
	}
	lambda.Start(fn.Build(d).Lambda)
}
