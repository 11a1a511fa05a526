package store

import (
	"testing"
	"time"
)

func TestSortableKeys(t *testing.T) {
	// time.RFC3339Nano would trim .100000000 to .1 and sort it after .099.
	a := time.Date(2025, 1, 1, 0, 0, 0, 99_000_000, time.UTC)
	b := time.Date(2025, 1, 1, 0, 0, 0, 100_000_000, time.UTC)
	c := time.Date(2025, 1, 1, 1, 0, 0, 0, time.FixedZone("early", 2*3600)) // 23:00 the day before in UTC
	if !(indexKey(c, "z") < indexKey(a, "a") && indexKey(a, "z") < indexKey(b, "a")) {
		t.Fatalf("index keys out of time order: %q %q %q", indexKey(c, "z"), indexKey(a, "z"), indexKey(b, "a"))
	}
	if len(sortableTime(a)) != len(sortableTime(b)) {
		t.Fatalf("sortable times differ in width: %q %q", sortableTime(a), sortableTime(b))
	}
	if !(indexKey(b, "op-\u00e9\u4e16") <= indexBound(b) && indexBound(b) < indexKey(b.Add(time.Nanosecond), "")) {
		t.Fatal("index bound does not cover exactly the keys at its time")
	}
	if auditKey(9) >= auditKey(10) || len(auditKey(1)) != 20 {
		t.Fatalf("audit keys out of order: %q %q", auditKey(9), auditKey(10))
	}
	for _, id := range []string{"a", "op-1", "op-2", ""} {
		if s := statusShard(id); s < 0 || s >= StatusShards {
			t.Fatalf("shard %d of %q out of range", s, id)
		}
	}
}
