// Command intake is the application's way in: the intake API
// (internal/intake, openapi.yaml) behind a Lambda function URL with
// AWS_IAM auth, creating, changing and cancelling operations and
// answering their status.
// This file is the composition root only: environment and clients
// (coldstart), the handler from the table (internal/stack), lambda.Start.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/genjobs/genjobs/internal/coldstart"
)

func main() {
	fn, d, err := coldstart.Load(context.Background(), "intake")
	if err != nil {
		coldstart.Fatal("intake", err)
	}
	lambda.Start(fn.Build(d).Lambda)
}
