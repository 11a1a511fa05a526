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
	if !(IndexKey(c, "z") < IndexKey(a, "a") && IndexKey(a, "z") < IndexKey(b, "a")) {
		t.Fatalf("index keys out of time order: %q %q %q", IndexKey(c, "z"), IndexKey(a, "z"), IndexKey(b, "a"))
	}
	if len(SortableTime(a)) != len(SortableTime(b)) {
		t.Fatalf("sortable times differ in width: %q %q", SortableTime(a), SortableTime(b))
	}
	if !(IndexKey(b, "op-\u00e9\u4e16") <= IndexBound(b) && IndexBound(b) < IndexKey(b.Add(time.Nanosecond), "")) {
		t.Fatal("index bound does not cover exactly the keys at its time")
	}
	if AuditKey(9) >= AuditKey(10) || len(AuditKey(1)) != 20 {
		t.Fatalf("audit keys out of order: %q %q", AuditKey(9), AuditKey(10))
	}
}
