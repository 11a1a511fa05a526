package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
)

type fakeExtender struct {
	err   error
	calls []time.Duration
}

func (f *fakeExtender) ChangeVisibility(_ context.Context, _, _ string, timeout time.Duration) error {
	f.calls = append(f.calls, timeout)
	return f.err
}

func TestEnsure(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		elapsed   time.Duration
		need      time.Duration
		extErr    error
		wantErr   bool
		wantCalls []time.Duration
		wantLeft  time.Duration
	}{
		{"enough left: no call", 10 * time.Second, 30 * time.Second, nil, false, nil, 50 * time.Second},
		{"renews to the visibility", 40 * time.Second, 30 * time.Second, nil, false, []time.Duration{time.Minute}, time.Minute},
		{"renews to a longer need", 40 * time.Second, 90 * time.Second, nil, false, []time.Duration{90 * time.Second}, 90 * time.Second},
		{"renewal fails: lost", 40 * time.Second, 30 * time.Second, errors.New("throttled"), true, []time.Duration{time.Minute}, 20 * time.Second},
		{"expired: lost without trying", 61 * time.Second, time.Second, nil, true, nil, -time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewManual(start)
			ext := &fakeExtender{err: tt.extErr}
			failures := 0
			l := NewLease(clk, ext, "q", "h", time.Minute, start)
			l.OnRenewalFailure = func(error) { failures++ }
			clk.Advance(tt.elapsed)
			err := l.Ensure(context.Background(), tt.need)
			if tt.wantErr != (err != nil) || (err != nil && !errors.Is(err, ErrLeaseLost)) {
				t.Fatalf("Ensure = %v, wantErr %t (ErrLeaseLost)", err, tt.wantErr)
			}
			if len(ext.calls) != len(tt.wantCalls) || (len(ext.calls) > 0 && ext.calls[0] != tt.wantCalls[0]) {
				t.Fatalf("calls = %v, want %v", ext.calls, tt.wantCalls)
			}
			if l.Remaining() != tt.wantLeft {
				t.Fatalf("remaining = %v, want %v", l.Remaining(), tt.wantLeft)
			}
			if tt.wantErr != l.Lost() {
				t.Fatalf("Lost() = %t", l.Lost())
			}
			if (tt.extErr != nil) != (failures == 1) {
				t.Fatalf("renewal failures counted %d", failures)
			}
			if tt.wantErr {
				if err := l.Ensure(context.Background(), 0); !errors.Is(err, ErrLeaseLost) {
					t.Fatal("a lost lease came back")
				}
			}
		})
	}
}

func TestRenewAlwaysAsksTheQueue(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		elapsed   time.Duration
		need      time.Duration
		extErr    error
		wantErr   bool
		wantCalls []time.Duration
		wantLeft  time.Duration
	}{
		{"plenty left by estimate: renews all the same", 10 * time.Second, 30 * time.Second, nil, false, []time.Duration{time.Minute}, time.Minute},
		{"renews to a longer need", 10 * time.Second, 90 * time.Second, nil, false, []time.Duration{90 * time.Second}, 90 * time.Second},
		{"the queue says no: lost though the estimate runs", 10 * time.Second, 30 * time.Second, errors.New("receipt handle is stale"), true, []time.Duration{time.Minute}, 50 * time.Second},
		{"expired by estimate: lost without asking", 61 * time.Second, time.Second, nil, true, nil, -time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewManual(start)
			ext := &fakeExtender{err: tt.extErr}
			l := NewLease(clk, ext, "q", "h", time.Minute, start)
			clk.Advance(tt.elapsed)
			err := l.Renew(context.Background(), tt.need)
			if tt.wantErr != (err != nil) || (err != nil && !errors.Is(err, ErrLeaseLost)) {
				t.Fatalf("Renew = %v, wantErr %t (ErrLeaseLost)", err, tt.wantErr)
			}
			if len(ext.calls) != len(tt.wantCalls) || (len(ext.calls) > 0 && ext.calls[0] != tt.wantCalls[0]) {
				t.Fatalf("calls = %v, want %v", ext.calls, tt.wantCalls)
			}
			if l.Remaining() != tt.wantLeft {
				t.Fatalf("remaining = %v, want %v", l.Remaining(), tt.wantLeft)
			}
			if tt.wantErr {
				if err := l.Renew(context.Background(), 0); !errors.Is(err, ErrLeaseLost) || len(ext.calls) > 1 {
					t.Fatalf("a lost lease came back (%v) or asked again (%d calls)", err, len(ext.calls))
				}
			}
		})
	}
}

// TestLeaseCountsFromTheGrant: the lease runs from the receive, not from
// when the handler reached the record (issue 9, hole 8): received at t0
// with a minute's visibility and built 25 s later, it has 35 s left, and
// Ensure(40s) must ask the queue rather than trust the rest.
func TestLeaseCountsFromTheGrant(t *testing.T) {
	t.Parallel()
	received := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	clk := clock.NewManual(received.Add(25 * time.Second))
	ext := &fakeExtender{}
	l := NewLease(clk, ext, "q", "h", time.Minute, received)
	if got := l.Remaining(); got != 35*time.Second {
		t.Fatalf("remaining = %v, want 35s (a minute from the receive, 25 s ago)", got)
	}
	if err := l.Ensure(context.Background(), 40*time.Second); err != nil {
		t.Fatalf("Ensure = %v", err)
	}
	if len(ext.calls) != 1 {
		t.Fatalf("Ensure(40s) with 35 s left made %d renewals, want 1", len(ext.calls))
	}
}
