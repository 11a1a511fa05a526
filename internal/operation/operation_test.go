package operation

import (
	"errors"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

func prepared() Record {
	return Record{
		OperationID: "op-1", Revision: 1, SpecRevision: 1, Phase: PhasePrepared,
		UserID: "user-1", Model: "flux-pro-2", Authorized: true, AuthorizedSpecRevision: 1,
		BudgetCredits: 20, EstimatedCredits: 12, Timestamps: Timestamps{Created: t0, Updated: t0},
	}
}

func with(r Record, f func(*Record)) Record { c := r.Clone(); f(&c); return c }

func snap(state RemoteState, charged int64, refund RefundState) Snapshot {
	s := Snapshot{State: state, Credits: Credits{Reserved: 12, Charged: charged, RefundState: refund}, ObservedAt: t0}
	if state == RemoteSucceeded {
		s.Outputs = []OutputDescriptor{{ContentType: "image/png", SizeBytes: 10, SHA256: "ab"}, {ContentType: "image/png", SizeBytes: 11, SHA256: "cd"}}
	}
	return s
}

func TestCanTransitionTable(t *testing.T) {
	t.Parallel()
	legal := map[[2]Phase]bool{}
	for from, tos := range edges {
		for _, to := range tos {
			legal[[2]Phase{from, to}] = true
		}
	}
	// Spot-check the edges the invariants depend on.
	must := []struct {
		from, to Phase
		ok       bool
	}{
		{PhasePrepared, PhaseSubmitting, true},
		{PhaseSubmitting, PhaseUncertain, true},
		{PhaseUncertain, PhaseAccepted, true}, // a late worker's job id is never dropped
		{PhaseUncertain, PhaseSubmitting, false},
		{PhaseAccepted, PhaseSubmitting, false}, // never a second POST
		{PhaseAccepted, PhasePrepared, false},
		{PhasePrepared, PhaseAccepted, true}, // a late job id after "confirmed not submitted" is kept
		{PhaseDelivered, PhaseSucceeded, false},
		{PhaseRejected, PhasePrepared, false},
		{PhaseSuperseded, PhaseAccepted, false},
		{PhaseSucceeded, PhaseFailed, false}, // a delivery problem never reads as a failed render
		{PhaseStalled, PhaseAccepted, true},
	}
	for _, m := range must {
		if got := CanTransition(m.from, m.to); got != m.ok {
			t.Errorf("CanTransition(%s, %s) = %t, want %t", m.from, m.to, got, m.ok)
		}
	}
	// Every pair of phases agrees with the edge table, and no edge leaves a
	// terminal-only phase.
	for _, from := range Phases {
		for _, to := range Phases {
			if got := CanTransition(from, to); got != legal[[2]Phase{from, to}] {
				t.Errorf("CanTransition(%s, %s) = %t disagrees with the edge table", from, to, got)
			}
		}
	}
	for _, p := range []Phase{PhaseDelivered, PhaseRejected, PhaseSuperseded} {
		if len(edges[p]) != 0 {
			t.Errorf("terminal phase %s has edges %v", p, edges[p])
		}
	}
}

func TestTransitions(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Minute)
	submitting := with(prepared(), func(r *Record) { r.Phase = PhaseSubmitting; r.Claim = &Claim{Owner: "w1", At: t0}; r.Posts = 1 })
	uncertain := with(submitting, func(r *Record) { r.Phase = PhaseUncertain; r.Parked = &ParkedState{Reason: "x"} })
	accepted := with(submitting, func(r *Record) { r.Phase = PhaseAccepted; r.RemoteJobID = "job_1"; r.Timestamps.Accepted = &t0 })
	settled := with(accepted, func(r *Record) { r.Phase = PhaseFailed; r.Settlement = SettlementSettled })
	delivered := with(accepted, func(r *Record) { r.Phase = PhaseDelivered })
	mine := *submitting.Claim
	// theirs replaced mine after an operator's reset and a new dispatch.
	theirs := with(submitting, func(r *Record) { r.Claim = &Claim{Owner: "w2", MessageID: "m2", At: t0.Add(time.Minute)} })
	theirsUncertain := with(theirs, func(r *Record) { r.Phase = PhaseUncertain; r.Parked = &ParkedState{Reason: "x"} })
	reset := with(prepared(), func(r *Record) { r.Posts = 1 }) // confirmed not submitted: no claim
	unparked := func(want Phase) func(t *testing.T, r Record) {
		return func(t *testing.T, r Record) {
			if r.Parked != nil {
				t.Errorf("%s kept the parked marker %+v", want, r.Parked)
			}
		}
	}
	tests := []struct {
		name    string
		do      func() (Record, error)
		want    Phase
		wantErr bool
		check   func(t *testing.T, r Record)
	}{
		{"claim prepared", func() (Record, error) { return ClaimSubmission(prepared(), "w1", "m1", now) }, PhaseSubmitting, false,
			func(t *testing.T, r Record) {
				if r.Claim == nil || r.Claim.Owner != "w1" || r.Posts != 1 {
					t.Errorf("claim not recorded: %+v posts=%d", r.Claim, r.Posts)
				}
			}},
		{"claim unauthorized", func() (Record, error) {
			return ClaimSubmission(with(prepared(), func(r *Record) { r.Authorized = false }), "w", "m", now)
		}, "", true, nil},
		{"claim stale spec", func() (Record, error) {
			return ClaimSubmission(with(prepared(), func(r *Record) { r.SpecRevision = 2 }), "w", "m", now)
		}, "", true, nil},
		{"claim over budget", func() (Record, error) {
			return ClaimSubmission(with(prepared(), func(r *Record) { r.EstimatedCredits = 21 }), "w", "m", now)
		}, "", true, nil},
		{"claim no model", func() (Record, error) {
			return ClaimSubmission(with(prepared(), func(r *Record) { r.Model = "" }), "w", "m", now)
		}, "", true, nil},
		{"claim with job id", func() (Record, error) {
			return ClaimSubmission(with(prepared(), func(r *Record) { r.RemoteJobID = "job_9" }), "w", "m", now)
		}, "", true, nil},
		{"claim twice", func() (Record, error) { return ClaimSubmission(submitting, "w2", "m", now) }, "", true, nil},
		{"release", func() (Record, error) { return mine.Release(submitting, now) }, PhasePrepared, false,
			func(t *testing.T, r Record) {
				if r.Claim != nil || r.Posts != 0 {
					t.Errorf("release kept claim %+v posts %d", r.Claim, r.Posts)
				}
			}},
		{"release after its redelivery marked it uncertain", func() (Record, error) { return mine.Release(uncertain, now) }, PhasePrepared, false,
			func(t *testing.T, r Record) {
				if r.Claim != nil || r.Posts != 0 || r.Parked != nil || r.LastError != "" {
					t.Errorf("release kept claim %+v posts %d parked %+v error %q", r.Claim, r.Posts, r.Parked, r.LastError)
				}
			}},
		{"release of a claim another replaced", func() (Record, error) { return mine.Release(theirs, now) }, "", true, nil},
		{"release of a claim another replaced, uncertain", func() (Record, error) { return mine.Release(theirsUncertain, now) }, "", true, nil},
		{"release after an operator's reset", func() (Record, error) { return mine.Release(reset, now) }, "", true, nil},
		{"release of an accepted claim", func() (Record, error) { return mine.Release(accepted, now) }, "", true, nil},
		{"accept", func() (Record, error) { return Accept(submitting, "job_1", &Snapshot{State: RemoteQueued}, now) }, PhaseAccepted, false,
			func(t *testing.T, r Record) {
				if r.RemoteJobID != "job_1" || r.Timestamps.Accepted == nil || r.Remote == nil {
					t.Errorf("accept lost data: %+v", r)
				}
			}},
		{"accept late into uncertain", func() (Record, error) { return Accept(uncertain, "job_1", nil, now) }, PhaseAccepted, false,
			func(t *testing.T, r Record) {
				if r.Parked != nil {
					t.Error("accept kept the parked marker")
				}
			}},
		{"accept never replaces a job id", func() (Record, error) {
			return Accept(with(uncertain, func(r *Record) { r.RemoteJobID = "job_1" }), "job_2", nil, now)
		}, "", true, nil},
		{"accept with empty id", func() (Record, error) { return Accept(submitting, "", nil, now) }, "", true, nil},
		{"claimant's accept", func() (Record, error) { return mine.Accept(submitting, "job_1", nil, now) }, PhaseAccepted, false, nil},
		{"claimant's accept after uncertain", func() (Record, error) { return mine.Accept(uncertain, "job_1", nil, now) }, PhaseAccepted, false, unparked(PhaseAccepted)},
		{"claimant's accept after an operator's reset", func() (Record, error) { return mine.Accept(reset, "job_1", nil, now) }, PhaseAccepted, false,
			func(t *testing.T, r Record) {
				if r.RemoteJobID != "job_1" {
					t.Errorf("late job id dropped: %+v", r)
				}
			}},
		{"claimant's accept under another claim", func() (Record, error) { return mine.Accept(theirs, "job_1", nil, now) }, "", true, nil},
		{"claimant's accept under another uncertain claim", func() (Record, error) { return mine.Accept(theirsUncertain, "job_1", nil, now) }, "", true, nil},
		{"claimant's submission failure after uncertain", func() (Record, error) {
			return mine.SubmissionFailed(uncertain, "job_5", "upstream_unavailable", now)
		}, PhaseFailed, false, unparked(PhaseFailed)},
		{"claimant's submission failure under another claim", func() (Record, error) {
			return mine.SubmissionFailed(theirs, "job_5", "upstream_unavailable", now)
		}, "", true, nil},
		{"accept from accepted", func() (Record, error) { return Accept(accepted, "job_1", nil, now) }, PhaseAccepted, false, nil},
		{"submission failed", func() (Record, error) { return SubmissionFailed(submitting, "job_5", "upstream_unavailable", now) }, PhaseFailed, false,
			func(t *testing.T, r Record) {
				if r.RemoteJobID != "job_5" || r.Settlement != SettlementUnresolved || r.Terminal() {
					t.Errorf("submission failure not kept unresolved with its id: %+v", r)
				}
			}},
		{"reject", func() (Record, error) { return mine.Reject(submitting, "invalid_request", now) }, PhaseRejected, false,
			func(t *testing.T, r Record) {
				if !r.Terminal() {
					t.Error("rejected is not terminal")
				}
			}},
		{"reject with job id", func() (Record, error) { return mine.Reject(accepted, "x", now) }, "", true, nil},
		{"reject after uncertain", func() (Record, error) { return mine.Reject(uncertain, "invalid_request", now) }, PhaseRejected, false, unparked(PhaseRejected)},
		{"reject under another claim", func() (Record, error) { return mine.Reject(theirs, "invalid_request", now) }, "", true, nil},
		{"reject after an operator's reset", func() (Record, error) { return mine.Reject(reset, "invalid_request", now) }, "", true, nil},
		{"rate limited", func() (Record, error) { return mine.RateLimited(submitting, now) }, PhasePrepared, false,
			func(t *testing.T, r Record) {
				if r.Counters.RateLimited != 1 || r.Claim != nil {
					t.Errorf("rate limited: %+v", r)
				}
			}},
		{"rate limited after uncertain", func() (Record, error) { return mine.RateLimited(uncertain, now) }, PhasePrepared, false,
			func(t *testing.T, r Record) {
				if r.Counters.RateLimited != 1 || r.Claim != nil || r.Parked != nil || r.Posts != 1 {
					t.Errorf("rate limited: %+v", r)
				}
			}},
		{"rate limited under another claim", func() (Record, error) { return mine.RateLimited(theirs, now) }, "", true, nil},
		{"rate limited under another uncertain claim", func() (Record, error) { return mine.RateLimited(theirsUncertain, now) }, "", true, nil},
		{"rate limited from accepted", func() (Record, error) { return mine.RateLimited(accepted, now) }, "", true, nil},
		{"key refused", func() (Record, error) { return mine.Unauthorized(submitting, now) }, PhasePrepared, false,
			func(t *testing.T, r Record) {
				if r.Terminal() || r.Counters.Unauthorized != 1 || r.Claim != nil || r.Posts != 1 || r.Schedule != nil || r.LastError != LastErrorUnauthorized {
					t.Errorf("a refused key must leave the operation retryable, its POST counted as creating nothing: %+v", r)
				}
			}},
		{"key refused after uncertain", func() (Record, error) { return mine.Unauthorized(uncertain, now) }, PhasePrepared, false,
			func(t *testing.T, r Record) {
				if r.Counters.Unauthorized != 1 || r.Claim != nil || r.Parked != nil || r.Posts != 1 {
					t.Errorf("key refused: %+v", r)
				}
			}},
		{"key refused under another claim", func() (Record, error) { return mine.Unauthorized(theirs, now) }, "", true, nil},
		{"key refused under another uncertain claim", func() (Record, error) { return mine.Unauthorized(theirsUncertain, now) }, "", true, nil},
		{"key refused after an operator's reset", func() (Record, error) { return mine.Unauthorized(reset, now) }, "", true, nil},
		{"key refused from accepted", func() (Record, error) { return mine.Unauthorized(accepted, now) }, "", true, nil},
		{"uncertain", func() (Record, error) { return MarkUncertain(submitting, "response_lost", now) }, PhaseUncertain, false,
			func(t *testing.T, r Record) {
				if r.Active() {
					t.Error("uncertain must not be active (operator only)")
				}
				if r.Claim == nil || !r.Claim.Same(mine) {
					t.Errorf("uncertain dropped the claim its claimant's answer needs: %+v", r.Claim)
				}
			}},
		{"uncertain from prepared", func() (Record, error) { return MarkUncertain(prepared(), "x", now) }, "", true, nil},
		{"claim uncertain", func() (Record, error) { return mine.MarkUncertain(submitting, "redelivered_while_submitting", now) }, PhaseUncertain, false, nil},
		{"claim uncertain after another claim replaced it", func() (Record, error) {
			return mine.MarkUncertain(theirs, "redelivered_while_submitting", now)
		}, "", true, nil},
		{"claim uncertain after its release", func() (Record, error) { return mine.MarkUncertain(reset, "redelivered_while_submitting", now) }, "", true, nil},
		{"confirm not submitted", func() (Record, error) { return ConfirmNotSubmitted(uncertain, now) }, PhasePrepared, false, nil},
		{"confirm from accepted", func() (Record, error) { return ConfirmNotSubmitted(accepted, now) }, "", true, nil},
		{"change spec", func() (Record, error) { return ChangeSpec(prepared(), now) }, PhasePrepared, false,
			func(t *testing.T, r Record) {
				if r.SpecRevision != 2 {
					t.Errorf("spec revision %d", r.SpecRevision)
				}
				if _, bad := FailedCheck(SubmitChecks(&r)); !bad {
					t.Error("a changed spec still passes the authorization check")
				}
			}},
		{"change spec after submit", func() (Record, error) { return ChangeSpec(accepted, now) }, "", true, nil},
		{"supersede accepted", func() (Record, error) { return Supersede(accepted, now) }, PhaseSuperseded, false,
			func(t *testing.T, r Record) {
				if r.RemoteJobID != "job_1" {
					t.Error("supersede dropped the job id")
				}
			}},
		{"supersede uncertain", func() (Record, error) { return Supersede(uncertain, now) }, "", true, nil},
		{"supersede delivered", func() (Record, error) { return Supersede(delivered, now) }, "", true, nil},
		{"settled failure is terminal", func() (Record, error) { return Supersede(settled, now) }, "", true, nil},
		{"resume stalled", func() (Record, error) {
			return ResumeObservation(with(accepted, func(r *Record) { r.Phase = PhaseStalled; r.Counters.WindowObservations = 9 }), now)
		}, PhaseAccepted, false,
			func(t *testing.T, r Record) {
				if r.Counters.WindowObservations != 0 {
					t.Error("resume kept the spent budget")
				}
			}},
		{"resume uncertain", func() (Record, error) { return ResumeObservation(uncertain, now) }, "", true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.do()
			if tt.wantErr {
				if !errors.Is(err, ErrIllegalTransition) {
					t.Fatalf("err = %v, want ErrIllegalTransition", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got.Phase != tt.want {
				t.Fatalf("phase = %s, want %s", got.Phase, tt.want)
			}
			if !got.Timestamps.Updated.Equal(now) {
				t.Errorf("updated = %v, want %v", got.Timestamps.Updated, now)
			}
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
}

func TestClaimSame(t *testing.T) {
	t.Parallel()
	c := Claim{Owner: "req-1", MessageID: "m1", At: t0}
	tests := []struct {
		name string
		o    Claim
		want bool
	}{
		{"itself", c, true},
		{"the same instant elsewhere", Claim{Owner: "req-1", MessageID: "m1", At: t0.In(time.FixedZone("x", 3600))}, true},
		{"another worker", Claim{Owner: "req-2", MessageID: "m1", At: t0}, false},
		{"another message", Claim{Owner: "req-1", MessageID: "m2", At: t0}, false},
		{"a later claim of the same message", Claim{Owner: "req-1", MessageID: "m1", At: t0.Add(time.Second)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := c.Same(tt.o); got != tt.want {
				t.Errorf("Same = %t, want %t", got, tt.want)
			}
		})
	}
}

func TestTransitionsDoNotAliasInput(t *testing.T) {
	t.Parallel()
	in := with(prepared(), func(r *Record) {
		r.Phase = PhaseSucceeded
		r.RemoteJobID = "job_1"
		r.Remote = &Snapshot{State: RemoteSucceeded, Outputs: []OutputDescriptor{{SHA256: "a"}}}
		r.Deliveries = make([]Delivery, 0, 4) // spare capacity would expose aliasing
	})
	out, _, err := RecordDelivery(in, Delivery{Index: 0, Key: "k", SHA256: "a"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	out.Remote.Outputs[0].SHA256 = "changed"
	if len(in.Deliveries) != 0 || in.Remote.Outputs[0].SHA256 != "a" {
		t.Fatal("a transition modified its input record")
	}
}

func TestObserve(t *testing.T) {
	t.Parallel()
	accepted := with(prepared(), func(r *Record) { r.Phase = PhaseAccepted; r.RemoteJobID = "job_1"; r.Timestamps.Accepted = &t0 })
	failedUnresolved := with(accepted, func(r *Record) {
		r.Phase = PhaseFailed
		r.Settlement = SettlementUnresolved
		r.Timestamps.RemoteFailed = &t0
		r.Remote = &Snapshot{State: RemoteFailed, SubmissionFailure: true}
	})
	b := Budgets{MaxObservations: 3, Polling: time.Hour, Accounting: 2 * time.Hour}
	tests := []struct {
		name       string
		rec        Record
		snap       Snapshot
		at         time.Duration
		phase      Phase
		settlement Settlement
		follow     Follow
		wantErr    bool
	}{
		{"still running", accepted, snap(RemoteRunning, 0, RefundNone), time.Minute, PhaseAccepted, "", FollowObserve, false},
		{"succeeded", accepted, snap(RemoteSucceeded, 12, RefundNone), time.Minute, PhaseSucceeded, "", FollowDeliver, false},
		{"render failed refund pending", accepted, snap(RemoteFailed, 12, RefundPending), time.Minute, PhaseFailed, SettlementUnresolved, FollowObserve, false},
		{"render failed refund settled", accepted, snap(RemoteFailed, 12, RefundSettled), time.Minute, PhaseFailed, SettlementSettled, FollowNone, false},
		{"canceled nothing charged", accepted, Snapshot{State: RemoteCanceled}, time.Minute, PhaseFailed, SettlementSettled, FollowNone, false},
		{"reconcile --fail: charged, no refund, keeps observing", accepted, snap(RemoteFailed, 12, RefundNone), time.Minute, PhaseFailed, SettlementUnresolved, FollowObserve, false},
		{"reconcile --fail past accounting budget", failedUnresolved, snap(RemoteFailed, 12, RefundNone), 3 * time.Hour, PhaseFailed, SettlementUnresolved, FollowReview, false},
		{"submission failure refund advances", failedUnresolved, snap(RemoteFailed, 12, RefundPending), time.Minute, PhaseFailed, SettlementUnresolved, FollowObserve, false},
		{"submission failure refund settles", failedUnresolved, snap(RemoteFailed, 12, RefundSettled), time.Minute, PhaseFailed, SettlementSettled, FollowNone, false},
		{"polling budget by time", accepted, snap(RemoteRunning, 0, RefundNone), 2 * time.Hour, PhaseStalled, "", FollowReview, false},
		{"polling budget by count", with(accepted, func(r *Record) { r.Counters.WindowObservations = 2 }), snap(RemoteQueued, 0, RefundNone), time.Minute, PhaseStalled, "", FollowReview, false},
		{"stalled job finishes", with(accepted, func(r *Record) { r.Phase = PhaseStalled }), snap(RemoteSucceeded, 12, RefundNone), time.Minute, PhaseSucceeded, "", FollowDeliver, false},
		{"failed stays failed though remote says running", failedUnresolved, snap(RemoteRunning, 12, RefundPending), time.Minute, PhaseFailed, SettlementUnresolved, FollowObserve, false},
		{"no job id", prepared(), snap(RemoteRunning, 0, RefundNone), time.Minute, "", "", FollowNone, true},
		{"succeeded record is not observed again", with(accepted, func(r *Record) { r.Phase = PhaseSucceeded }), snap(RemoteSucceeded, 12, RefundNone), time.Minute, "", "", FollowNone, true},
		{"unknown remote state", accepted, Snapshot{State: "exploded"}, time.Minute, "", "", FollowNone, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, follow, err := Observe(tt.rec, tt.snap, t0.Add(tt.at), b)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("want error, got phase %s", got.Phase)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Phase != tt.phase || got.Settlement != tt.settlement || follow != tt.follow {
				t.Fatalf("got %s/%q/%s, want %s/%q/%s", got.Phase, got.Settlement, follow, tt.phase, tt.settlement, tt.follow)
			}
			if got.Remote == nil || got.Remote.State != tt.snap.State {
				t.Errorf("snapshot not saved: %+v", got.Remote)
			}
			if follow == FollowReview && got.Parked == nil {
				t.Error("review follow-up without a parked marker")
			}
			if got.Counters.Observations != tt.rec.Counters.Observations+1 {
				t.Errorf("observations = %d", got.Counters.Observations)
			}
		})
	}
}

func TestDelivery(t *testing.T) {
	t.Parallel()
	succ := with(prepared(), func(r *Record) {
		r.Phase = PhaseSucceeded
		r.RemoteJobID = "job_1"
		s := snap(RemoteSucceeded, 12, RefundNone)
		r.Remote = &s
	})
	d0 := Delivery{Index: 0, Key: "op-1/job_1/0", SHA256: "ab", SizeBytes: 10}
	r1, changed, err := RecordDelivery(succ, d0, t0)
	if err != nil || !changed {
		t.Fatalf("first delivery: changed=%t err=%v", changed, err)
	}
	if _, err := CompleteDelivery(r1, t0); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("completed with one of two outputs: %v", err)
	}
	if _, changed, err := RecordDelivery(r1, d0, t0); err != nil || changed {
		t.Fatalf("same output again: changed=%t err=%v; want a no-op", changed, err)
	}
	if _, _, err := RecordDelivery(r1, Delivery{Index: 0, Key: d0.Key, SHA256: "zz"}, t0); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("other checksum for a stored output: %v", err)
	}
	r2, _, err := RecordDelivery(r1, Delivery{Index: 1, Key: "op-1/job_1/1", SHA256: "cd"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	done, err := CompleteDelivery(r2, t0)
	if err != nil || done.Phase != PhaseDelivered || !done.Terminal() {
		t.Fatalf("complete: %s %v", done.Phase, err)
	}
	if _, _, err := RecordDelivery(with(done, func(r *Record) { r.Deliveries = nil }), d0, t0); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("delivery into a terminal record: %v", err)
	}
}

func TestRecommendCoversEveryPhaseAndMatrixRow(t *testing.T) {
	t.Parallel()
	base := prepared()
	tests := []struct {
		name   string
		rec    Record
		action Action
		effect Effect
	}{
		// The design's recovery matrix, row by row.
		{"prepared, never dispatched → review allowance then dispatch", base, ActionDispatch, EffectSubmitNew},
		{"accepted, job id known → observe", with(base, func(r *Record) { r.Phase = PhaseAccepted; r.RemoteJobID = "j" }), ActionObserve, EffectReadStatus},
		{"succeeded, copy incomplete → deliver", with(base, func(r *Record) { r.Phase = PhaseSucceeded; r.RemoteJobID = "j" }), ActionDeliver, EffectCopyOutput},
		{"failed, refund unresolved → inspect accounting", with(base, func(r *Record) { r.Phase = PhaseFailed; r.RemoteJobID = "j"; r.Settlement = SettlementUnresolved }), ActionInspectAccounting, EffectAccounting},
		{"failed, refund unresolved past the accounting budget → settle outside Genace", with(base, func(r *Record) {
			r.Phase = PhaseFailed
			r.RemoteJobID = "j"
			r.Settlement = SettlementUnresolved
			r.Parked = &ParkedState{Reason: "refund_state none with 12 charged after the accounting budget"}
			r.LastError = CategoryRefundUnresolved
		}), ActionSettleOutside, EffectSettle},
		{"failed, refund unresolved, parked by a read that failed → inspect accounting again, never settle outside", with(base, func(r *Record) {
			// Genace was unreachable (or its answers drifted) while the
			// refund was pending: once it answers again, a read can still
			// settle the refund; settling outside Genace could refund twice.
			r.Phase = PhaseFailed
			r.RemoteJobID = "j"
			r.Settlement = SettlementUnresolved
			r.Parked = &ParkedState{Reason: "observation cannot continue: 80 consecutive failed reads"}
			r.LastError = "genace_read_failed"
		}), ActionInspectAccounting, EffectAccounting},
		{"submitting → manual reconciliation", with(base, func(r *Record) { r.Phase = PhaseSubmitting }), ActionReconcile, EffectManual},
		{"uncertain → manual reconciliation", with(base, func(r *Record) { r.Phase = PhaseUncertain }), ActionReconcile, EffectManual},
		{"delivered → acknowledge", with(base, func(r *Record) { r.Phase = PhaseDelivered; r.RemoteJobID = "j" }), ActionAcknowledge, EffectNone},
		{"failed, settled → acknowledge", with(base, func(r *Record) { r.Phase = PhaseFailed; r.RemoteJobID = "j"; r.Settlement = SettlementSettled }), ActionAcknowledge, EffectNone},
		{"superseded → acknowledge", with(base, func(r *Record) { r.Phase = PhaseSuperseded }), ActionAcknowledge, EffectNone},
		// The phases the matrix leaves implicit.
		{"rejected → acknowledge", with(base, func(r *Record) { r.Phase = PhaseRejected }), ActionAcknowledge, EffectNone},
		{"stalled with job id → observe", with(base, func(r *Record) { r.Phase = PhaseStalled; r.RemoteJobID = "j" }), ActionObserve, EffectReadStatus},
		{"accepted without job id → reconcile", with(base, func(r *Record) { r.Phase = PhaseAccepted }), ActionReconcile, EffectManual},
		{"prepared with a job id → observe, never POST", with(base, func(r *Record) { r.RemoteJobID = "j" }), ActionObserve, EffectReadStatus},
		{"unknown phase → reconcile", with(base, func(r *Record) { r.Phase = "bogus" }), ActionReconcile, EffectManual},
	}
	seen := map[Phase]bool{}
	rows := map[Action]bool{}
	for _, tt := range tests {
		seen[tt.rec.Phase] = true
		rows[tt.action] = true
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Recommend(&tt.rec)
			if got.Action != tt.action || got.Effect != tt.effect || got.Reason == "" {
				t.Fatalf("Recommend = %+v, want %s / %s with a reason", got, tt.action, tt.effect)
			}
		})
	}
	for _, p := range Phases {
		if !seen[p] {
			t.Errorf("phase %s has no recovery case", p)
		}
	}
	// An action no row selects is one no operator can ever replay; the
	// replay package's tests then check each has a step, a fixture, and
	// is carried out (TestEveryActionIsCovered, TestReplayEachFixture).
	for _, a := range Actions {
		if !rows[a] {
			t.Errorf("action %s is selected by no recovery case", a)
		}
	}
}

func TestSweepDue(t *testing.T) {
	t.Parallel()
	due := t0.Add(time.Minute)
	tests := []struct {
		name string
		rec  Record
		ok   bool
		at   time.Time
	}{
		{"prepared without schedule", prepared(), false, time.Time{}},
		{"prepared with delayed dispatch", with(prepared(), func(r *Record) { r.Schedule = &NextAction{Action: "submit_generation", Due: due} }), true, due},
		{"submitting claim", with(prepared(), func(r *Record) { r.Phase = PhaseSubmitting; r.Claim = &Claim{At: t0} }), true, t0},
		{"accepted with observation", with(prepared(), func(r *Record) { r.Phase = PhaseAccepted; r.Schedule = &NextAction{Due: due} }), true, due},
		{"uncertain", with(prepared(), func(r *Record) { r.Phase = PhaseUncertain; r.Schedule = &NextAction{Due: due} }), false, time.Time{}},
		{"parked failure", with(prepared(), func(r *Record) {
			r.Phase = PhaseFailed
			r.Settlement = SettlementUnresolved
			r.Parked = &ParkedState{}
			r.Schedule = &NextAction{Due: due}
		}), false, time.Time{}},
		{"delivered", with(prepared(), func(r *Record) { r.Phase = PhaseDelivered; r.Schedule = &NextAction{Due: due} }), false, time.Time{}},
		// A failure parked by observe or deliver (worker.Park) leaves the
		// index even should a schedule linger: the sweep never re-arms it.
		{"parked observation", with(prepared(), func(r *Record) {
			r.Phase = PhaseAccepted
			r.Parked = &ParkedState{Reason: "genace_read_failed"}
			r.Schedule = &NextAction{Due: due}
		}), false, time.Time{}},
		{"parked delivery", with(prepared(), func(r *Record) {
			r.Phase = PhaseSucceeded
			r.Parked = &ParkedState{Reason: "artifact_verify_failed"}
			r.Schedule = &NextAction{Due: due}
		}), false, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			at, ok := tt.rec.SweepDue()
			if ok != tt.ok || !at.Equal(tt.at) {
				t.Fatalf("SweepDue = %v, %t; want %v, %t", at, ok, tt.at, tt.ok)
			}
		})
	}
}

func TestParseAction(t *testing.T) {
	t.Parallel()
	for _, a := range Actions {
		if got, err := ParseAction(string(a)); err != nil || got != a {
			t.Errorf("ParseAction(%q) = %q, %v", a, got, err)
		}
	}
	if _, err := ParseAction("redrive-all"); err == nil {
		t.Error("ParseAction accepted an unknown action")
	}
}

func TestReadFailed(t *testing.T) {
	t.Parallel()
	acc := with(prepared(), func(r *Record) { r.Phase = PhaseAccepted; r.RemoteJobID = "job_1"; r.Timestamps.Accepted = &t0 })
	r1, err := ReadFailed(acc, "genace_5xx", t0)
	if err != nil || r1.Phase != PhaseAccepted || r1.Counters.ReadFailures != 1 || r1.LastError != "genace_5xx" {
		t.Fatalf("ReadFailed = %+v, %v", r1, err)
	}
	r2, _, err := Observe(r1, snap(RemoteRunning, 0, RefundNone), t0, DefaultBudgets)
	if err != nil || r2.Counters.ReadFailures != 0 {
		t.Fatalf("a successful read did not reset the failure count: %+v %v", r2.Counters, err)
	}
	if _, err := ReadFailed(prepared(), "x", t0); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("ReadFailed without a job id: %v", err)
	}
	if _, err := ReadFailed(with(acc, func(r *Record) { r.Phase = PhaseDelivered }), "x", t0); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("ReadFailed on a terminal record: %v", err)
	}
}
