//go:build integration

package dynamo_test

import (
	"testing"

	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/dynamo"
	"github.com/genjobs/genjobs/internal/store/storetest"
)

func openBench(b *testing.B) store.Store {
	client := dynamoClient(b)
	return dynamo.New(client, tempTable(b, client))
}

func BenchmarkUpdate(b *testing.B) { storetest.BenchUpdate(b, openBench(b)) }

func BenchmarkGet(b *testing.B) { storetest.BenchGet(b, openBench(b)) }
