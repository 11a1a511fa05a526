package dynamo

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genjobs/genjobs/internal/operation"
)

func TestItemSize(t *testing.T) {
	t.Parallel()
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	for name, c := range map[string]struct {
		item map[string]types.AttributeValue
		want int
	}{
		"string":                 {map[string]types.AttributeValue{"ab": s("xyz")}, 5},
		"number, zeros trimmed":  {map[string]types.AttributeValue{"n": n("1200")}, 1 + 1 + 1},
		"number, 19 digits":      {map[string]types.AttributeValue{"t": n("1773480413589793238")}, 1 + 10 + 1},
		"bool and null":          {map[string]types.AttributeValue{"b": &types.AttributeValueMemberBOOL{}, "z": &types.AttributeValueMemberNULL{Value: true}}, 4},
		"map: 3 + 1 per element": {map[string]types.AttributeValue{"m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"a": s("xy")}}}, 1 + 3 + 1 + 1 + 2},
		"list":                   {map[string]types.AttributeValue{"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{s("x"), s("yz")}}}, 1 + 3 + 2 + 3},
		"binary":                 {map[string]types.AttributeValue{"in": &types.AttributeValueMemberB{Value: []byte("{}")}}, 4},
	} {
		if got := ItemSize(c.item); got != c.want {
			t.Errorf("%s: %d bytes, want %d", name, got, c.want)
		}
	}
}

func TestIndexWriteUnits(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	item := func(r operation.Record) map[string]types.AttributeValue {
		t.Helper()
		it, err := RecordItem(r)
		if err != nil {
			t.Fatal(err)
		}
		return it
	}
	due := func(at time.Time, obs int) map[string]types.AttributeValue {
		return item(operation.Record{OperationID: "op-1", Phase: operation.PhaseAccepted,
			Schedule: &operation.NextAction{Action: "observe_generation", Due: at}, Counters: operation.Counters{Observations: obs}})
	}
	done := item(operation.Record{OperationID: "op-1", Phase: operation.PhaseDelivered})
	a, a2, b := due(t0, 1), due(t0, 2), due(t0.Add(time.Second), 1)
	for name, c := range map[string]struct {
		old, new map[string]types.AttributeValue
		want     int
	}{
		"enter": {nil, a, 1}, "same key, other change": {a, a2, 0}, "key moves": {a, b, 2},
		"leave": {a, done, 1}, "never in": {done, done, 0},
	} {
		if got := IndexWriteUnits(c.old, c.new); got != c.want {
			t.Errorf("%s: %d index write units, want %d", name, got, c.want)
		}
	}
}
