//go:build integration

package store_test

import (
	"testing"

	"github.com/genjobs/genjobs/internal/store"
)

func openBenchDynamo(b *testing.B) store.Store {
	client := dynamoClient(b)
	return store.NewDynamo(client, tempTable(b, client))
}

func BenchmarkDynamoUpdate(b *testing.B) { benchUpdate(b, openBenchDynamo(b)) }

func BenchmarkDynamoGet(b *testing.B) { benchGet(b, openBenchDynamo(b)) }
