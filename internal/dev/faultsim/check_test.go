package faultsim_test

import (
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/dev/faultsim"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/operation"
)

func st(rev int64, phase operation.Phase, job string) faultsim.State {
	return faultsim.State{Revision: rev, Phase: phase, RemoteJobID: job}
}

func TestCheckWrite(t *testing.T) {
	settled := st(5, operation.PhaseFailed, "job_1")
	settled.Settlement = operation.SettlementSettled
	cases := []struct {
		name     string
		expected int64
		old      *faultsim.State
		next     faultsim.State
		want     string // substring of the one problem; "" for none
	}{
		{"create", 0, nil, st(1, operation.PhasePrepared, ""), ""},
		{"create at r2", 0, nil, st(2, operation.PhasePrepared, ""), "created at revision 2"},
		{"claim", 1, ptr(st(1, operation.PhasePrepared, "")), st(2, operation.PhaseSubmitting, ""), ""},
		{"accept", 2, ptr(st(2, operation.PhaseSubmitting, "")), st(3, operation.PhaseAccepted, "job_1"), ""},
		{"self-write", 3, ptr(st(3, operation.PhaseSubmitting, "")), st(4, operation.PhaseSubmitting, ""), ""},
		{"late evidence after uncertain", 3, ptr(st(3, operation.PhaseUncertain, "")), st(4, operation.PhaseAccepted, "job_1"), ""},
		{"stale overwrite", 2, ptr(st(3, operation.PhaseAccepted, "job_1")), st(4, operation.PhaseAccepted, "job_1"), "stale overwrite: the writer expected r2 but the store held r3"},
		{"revision jump", 3, ptr(st(3, operation.PhaseAccepted, "job_1")), st(5, operation.PhaseAccepted, "job_1"), "not by one"},
		{"terminal written", 5, ptr(settled), st(6, operation.PhaseFailed, "job_1"), "terminal record"},
		{"delivered written", 7, ptr(st(7, operation.PhaseDelivered, "job_1")), st(8, operation.PhaseSucceeded, "job_1"), "terminal record"},
		{"illegal transition", 4, ptr(st(4, operation.PhaseAccepted, "job_1")), st(5, operation.PhasePrepared, "job_1"), "illegal transition accepted → prepared"},
		{"job id replaced", 4, ptr(st(4, operation.PhaseAccepted, "job_1")), st(5, operation.PhaseAccepted, "job_2"), "job id job_1 replaced by \"job_2\""},
		{"job id dropped", 4, ptr(st(4, operation.PhaseAccepted, "job_1")), st(5, operation.PhaseAccepted, ""), "job id job_1 replaced by \"\""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := faultsim.CheckWrite(tc.expected, nil, tc.old, tc.next)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Fatalf("legal write flagged: %v", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Fatalf("got %q, want one problem containing %q", got, tc.want)
			}
		})
	}
}

func ptr(s faultsim.State) *faultsim.State { return &s }

// withFacts returns s with facts f.
func withFacts(s faultsim.State, f faultsim.Facts) faultsim.State { s.Facts = f; return s }

// TestCheckWriteStaleView holds writes against the two states before
// them: a write conditioned on the current revision but computed from the
// record before it undoes what the last write did.
func TestCheckWriteStaleView(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	base := faultsim.Facts{SpecRevision: 1, AuthorizedSpecRevision: 1, BudgetCredits: 30, Observations: 3, Accepted: t0, ObservedAt: t0.Add(time.Second)}
	raised := base
	raised.BudgetCredits = 31 // the application raised the budget at r5
	observed := base
	observed.Observations, observed.ObservedAt = 4, t0.Add(5*time.Second)
	delivered := base
	delivered.Deliveries = 1
	cases := []struct {
		name            string
		prev, old, next faultsim.Facts
		want            string
		prevUnknown     bool
		prevNotPrevious bool
	}{
		{"fresh view keeps the raise", base, raised, observed2(raised, t0), "", false, false},
		{"stale view undoes the raise", base, raised, observed2(base, t0), "put budget back to 30, undoing r5's change to 31", false, false},
		{"stale view undoes an observation", base, observed, base, "observations went back from 4", false, false},
		{"stale view drops a delivery", base, delivered, base, "deliveries went back from 1", false, false},
		{"stale view undoes the snapshot", base, observed, withObs(base, 4), "put snapshot read at back to", false, false},
		{"a count going back needs no history", base, observed, withObs(observed, 3), "observations went back from 4", true, false},
		{"no history, no revert to see", base, raised, base, "", true, false},
		{"the state before is not the one before old", base, raised, base, "", false, true},
		{"same value twice is no revert", base, base, base, "", false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prev := ptr(withFacts(st(4, operation.PhaseAccepted, "job_1"), tc.prev))
			if tc.prevNotPrevious {
				prev.Revision = 3
			}
			if tc.prevUnknown {
				prev = nil
			}
			old := ptr(withFacts(st(5, operation.PhaseAccepted, "job_1"), tc.old))
			got := faultsim.CheckWrite(5, prev, old, withFacts(st(6, operation.PhaseAccepted, "job_1"), tc.next))
			switch {
			case tc.want == "" && len(got) > 0:
				t.Fatalf("fresh write flagged: %v", got)
			case tc.want != "":
				found := false
				for _, p := range got {
					if !strings.Contains(p, "write from a stale view") {
						t.Fatalf("got %q, want only stale-view problems", got)
					}
					found = found || strings.Contains(p, tc.want)
				}
				if !found {
					t.Fatalf("got %q, want a stale-view problem containing %q", got, tc.want)
				}
			}
		})
	}
}

// observed2 is f after one more observation at t0+9s.
func observed2(f faultsim.Facts, t0 time.Time) faultsim.Facts {
	f.Observations++
	f.ObservedAt = t0.Add(9 * time.Second)
	return f
}

func withObs(f faultsim.Facts, n int) faultsim.Facts { f.Observations = n; return f }

func TestCheckAuthority(t *testing.T) {
	const whole = 30 * time.Second // a function timeout untouched
	cases := []struct {
		name                  string
		current               bool
		remaining, left, need time.Duration
		want                  string
	}{
		{"fresh lease", true, 30 * time.Second, whole, 25 * time.Second, ""},
		{"renewed just before", true, 25 * time.Second, whole, 25 * time.Second, ""},
		{"run down by the gap before the handler", true, 10 * time.Second, whole, 25 * time.Second, "hidden only 10s more"},
		{"run out", true, 0, whole, 25 * time.Second, "visibility has run out"},
		{"taken by another worker", false, 30 * time.Second, whole, 25 * time.Second, "another worker received the message"},
		{"deadline just far enough", true, 30 * time.Second, 25 * time.Second, 25 * time.Second, ""},
		{"deadline nearer than the POST and its persist", true, 30 * time.Second, 12 * time.Second, 25 * time.Second, "12s left, the POST and its persist need 25s"},
		{"deadline passed", true, 30 * time.Second, -time.Second, 25 * time.Second, "function's deadline"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := faultsim.CheckAuthority(tc.current, tc.remaining, tc.left, tc.need)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCheckFirstWrite(t *testing.T) {
	cases := []struct {
		name             string
		msgRev, expected int64
		appliedBy, want  string
		ownProgress      bool
	}{
		{"acts on the revision it names", 4, 4, "msg-1", "", false},
		{"carries on with its own progress", 4, 6, "msg-7", "", true},
		{"a redelivered claimant parks its own claim", 1, 2, "msg-7", "", true},
		{"an observation acts again on its own applied message", 4, 5, "msg-7", "written by this message, which must not act again", false},
		{"a stale observation writes at the current revision", 4, 6, "msg-2", "forked chain: message msg-7 was sent for r4 but its first write is conditioned on r6 (written by msg-2)", false},
		{"a duplicate dispatch acts on another message's claim", 1, 2, "msg-3", "sent for r1 but its first write is conditioned on r2", true},
		{"unknown writer", 2, 9, "", "written by an unknown writer", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := faultsim.CheckFirstWrite("msg-7", tc.msgRev, tc.expected, tc.appliedBy, tc.ownProgress)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

const (
	sumA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	sumB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// delivered is a clean final state: one job, one output, stored once.
func delivered() faultsim.Final {
	key := artifact.Key("op-1", "job_1", 0, "image/png")
	return faultsim.Final{
		Record: operation.Record{OperationID: "op-1", Revision: 9, Phase: operation.PhaseDelivered, RemoteJobID: "job_1",
			Deliveries: []operation.Delivery{{Index: 0, Key: key, SizeBytes: 100, SHA256: sumA}}},
		Jobs:               []genacesim.JobTruth{{ID: "job_1", OperationID: "op-1", State: genacesim.StateSucceeded, Credits: genacesim.Credits{Reserved: 10, Charged: 10}}},
		Posts:              1,
		Returned:           []string{"job_1"},
		RecordJobOperation: "op-1",
		Outputs:            []faultsim.Output{{ContentType: "image/png", SizeBytes: 100, SHA256: sumA}},
		Stored:             map[string]string{key: sumA},
		Created:            map[string]int{key: 1},
	}
}

func failedWith(refund string, charged int64, settlement operation.Settlement) faultsim.Final {
	return faultsim.Final{
		Record: operation.Record{OperationID: "op-1", Revision: 6, Phase: operation.PhaseFailed, RemoteJobID: "job_1", Settlement: settlement},
		Jobs: []genacesim.JobTruth{{ID: "job_1", OperationID: "op-1", State: genacesim.StateFailed,
			Credits: genacesim.Credits{Reserved: 10, Charged: charged, RefundState: refund}}},
		Posts: 1, Returned: []string{"job_1"}, RecordJobOperation: "op-1",
	}
}

// unauthorized is a prepared request the user changed (spec revision 2)
// without the re-authorization following, with next as its next action.
func unauthorized(next *operation.NextAction) operation.Record {
	return operation.Record{OperationID: "op-1", Revision: 3, Phase: operation.PhasePrepared, Model: "m", Authorized: true,
		SpecRevision: 2, AuthorizedSpecRevision: 1, BudgetCredits: 30, EstimatedCredits: 10, Schedule: next}
}

func TestCheckFinal(t *testing.T) {
	key := artifact.Key("op-1", "job_1", 0, "image/png")
	parked := &operation.ParkedState{Reason: "test", At: time.Unix(0, 0)}
	cases := []struct {
		name string
		f    func() faultsim.Final
		want []faultsim.Invariant
	}{
		{"clean delivery", delivered, nil},
		{"two jobs", func() faultsim.Final {
			f := delivered()
			f.Jobs = append(f.Jobs, genacesim.JobTruth{ID: "job_2", OperationID: "op-1", State: genacesim.StateRunning})
			f.Posts = 2
			return f
		}, []faultsim.Invariant{faultsim.InvPosts, faultsim.InvPosts, faultsim.InvJobID}},
		{"two jobs on an operator's informed decision", func() faultsim.Final {
			f := delivered()
			f.Jobs = append(f.Jobs, genacesim.JobTruth{ID: "job_0", OperationID: "op-1", State: genacesim.StateFailed})
			f.Posts, f.Audit, f.Confirmed = 2, 2, 1
			f.ReviewJobIDs = []string{"job_0"}
			return f
		}, nil},
		{"two jobs after an operator was misled", func() faultsim.Final {
			// An audit entry alone allows nothing: the confirmation was
			// made while Genace had a job, or a POST was in flight.
			f := delivered()
			f.Jobs = append(f.Jobs, genacesim.JobTruth{ID: "job_0", OperationID: "op-1", State: genacesim.StateFailed})
			f.Posts, f.Audit = 2, 2
			f.ReviewJobIDs = []string{"job_0"}
			return f
		}, []faultsim.Invariant{faultsim.InvPosts, faultsim.InvPosts}},
		{"retried after 429s", func() faultsim.Final { f := delivered(); f.Posts, f.RateLimited = 3, 2; return f }, nil},
		{"an id named on the wire is lost", func() faultsim.Final {
			// The client classified a drifted 202 as unknown and dropped
			// the id; the operation waits for review without it.
			return faultsim.Final{Record: operation.Record{OperationID: "op-1", Revision: 3, Phase: operation.PhaseUncertain, Parked: parked},
				Jobs: []genacesim.JobTruth{{ID: "job_1", State: genacesim.StateRunning}}, Posts: 1, HandedOut: []string{"job_1"}, Reviews: 1}
		}, []faultsim.Invariant{faultsim.InvJobID}},
		{"an id named on the wire is kept in a review", func() faultsim.Final {
			return faultsim.Final{Record: operation.Record{OperationID: "op-1", Revision: 3, Phase: operation.PhaseUncertain, Parked: parked},
				Jobs: []genacesim.JobTruth{{ID: "job_1", State: genacesim.StateRunning}}, Posts: 1, HandedOut: []string{"job_1"},
				ReviewJobIDs: []string{"job_1"}, Reviews: 1}
		}, nil},
		{"the record holds another operation's job", func() faultsim.Final {
			f := delivered()
			f.RecordJobOperation = "op-2"
			return f
		}, []faultsim.Invariant{faultsim.InvJobID}},
		{"the record holds a job Genace does not know", func() faultsim.Final {
			f := delivered()
			f.RecordJobOperation = ""
			return f
		}, []faultsim.Invariant{faultsim.InvJobID}},
		{"waits for review, nobody told", func() faultsim.Final {
			return faultsim.Final{Record: operation.Record{OperationID: "op-1", Revision: 3, Phase: operation.PhaseUncertain, Parked: parked}, Posts: 1}
		}, []faultsim.Invariant{faultsim.InvSettled}},
		{"chain kept alive by the sweep", func() faultsim.Final {
			f := delivered()
			f.SweepRearms, f.SweepBound = 5, faultsim.SweepBound(2)
			return f
		}, []faultsim.Invariant{faultsim.InvChain}},
		{"sweep re-arms the faults explain", func() faultsim.Final {
			f := delivered()
			f.SweepRearms, f.SweepBound = 2, faultsim.SweepBound(2)
			return f
		}, nil},
		{"second POST without a 429", func() faultsim.Final { f := delivered(); f.Posts, f.RateLimited = 3, 1; return f }, []faultsim.Invariant{faultsim.InvPosts}},
		{"returned job id lost", func() faultsim.Final {
			f := delivered()
			f.Returned = append(f.Returned, "job_9")
			return f
		}, []faultsim.Invariant{faultsim.InvJobID}},
		{"returned job id kept in a review", func() faultsim.Final {
			f := failedWith(genacesim.RefundSettled, 10, operation.SettlementSettled)
			f.Returned = []string{"job_1", "job_9"}
			f.ReviewJobIDs = []string{"job_9"}
			return f
		}, nil},
		{"unreported job, operation uncertain", func() faultsim.Final {
			return faultsim.Final{Record: operation.Record{OperationID: "op-1", Revision: 3, Phase: operation.PhaseUncertain, Parked: parked},
				Jobs: []genacesim.JobTruth{{ID: "job_1", State: genacesim.StateSucceeded}}, Posts: 1, Reviews: 1}
		}, nil},
		{"unreported job, operation rejected", func() faultsim.Final {
			return faultsim.Final{Record: operation.Record{OperationID: "op-1", Revision: 3, Phase: operation.PhaseRejected},
				Jobs: []genacesim.JobTruth{{ID: "job_1", State: genacesim.StateSucceeded}}, Posts: 1}
		}, []faultsim.Invariant{faultsim.InvJobID}},
		{"stuck accepted", func() faultsim.Final {
			f := delivered()
			f.Record.Phase, f.Record.Deliveries = operation.PhaseAccepted, nil
			return f
		}, []faultsim.Invariant{faultsim.InvSettled}},
		{"stuck prepared", func() faultsim.Final {
			return faultsim.Final{Record: operation.Record{OperationID: "op-1", Revision: 2, Phase: operation.PhasePrepared}}
		}, []faultsim.Invariant{faultsim.InvSettled}},
		{"stalled waits for review", func() faultsim.Final {
			f := delivered()
			f.Record.Phase, f.Record.Deliveries, f.Record.Parked = operation.PhaseStalled, nil, parked
			f.Reviews = 1
			return f
		}, nil},
		{"wrong checksum recorded", func() faultsim.Final { f := delivered(); f.Record.Deliveries[0].SHA256 = sumB; return f }, []faultsim.Invariant{faultsim.InvDelivery}},
		{"wrong content stored", func() faultsim.Final { f := delivered(); f.Stored[key] = sumB; return f }, []faultsim.Invariant{faultsim.InvDelivery}},
		{"nothing stored", func() faultsim.Final { f := delivered(); delete(f.Stored, key); return f }, []faultsim.Invariant{faultsim.InvDelivery}},
		{"stored twice", func() faultsim.Final { f := delivered(); f.Created[key] = 2; return f }, []faultsim.Invariant{faultsim.InvDelivery}},
		{"output missing", func() faultsim.Final {
			f := delivered()
			f.Outputs = append(f.Outputs, faultsim.Output{ContentType: "image/png", SizeBytes: 5, SHA256: sumB})
			return f
		}, []faultsim.Invariant{faultsim.InvDelivery, faultsim.InvDelivery}},
		{"succeeded render ended failed", func() faultsim.Final {
			f := failedWith(genacesim.RefundSettled, 10, operation.SettlementSettled)
			f.Jobs[0].State = genacesim.StateSucceeded
			return f
		}, []faultsim.Invariant{faultsim.InvDelivery}},
		{"settled on Genace's word", func() faultsim.Final { return failedWith(genacesim.RefundSettled, 10, operation.SettlementSettled) }, nil},
		{"settled with nothing charged", func() faultsim.Final { return failedWith(genacesim.RefundNone, 0, operation.SettlementSettled) }, nil},
		{"settled although reconciled without refund", func() faultsim.Final {
			return failedWith(genacesim.RefundNone, 10, operation.SettlementSettled)
		}, []faultsim.Invariant{faultsim.InvRefund}},
		{"settled outside Genace by the operator's audited write", func() faultsim.Final {
			f := failedWith(genacesim.RefundNone, 10, operation.SettlementSettled)
			f.SettledOutside = f.Record.Revision
			return f
		}, nil},
		{"settled, with an outside settlement of another revision", func() faultsim.Final {
			f := failedWith(genacesim.RefundNone, 10, operation.SettlementSettled)
			f.SettledOutside = f.Record.Revision - 1
			return f
		}, []faultsim.Invariant{faultsim.InvRefund}},
		{"unsettled without review", func() faultsim.Final {
			return failedWith(genacesim.RefundPending, 10, operation.SettlementUnresolved)
		}, []faultsim.Invariant{faultsim.InvSettled}},
		{"unsettled in review", func() faultsim.Final {
			f := failedWith(genacesim.RefundNone, 10, operation.SettlementUnresolved)
			f.Record.Parked = parked
			f.Reviews = 1
			return f
		}, nil},
		{"a second job Genace's gateway made, kept in a review", func() faultsim.Final {
			f := delivered()
			f.Jobs = append(f.Jobs, genacesim.JobTruth{ID: "job_2", OperationID: "op-1", State: genacesim.StateSucceeded, DuplicateOf: "job_1"})
			f.Returned, f.HandedOut = []string{"job_2"}, []string{"job_2"}
			f.ReviewJobIDs, f.Reviews = []string{"job_2"}, 1
			return f
		}, nil},
		{"a second job Genace's gateway made, its review closed", func() faultsim.Final {
			f := delivered()
			f.Jobs = append(f.Jobs, genacesim.JobTruth{ID: "job_2", OperationID: "op-1", State: genacesim.StateSucceeded, DuplicateOf: "job_1"})
			f.Returned, f.HandedOut = []string{"job_2"}, []string{"job_2"}
			return f
		}, []faultsim.Invariant{faultsim.InvJobID}},
		{"a second job Genace's gateway made and named to nobody", func() faultsim.Final {
			f := delivered()
			f.Jobs = append(f.Jobs, genacesim.JobTruth{ID: "job_2", OperationID: "op-1", State: genacesim.StateSucceeded, DuplicateOf: "job_1"})
			return f
		}, nil},
		{"the record holds a job id no message can carry", func() faultsim.Final {
			return faultsim.Final{Record: operation.Record{OperationID: "op-1", Revision: 3, Phase: operation.PhaseAccepted, RemoteJobID: "job~1",
				Schedule: &operation.NextAction{Action: "observe_generation", Due: time.Unix(0, 0)}},
				Jobs: []genacesim.JobTruth{{ID: "job~1", OperationID: "op-1", State: genacesim.StateRunning}}, Posts: 1,
				Returned: []string{"job~1"}, HandedOut: []string{"job~1"}, RecordJobOperation: "op-1"}
		}, []faultsim.Invariant{faultsim.InvJobID, faultsim.InvSettled}},
		{"an id outside the definition quoted in a review", func() faultsim.Final {
			return faultsim.Final{Record: operation.Record{OperationID: "op-1", Revision: 3, Phase: operation.PhaseUncertain, Parked: parked},
				Jobs: []genacesim.JobTruth{{ID: "job~1", OperationID: "op-1", State: genacesim.StateRunning}}, Posts: 1, HandedOut: []string{"job~1"},
				ReviewReasons: []string{`Genace named the job by an id outside the job id definition: "job~1"; find the job on Genace`}, Reviews: 1}
		}, nil},
		{"an id outside the definition kept nowhere", func() faultsim.Final {
			return faultsim.Final{Record: operation.Record{OperationID: "op-1", Revision: 3, Phase: operation.PhaseUncertain, Parked: parked},
				Jobs: []genacesim.JobTruth{{ID: "job~1", OperationID: "op-1", State: genacesim.StateRunning}}, Posts: 1, HandedOut: []string{"job~1"},
				ReviewReasons: []string{"claim timed out"}, Reviews: 1}
		}, []faultsim.Invariant{faultsim.InvJobID}},
		{"a dispatch the allowance no longer covers, dropped with a review", func() faultsim.Final {
			return faultsim.Final{Record: unauthorized(nil), Reviews: 1}
		}, nil},
		{"a dispatch the allowance no longer covers, dropped without a review", func() faultsim.Final {
			return faultsim.Final{Record: unauthorized(nil)}
		}, []faultsim.Invariant{faultsim.InvSettled}},
		{"a dispatch the allowance no longer covers, left due", func() faultsim.Final {
			return faultsim.Final{Record: unauthorized(&operation.NextAction{Action: "submit_generation", Due: time.Unix(0, 0)}), Reviews: 1}
		}, []faultsim.Invariant{faultsim.InvSettled}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []faultsim.Invariant
			vs := faultsim.CheckFinal(tc.f())
			for _, v := range vs {
				got = append(got, v.Invariant)
			}
			if strings.Join(invs(got), ",") != strings.Join(invs(tc.want), ",") {
				t.Fatalf("got %v, want %v", vs, tc.want)
			}
		})
	}
}

func TestSecondJobReview(t *testing.T) {
	rec := &operation.Record{OperationID: "op-1", RemoteJobID: "job_1", Phase: operation.PhaseDelivered}
	cases := []struct {
		name, job, owner string
		want             bool
	}{
		{"a second job of the operation", "job_2", "op-1", true},
		{"the record's own job", "job_1", "op-1", false},
		{"no job", "", "", false},
		{"another operation's job", "job_3", "op-2", false},
		{"a job Genace does not know", "job_4", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := faultsim.SecondJobReview(rec, tc.job, tc.owner); got != tc.want {
				t.Fatalf("SecondJobReview(%q, owner %q) = %t, want %t", tc.job, tc.owner, got, tc.want)
			}
		})
	}
}

func invs(in []faultsim.Invariant) []string {
	out := make([]string, len(in))
	for i, v := range in {
		out[i] = string(v)
	}
	return out
}

// TestDeadWorkerEndsChain is seed 42's op-007116 (10,000 operations): a
// submit worker paused inside its POST; its message's visibility ran out,
// a second worker took the message, rightly marked the claim uncertain
// and acknowledged the message; the first worker then applied its 202
// (the outcome of the only POST) and died before sending the observation.
// Nothing was left to redeliver, so only the sweep could carry the chain
// on, and its one re-arm was reported as a chain that dies by itself
// (bound 0). The death ended the chain by design, like a dead-lettered
// message; it counts as a stop. A death whose message is still queued, or
// whose write another writer followed, ends nothing: a re-arm there is
// still a chain that dies by itself.
func TestDeadWorkerEndsChain(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                               string
		wroteLatest, messageGone, terminal bool
		ends                               bool
	}{
		{"wrote last, message acknowledged by another worker", true, true, false, true},
		{"wrote last, message still queued: its redelivery re-emits", true, false, false, false},
		{"another writer followed: its follow-up carries the chain", false, true, false, false},
		{"wrote nothing: the acknowledging worker carried on", false, true, false, false},
		{"terminal: no chain to carry", true, true, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ends := faultsim.DeadWorkerEndsChain(tc.wroteLatest, tc.messageGone, tc.terminal)
			if ends != tc.ends {
				t.Fatalf("DeadWorkerEndsChain = %t, want %t", ends, tc.ends)
			}
			// What the chain check then says of the sweep's one re-arm.
			stops := 0
			if ends {
				stops++
			}
			f := faultsim.Final{Record: operation.Record{OperationID: "op-1", Revision: 7, Phase: operation.PhaseDelivered}, SweepRearms: 1, SweepBound: faultsim.SweepBound(stops)}
			var chain int
			for _, v := range faultsim.CheckFinal(f) {
				if v.Invariant == faultsim.InvChain {
					chain++
				}
			}
			if want := map[bool]int{true: 0, false: 1}[ends]; chain != want {
				t.Fatalf("%d chain violations for one re-arm with %d stops, want %d", chain, stops, want)
			}
		})
	}
}

// TestEvidenceAfterOperator is seed 42's op-002668 (10,000 operations): a
// submit worker paused inside its POST; the claim's redelivery rightly
// marked it uncertain; an operator reconciled it with the job id while
// the POST was in flight; then the worker's 202 reached it. No submission
// was of unknown outcome, yet the episode was counted as left uncertain,
// because the operator closed it first: 1 left per 0 unknown, an
// operator's race charged to the handlers. The claimant's definite answer
// is the evidence the episode waited for, whether it lands before or
// after the operator's write (and whether the claimant then writes
// anything: the record may already hold it). Nothing else counts: another
// message's answer says nothing about the claim's POST.
func TestEvidenceAfterOperator(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name            string
		claim, answered string
		want            bool
	}{
		{"the claimant's 202 after the operator's reconcile", "msg-claim", "msg-claim", true},
		{"a new dispatch's answer after confirmed not submitted", "msg-claim", "msg-dispatch", false},
		{"no answer reached a live handler", "msg-claim", "", false},
		{"an episode without a known claim", "", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resolved := faultsim.EvidenceAfterOperator(tc.claim, tc.answered)
			if resolved != tc.want {
				t.Fatalf("EvidenceAfterOperator(%q, %q) = %t, want %t", tc.claim, tc.answered, resolved, tc.want)
			}
			// op-002668 alone: made uncertain once, no unknown submission.
			left := 1
			if resolved {
				left--
			}
			r := faultsim.Result{MadeUncertain: 1, LeftUncertain: left}
			if got, want := len(r.Thresholds()), left; got != want {
				t.Fatalf("%d thresholds exceeded with %d left uncertain and no unknown submission, want %d: %v", got, left, want, r.Thresholds())
			}
		})
	}
}
