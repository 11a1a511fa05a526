//go:build integration

package handlertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/genjobs/genjobs/internal/dev/testenv"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/dynamo"
)

func init() {
	openDynamo = func(t testing.TB) store.Store {
		client, table := DynamoTable(t)
		return dynamo.New(client, table)
	}
}

// DynamoTable creates a fresh operations table in DynamoDB Local (deleted
// when the test ends) and returns a client and its name. It skips, or
// fails under GENJOBS_REQUIRE_INTEGRATION, without an endpoint.
func DynamoTable(t testing.TB) (*dynamodb.Client, string) {
	t.Helper()
	testenv.Endpoint(t, "AWS_ENDPOINT_URL_DYNAMODB")
	ctx := context.Background()
	client, err := dynamo.NewClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	table := "genjobs-test-" + hex.EncodeToString(b)
	if err := dynamo.EnsureTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	return client, table
}
