//go:build deps

// Package deps pins modules before the code that uses them lands.
package deps

import (
	_ "github.com/aws/aws-lambda-go/lambda"
	_ "github.com/aws/aws-sdk-go-v2/config"
	_ "github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	_ "github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	_ "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	_ "github.com/aws/aws-sdk-go-v2/service/s3"
	_ "github.com/aws/aws-sdk-go-v2/service/scheduler"
	_ "github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	_ "github.com/aws/aws-sdk-go-v2/service/sqs"
	_ "github.com/awslabs/goformation/v7"
	_ "github.com/johannesboyne/gofakes3"
	_ "go.etcd.io/bbolt"
	_ "gopkg.in/yaml.v3"
)
