package dynamo

import "testing"

func TestStatusShardInRange(t *testing.T) {
	for _, id := range []string{"a", "op-1", "op-2", ""} {
		if s := statusShard(id); s < 0 || s >= StatusShards {
			t.Fatalf("shard %d of %q out of range", s, id)
		}
	}
}
