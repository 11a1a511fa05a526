package faultsim_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/deliver"
	"github.com/genjobs/genjobs/internal/dev/faultsim"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store"
)

// TestPersistentFaultsAreReported runs each persistent fault class alone
// on the deployed timing. While the handlers do not park a failure that
// persists (faultsim.PersistentInDefault false: observe and deliver fail
// the message at their caps and write nothing, and the sweep re-arms the
// record before the message can dead-letter, forever), every struck
// operation must be reported as a liveness violation: that is what the
// class is for. Once they park (PersistentInDefault true), the same runs
// must have no violation at all and every struck operation parked.
func TestPersistentFaultsAreReported(t *testing.T) {
	t.Parallel()
	for _, f := range faultsim.PersistentKinds {
		t.Run(string(f), func(t *testing.T) {
			t.Parallel()
			res, err := faultsim.Run(faultsim.Config{Seed: 5, Operations: 100, Faults: faultsim.Faults{f: 0.05}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Injected[f] == 0 {
				t.Fatalf("%s struck no operation", f)
			}
			var live []faultsim.Violation
			for _, v := range res.Violations {
				if v.Invariant == faultsim.InvLiveness {
					live = append(live, v)
				}
			}
			var out strings.Builder
			res.WriteSummary(&out)
			if !faultsim.PersistentInDefault {
				if int64(len(live)) < res.Injected[f] {
					t.Fatalf("%d operations struck by %s, %d liveness violations:\n%s", res.Injected[f], f, len(live), out.String())
				}
				t.Logf("%d operations struck, %d liveness violations, e.g. %s", res.Injected[f], len(live), live[0])
				return
			}
			if len(res.Violations) > 0 || res.LivenessMax > res.LivenessBound {
				t.Fatalf("%s with parking:\n%s", f, out.String())
			}
		})
	}
}

// TestLivenessBound derives the bound of the deployed handlers by hand:
// a look at most 2 min after the render's end (the simulation's
// observation cap), 20 GETs 2 s doubling capped at 1 min (+20 %), 10
// copies 10 s doubling capped at 15 min (+20 %), 10 min of refund reads
// and one more read 1 min later, and 10 min (5 overdue + 5 cadence) per
// chain a fault ended.
func TestLivenessBound(t *testing.T) {
	t.Parallel()
	timing := faultsim.LivenessTiming{
		Look:         2 * time.Minute,
		ReadFailures: 20, ReadRetry: schedule.Backoff{Base: 2 * time.Second, Cap: time.Minute, Multiplier: 2, Jitter: 0.2},
		CopyFailures: 10, CopyRetry: schedule.Backoff{Base: 10 * time.Second, Cap: 15 * time.Minute, Multiplier: 2, Jitter: 0.2},
		Accounting: 10 * time.Minute, AccountingRetry: time.Minute, Rearm: 10 * time.Minute,
	}
	// Reads: 2.4+4.8+9.6+19.2+38.4 s, then 14 delays of 60 s.
	reads := 74400*time.Millisecond + 14*time.Minute
	// Copies: 12+24+48+96+192+384+768 s, then 2 delays of 900 s.
	copies := 1524*time.Second + 2*15*time.Minute
	want := 2*time.Minute + reads + copies + 10*time.Minute + time.Minute
	if got := timing.Bound(0); got != want {
		t.Errorf("Bound(0) = %s, want %s", got, want)
	}
	if got := timing.Bound(3); got != want+30*time.Minute {
		t.Errorf("Bound(3) = %s, want %s", got, want+30*time.Minute)
	}
}

// TestRearm: a chain a fault ended waits for the overdue threshold (5
// min), then a cadence (5 min) per sweep run its invocation's chains
// need at 500 a run: one for the simulation's batch of 10, two for the
// 1,000 a deployed invocation holds (OBSERVE_HOLD).
func TestRearm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		held int
		want time.Duration
	}{{10, 10 * time.Minute}, {500, 10 * time.Minute}, {501, 15 * time.Minute}, {observe.DefaultHold, 20 * time.Minute}} {
		if got := faultsim.Rearm(tc.held); got != tc.want {
			t.Errorf("Rearm(%d) = %s, want %s", tc.held, got, tc.want)
		}
	}
}

// TestLivenessOf: the latency is measured from the render's end to the
// first time the record was settled from then on.
func TestLivenessOf(t *testing.T) {
	t.Parallel()
	at := func(m int) time.Time { return time.Date(2030, 1, 7, 8, m, 0, 0, time.UTC) }
	cases := []struct {
		name     string
		settles  []time.Time
		finished time.Time
		want     time.Duration
		ok       bool
	}{
		{"never settled", nil, at(5), 0, false},
		{"settled after the end", []time.Time{at(9)}, at(5), 4 * time.Minute, true},
		{"settled before the end and still", []time.Time{at(1)}, at(5), 0, true},
		{"settled, resumed before the end, settled again", []time.Time{at(1), at(3), at(20)}, at(5), 15 * time.Minute, true},
		{"settled, resumed before the end, never again", []time.Time{at(1), at(3)}, at(5), 0, false},
		{"settled across the end, resumed after", []time.Time{at(1), at(7)}, at(5), 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := faultsim.LivenessOf(tc.settles, tc.finished)
			if got != tc.want || ok != tc.ok {
				t.Errorf("LivenessOf = %s, %t; want %s, %t", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// forgetFailures is a planted bug: every write of a handler drops the
// record's count of consecutive failed reads or copies, so no failure cap
// is ever reached and a GET that always fails is retried forever.
type forgetFailures struct{ faultsim.Records }

func (s forgetFailures) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	rec.Counters.ReadFailures = 0
	return s.Records.Update(ctx, rec, expected)
}

// undecodableRuns is a planted bug: the client takes a job body it cannot
// decode for a job still running, so observation polls it until its
// polling budget runs out, hours after the render ended.
type undecodableRuns struct{ faultsim.Genace }

func (g undecodableRuns) Get(ctx context.Context, jobID string, wait, timeout time.Duration) (*genace.Job, error) {
	job, err := g.Genace.Get(ctx, jobID, wait, timeout)
	if _, undecodable := errors.AsType[*genace.DecodeError](err); undecodable {
		return &genace.Job{ID: jobID, State: genace.RemoteRunning}, nil
	}
	return job, err
}

// selfVerifying is a planted bug: the artifact store checks a copy
// against the sha256 of the bytes it received instead of the one the
// caller asked for, so a copy that never matches Genace's is stored and
// recorded as delivered.
type selfVerifying struct{ deliver.Artifacts }

func (a selfVerifying) Put(ctx context.Context, key string, r io.Reader, size int64, _, contentType string) (artifact.Object, error) {
	body, err := io.ReadAll(r)
	if err != nil {
		return artifact.Object{}, err
	}
	sum := sha256.Sum256(body)
	return a.Artifacts.Put(ctx, key, bytes.NewReader(body), size, hex.EncodeToString(sum[:]), contentType)
}

// dropsParked is a planted bug: the store does not keep a record's
// parking (an attribute its encoding forgets), so the sweep keeps
// re-arming an operation its handler gave up on.
type dropsParked struct{ store.Store }

func (s dropsParked) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	rec.Parked = nil
	return s.Store.Update(ctx, rec, expected)
}
