package benchmark

import (
	"testing"
	"time"
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
		{"the last read was refused", []read{{arrived: at(1), answered: at(1)}, {arrived: at(6), answered: at(36), wait: w}}, 3, BlindGap},
		{"a read was held at the finish", []read{{arrived: at(1), answered: at(31), wait: w}, {arrived: at(30.5), answered: at(40), wait: w}}, 40, BlindHeld},
		{"held, answered at the finish itself", []read{{arrived: at(1), answered: at(10), wait: w}}, 10, BlindHeld},
	} {
		if got := blind(tc.reads, at(tc.end)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
