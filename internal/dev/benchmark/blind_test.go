package benchmark

import (
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// A late finish is put down to what Genace held of the job's reads when
// it finished.
func TestBlind(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	const w = 30 * time.Second
	for _, tc := range []struct {
		name  string
		reads []read
		end   float64
		want  Blind
	}{
		{"no read yet", nil, 1, BlindBeforeFirstRead},
		{"the first read arrived after the finish", []read{{arrived: at(1.2), answered: at(31.2), wait: w}}, 0.7, BlindBeforeFirstRead},
		{"the last read was woken by queued→running", []read{{arrived: at(1.2), answered: at(2), wait: w}, {arrived: at(2.3), answered: at(32.3), wait: w}}, 2.1, BlindAfterChange},
		{"the last read ran out its window", []read{{arrived: at(1), answered: at(31), wait: w}, {arrived: at(31.2), answered: at(61.2), wait: w}}, 31.1, BlindGap},
		{"the last read was given up", []read{{arrived: at(1.2), answered: at(2), wait: w, cancelled: true}, {arrived: at(2.3), answered: at(32.3), wait: w}}, 2.1, BlindGap},
		{"the last read was refused", []read{{arrived: at(1), answered: at(1)}, {arrived: at(6), answered: at(36), wait: w}}, 3, BlindGap},
		{"a read was held at the finish", []read{{arrived: at(1), answered: at(31), wait: w}, {arrived: at(30.5), answered: at(40), wait: w}}, 40, BlindHeld},
		{"held, answered at the finish itself", []read{{arrived: at(1), answered: at(10), wait: w}}, 10, BlindHeld},
	} {
		if got := blind(tc.reads, at(tc.end)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A receive's pickup counts from when its oldest message became visible,
// not from its send: a delayed message (a hand-over's follow-up) is no
// older for its delay. Before, it was taken at once.
func TestPickupCountsFromVisible(t *testing.T) {
	t.Parallel()
	now := time.Now()
	sent := strconv.FormatInt(now.Add(-10*time.Second).UnixMilli(), 10)
	msgs := []events.SQSMessage{{ReceiptHandle: "h1", Attributes: map[string]string{"SentTimestamp": sent}}}
	shown := func(h string) (time.Time, bool) { return now.Add(-100 * time.Millisecond), h == "h1" }
	if left := pickupLeft(msgs, 500*time.Millisecond, shown); left < 350*time.Millisecond || left > 400*time.Millisecond {
		t.Errorf("pickup left for a message shown 100 ms ago = %v, want about 400 ms", left)
	}
	unknown := func(string) (time.Time, bool) { return time.Time{}, false }
	if left := pickupLeft(msgs, 500*time.Millisecond, unknown); left != 0 {
		t.Errorf("pickup left for a message sent 10 s ago, visible time unknown = %v, want 0", left)
	}
}
