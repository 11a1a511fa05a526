package faultsim_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/genjobs/genjobs/internal/dev/faultsim"
	"github.com/genjobs/genjobs/internal/intake"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store"
)

// TestCheckIntake holds the intake checks (j–m) to crafted histories:
// each must flag the one thing wrong and pass the right history.
func TestCheckIntake(t *testing.T) {
	one := faultsim.CreateAnswer{Identity: "op-1 created t0", Created: true}
	again := faultsim.CreateAnswer{Identity: "op-1 created t0"}
	in, changed := faultsim.SpecDigest("m", []byte(`{"a":1, "b":2}`)), faultsim.SpecDigest("m", []byte(`{"a":2}`))
	caller := faultsim.Caller{Specs: map[int64]string{1: in}, Current: 1}
	afterChange := faultsim.Caller{Specs: map[int64]string{1: in, 2: changed}, Current: 2}
	prepared := operation.Record{Revision: 2, Phase: operation.PhasePrepared}
	cases := []struct {
		name  string
		check func() []faultsim.Violation
		want  string // "" for none
	}{
		{"one create, retries answered the same", func() []faultsim.Violation {
			return faultsim.CheckCreates("op-1", 1, []faultsim.CreateAnswer{one, again, again})
		}, ""},
		{"two records", func() []faultsim.Violation {
			return faultsim.CheckCreates("op-1", 2, []faultsim.CreateAnswer{one, again})
		}, "created 2 records"},
		{"two creators", func() []faultsim.Violation {
			return faultsim.CheckCreates("op-1", 1, []faultsim.CreateAnswer{one, one})
		}, "2 of 2 creates answered as the operation's creator"},
		{"a retry answered another operation", func() []faultsim.Violation {
			return faultsim.CheckCreates("op-1", 1, []faultsim.CreateAnswer{one, {Identity: "op-1 created t1"}})
		}, "answered two operations"},
		{"a retry refused", func() []faultsim.Violation {
			return faultsim.CheckCreates("op-1", 1, []faultsim.CreateAnswer{one, {Err: "409 operation_id_conflict"}})
		}, "answered 409"},
		{"POST of the spec in effect, its key order aside", func() []faultsim.Violation {
			return faultsim.CheckPost("op-1", caller, 1, faultsim.SpecDigest("m", []byte(`{"b":2,"a":1}`)))
		}, ""},
		{"POST of the spec changed away from", func() []faultsim.Violation { return faultsim.CheckPost("op-1", afterChange, 1, in) }, "the spec in effect is r2"},
		{"POST at an unauthorized spec", func() []faultsim.Violation { return faultsim.CheckPost("op-1", caller, 2, in) }, "never authorized"},
		{"POST after a cancel", func() []faultsim.Violation {
			c := caller
			c.Cancelled = true
			return faultsim.CheckPost("op-1", c, 1, in)
		}, "cancel"},
		{"one POST per spec, 429s aside", func() []faultsim.Violation {
			return faultsim.CheckPostsPerSpec("op-1", map[int64]int{1: 1, 2: 1}, 0)
		}, ""},
		{"two POSTs of one spec", func() []faultsim.Violation { return faultsim.CheckPostsPerSpec("op-1", map[int64]int{1: 2}, 0) }, "2 POSTs not answered 429 at spec r1"},
		{"two POSTs of one spec, one confirmed", func() []faultsim.Violation { return faultsim.CheckPostsPerSpec("op-1", map[int64]int{1: 2}, 1) }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := tc.check()
			if tc.want == "" && len(got) > 0 || tc.want != "" && !slices.ContainsFunc(got, func(v faultsim.Violation) bool { return strings.Contains(v.Detail, tc.want) }) {
				t.Fatalf("got %v, want one saying %q", got, tc.want)
			}
		})
	}
	refusals := []struct {
		name    string
		claimed bool
		rec     operation.Record
		bad     bool
	}{
		{"after the claim", true, prepared, false},
		{"ended", false, operation.Record{Phase: operation.PhaseSuperseded}, false},
		{"parked for an operator", false, operation.Record{Phase: operation.PhasePrepared, Parked: &operation.ParkedState{}}, false},
		{"before any claim", false, prepared, true},
	}
	for _, tc := range refusals {
		t.Run("409 "+tc.name, func(t *testing.T) {
			t.Parallel()
			if got := faultsim.CheckRefusal("change", tc.claimed, &tc.rec); (got != "") != tc.bad {
				t.Fatalf("got %q, want a problem: %t", got, tc.bad)
			}
		})
	}
}

// createsTwice is a planted bug: a store that answers the create of an
// existing record as done, so a raced or retried create gets a 201 too.
type createsTwice struct{ store.Store }

func (s createsTwice) Create(ctx context.Context, rec operation.Record) (operation.Record, error) {
	saved, err := s.Store.Create(ctx, rec)
	if errors.Is(err, store.ErrExists) {
		return s.Store.Get(ctx, rec.OperationID)
	}
	return saved, err
}

// claimUnseen is a planted bug: the intake reads a claimed record as
// not claimed, so it changes or cancels it after the claim.
type claimUnseen struct{ intake.Store }

func (s claimUnseen) Get(ctx context.Context, id string) (operation.Record, error) {
	rec, err := s.Store.Get(ctx, id)
	if rec.Phase == operation.PhaseSubmitting {
		rec.Phase, rec.Claim = operation.PhasePrepared, nil
	}
	return rec, err
}

// claimSeen is a planted bug: the intake reads every prepared record as
// claimed, so it refuses changes no claim stands in the way of.
type claimSeen struct{ intake.Store }

func (s claimSeen) Get(ctx context.Context, id string) (operation.Record, error) {
	rec, err := s.Store.Get(ctx, id)
	if rec.Phase == operation.PhasePrepared {
		rec.Claim = &operation.Claim{Owner: "nobody"}
	}
	return rec, err
}

// authorizesAll is a planted bug: the handlers read every spec as
// authorized, so submit POSTs a change the user never authorized.
type authorizesAll struct{ faultsim.Records }

func (s authorizesAll) Get(ctx context.Context, id string) (operation.Record, error) {
	rec, err := s.Records.Get(ctx, id)
	rec.AuthorizedSpecRevision = rec.SpecRevision
	return rec, err
}
