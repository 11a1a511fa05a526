// Package storetest is the conformance suite every store.Store passes:
// one set of behaviours, checked the same way against DynamoDB and bbolt,
// so the local stack cannot drift from production semantics.
package storetest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

// base is the fixed time every non-Due fixture is built around. It has
// nanoseconds so a store that drops sub-second precision fails.
var base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// dueEpoch is where the Due subtests live: long before base, so records
// the parallel subtests leave in a shared table are never due at the
// times the Due subtests ask about. Each Due subtest takes its own year,
// going back in time, so the ones before it are never due either.
var dueEpoch = time.Date(2000, 6, 1, 12, 0, 0, 123456789, time.UTC)

// indexWait bounds how long the suite waits for an index-backed read
// (Due, OpenReviews) to show a write: DynamoDB's GSIs are eventually
// consistent; the bbolt store answers on the first try.
const indexWait = 10 * time.Second

// Run runs the suite. open returns a store for one subtest; it may be a
// fresh store or one on shared storage (a DynamoDB table): every subtest
// uses operation and review ids of its own. Run closes each store it gets.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	s := &suite{run: randomID(), open: open}

	t.Run("CreateIfAbsent", s.createIfAbsent)
	t.Run("CreateRejectsBadInput", s.createRejectsBadInput)
	t.Run("GetMissing", s.getMissing)
	t.Run("UpdateRoundTripsEveryField", s.updateRoundTrips)
	t.Run("UpdateRejectsBadInput", s.updateRejectsBadInput)
	t.Run("UpdateMissingConflicts", s.updateMissing)
	t.Run("StaleRevisionRejected", s.staleRevision)
	t.Run("ConcurrentWritersOneWins", s.concurrentWriters)
	t.Run("ConcurrentIncrementsLoseNothing", s.noLostUpdates)
	t.Run("TerminalNeverOverwritten", s.terminal)
	t.Run("OwnWriteIsWritten", s.ownWriteResent)
	t.Run("OtherWriteAtNextRevisionConflicts", s.otherWriteConflicts)
	t.Run("UpdateWithAuditWritesBoth", s.auditWritesBoth)
	t.Run("UpdateWithAuditStaleWritesNeither", s.auditStale)
	t.Run("OneAuditEntryPerRevision", s.oneAuditPerRevision)
	t.Run("UpdateWithAuditConcurrent", s.auditConcurrent)
	t.Run("UpdateWithAuditRejectsMismatchedEntry", s.auditMismatch)
	t.Run("AuditOldestFirst", s.auditOrder)
	t.Run("PutReviewOnce", s.putReviewOnce)
	t.Run("GetReviewMissing", s.getReviewMissing)
	t.Run("OpenReviewsExcludesClosed", s.openReviews)
	t.Run("CloseReviewIdempotent", s.closeReview)
	s.runReviewsOf(t)
	t.Run("OperationReviewsOpenAndClosed", s.operationReviews)
	t.Run("JobRefsFindEveryHolder", s.jobRefs)
	// Not parallel, in this order: see dueEpoch.
	t.Run("Due", func(t *testing.T) {
		t.Run("OnlyDueAtOrBefore", s.dueBound)
		t.Run("EarliestFirstAndLimit", s.dueOrder)
		t.Run("ExcludesInactive", s.dueExcludesInactive)
		t.Run("IndexFollowsEveryWrite", s.dueFollowsWrites)
	})
}

type suite struct {
	run  string
	open func(t *testing.T) store.Store
}

func randomID() string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b)
}

// store opens the subtest's store and closes it when the subtest ends.
func (s *suite) store(t *testing.T) store.Store {
	t.Helper()
	st := s.open(t)
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return st
}

// id is unique to this run, subtest and suffix, so subtests can share a
// table and runs can share nothing by accident.
func (s *suite) id(t *testing.T, suffix string) string {
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return fmt.Sprintf("%s.%s.%s", s.run, name, suffix)
}

// --- fixtures ---

func ptr(t time.Time) *time.Time { return &t }

// newRecord is a minimal prepared record: not due, not terminal.
func newRecord(id string) operation.Record {
	return operation.Record{
		OperationID: id,
		Phase:       operation.PhasePrepared,
		UserID:      "user-1",
		Model:       "genace-v2",
		Input:       json.RawMessage(`{"prompt":"a small boat"}`),
		Timestamps:  operation.Timestamps{Created: base, Updated: base},
	}
}

// scheduled is an accepted record whose next action is due at due.
func scheduled(id string, due time.Time) operation.Record {
	r := newRecord(id)
	r.Phase = operation.PhaseAccepted
	r.RemoteJobID = "job-" + id
	r.Schedule = &operation.NextAction{Action: "observe_generation", Due: due}
	return r
}

// fullRecord sets every field, nested ones included, with nanosecond
// times (one in a non-UTC zone), so a lossy encoding shows.
func fullRecord(id string) operation.Record {
	at := func(d time.Duration) time.Time { return base.Add(d) }
	kolkata := time.FixedZone("IST", 5*3600+1800)
	return operation.Record{
		OperationID:            id,
		SpecRevision:           3,
		Phase:                  operation.PhaseAccepted,
		UserID:                 "user-42",
		Model:                  "genace-v2",
		Input:                  json.RawMessage(`{"prompt":"a lighthouse at dusk","size":"1024x1024","seed":7,"tags":["sea","light"]}`),
		InputRef:               "inputs/" + id,
		Authorized:             true,
		AuthorizedSpecRevision: 3,
		BudgetCredits:          500,
		EstimatedCredits:       120,
		RemoteJobID:            "job_01JTESTFULLRECORD",
		Claim:                  &operation.Claim{Owner: "submit/worker-1", MessageID: "msg-claim", At: at(time.Second + 1)},
		Remote: &operation.Snapshot{
			State:             operation.RemoteRunning,
			SubmissionFailure: true,
			Progress:          0.375,
			ErrorCode:         "E_TRANSIENT",
			Credits:           operation.Credits{Reserved: 120, Charged: 100, Refunded: 20, RefundState: operation.RefundPending},
			Outputs: []operation.OutputDescriptor{
				{ContentType: "image/png", SizeBytes: 123456, SHA256: strings.Repeat("a", 64)},
				{ContentType: "image/webp", SizeBytes: 65432, SHA256: strings.Repeat("b", 64)},
				{ContentType: "image/jpeg", SizeBytes: 4321, SHA256: strings.Repeat("d", 64)},
			},
			CreatedAt:  at(2 * time.Second),
			UpdatedAt:  at(3*time.Second + 7),
			StartedAt:  ptr(at(4 * time.Second)),
			FinishedAt: ptr(at(5 * time.Second).In(kolkata)),
			ObservedAt: at(6*time.Second + 999),
		},
		Settlement: operation.SettlementUnresolved,
		Posts:      1,
		Deliveries: []operation.Delivery{
			// Outputs 1 and 2 stored, 0 not yet: a delivery in progress
			// (and no zero Index, which the zero-field check would flag).
			{Index: 2, Key: "outputs/" + id + "/2.jpg", SizeBytes: 4321, SHA256: strings.Repeat("d", 64), StoredAt: at(7 * time.Second)},
			{Index: 1, Key: "outputs/" + id + "/1.webp", SizeBytes: 65432, SHA256: strings.Repeat("b", 64), StoredAt: at(8 * time.Second)},
		},
		Schedule: &operation.NextAction{Action: "observe_generation", Due: at(time.Minute + 3)},
		Counters: operation.Counters{Observations: 9, RateLimited: 2, WindowObservations: 4, ReadFailures: 1},
		Timestamps: operation.Timestamps{
			Created:      base,
			Updated:      at(9 * time.Second),
			Accepted:     ptr(at(10 * time.Second)),
			RemoteFailed: ptr(at(11 * time.Second)),
		},
		LastError:            "rate_limited",
		Parked:               &operation.ParkedState{Reason: "operator asked", At: at(12 * time.Second)},
		LastAppliedMessageID: "msg-full",
		Writer:               "observe/receive-full", // the store sets it from the context: write with store.WithWriter
	}
}

func newReview(id string, created time.Time) review.Record {
	return review.Record{
		ID:            id,
		Source:        review.SourceDLQ,
		Queue:         "observe-dlq",
		OperationID:   "op-" + id,
		MessageID:     "msg-" + id,
		MessageType:   "observe_generation",
		ReceiveCount:  5,
		ErrorCategory: "remote_5xx",
		RemoteJobID:   "job-" + id,
		Phase:         operation.PhaseAccepted,
		RemoteState:   operation.RemoteRunning,
		Revision:      7,
		Recommended:   operation.ActionObserve,
		Reason:        "observe kept failing",
		BodyDigest:    strings.Repeat("c", 64),
		CreatedAt:     created,
		Open:          true,
	}
}

func auditEntry(id string, from, to operation.Phase, fromRev int64) review.AuditEntry {
	return review.AuditEntry{
		Operator:     "alice",
		Action:       operation.ActionObserve,
		Decision:     "attach-job",
		FromPhase:    from,
		ToPhase:      to,
		FromRevision: fromRev,
		ReviewID:     "review-" + id,
		At:           base.Add(time.Hour + 17),
	}
}

// --- normalisation and comparison ---

func utc(t time.Time) time.Time { return t.UTC() }

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	return ptr(t.UTC())
}

// normRecord returns a deep copy with every time in UTC (and no monotonic
// reading), the only difference a faithful store may introduce.
func normRecord(r operation.Record) operation.Record {
	c := r.Clone()
	if c.Claim != nil {
		c.Claim.At = utc(c.Claim.At)
	}
	if c.Remote != nil {
		c.Remote.CreatedAt = utc(c.Remote.CreatedAt)
		c.Remote.UpdatedAt = utc(c.Remote.UpdatedAt)
		c.Remote.ObservedAt = utc(c.Remote.ObservedAt)
		c.Remote.StartedAt = utcPtr(c.Remote.StartedAt)
		c.Remote.FinishedAt = utcPtr(c.Remote.FinishedAt)
	}
	for i := range c.Deliveries {
		c.Deliveries[i].StoredAt = utc(c.Deliveries[i].StoredAt)
	}
	if c.Schedule != nil {
		c.Schedule.Due = utc(c.Schedule.Due)
	}
	c.Timestamps.Created = utc(c.Timestamps.Created)
	c.Timestamps.Updated = utc(c.Timestamps.Updated)
	c.Timestamps.Accepted = utcPtr(c.Timestamps.Accepted)
	c.Timestamps.RemoteFailed = utcPtr(c.Timestamps.RemoteFailed)
	if c.Parked != nil {
		c.Parked.At = utc(c.Parked.At)
	}
	return c
}

func normReview(r review.Record) review.Record {
	r.CreatedAt = utc(r.CreatedAt)
	r.ClosedAt = utc(r.ClosedAt)
	return r
}

func normEntry(e review.AuditEntry) review.AuditEntry {
	e.At = utc(e.At)
	return e
}

func equalRecord(t *testing.T, what string, got, want operation.Record) {
	t.Helper()
	g, w := normRecord(got), normRecord(want)
	if !reflect.DeepEqual(g, w) {
		gj, _ := json.MarshalIndent(g, "", "  ")
		wj, _ := json.MarshalIndent(w, "", "  ")
		t.Fatalf("%s: records differ\n got: %s\nwant: %s", what, gj, wj)
	}
}

// zeroFields lists the zero-valued fields under v, so the round-trip
// fixture cannot silently miss a field added to the record later.
func zeroFields(v reflect.Value, path string) []string {
	if v.Type() == reflect.TypeFor[time.Time]() {
		if v.Interface().(time.Time).IsZero() {
			return []string{path}
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return []string{path}
		}
		return zeroFields(v.Elem(), path)
	case reflect.Struct:
		var zero []string
		for i := range v.NumField() {
			zero = append(zero, zeroFields(v.Field(i), path+"."+v.Type().Field(i).Name)...)
		}
		return zero
	case reflect.Slice:
		if v.Len() == 0 {
			return []string{path}
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return nil
		}
		var zero []string
		for i := range v.Len() {
			zero = append(zero, zeroFields(v.Index(i), fmt.Sprintf("%s[%d]", path, i))...)
		}
		return zero
	}
	if v.IsZero() {
		return []string{path}
	}
	return nil
}

// --- helpers ---

func mustCreate(t *testing.T, st store.Store, rec operation.Record) operation.Record {
	t.Helper()
	got, err := st.Create(t.Context(), rec)
	if err != nil {
		t.Fatalf("create %s: %v", rec.OperationID, err)
	}
	return got
}

func mustGet(t *testing.T, st store.Store, id string) operation.Record {
	t.Helper()
	got, err := st.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return got
}

func mustUpdate(t *testing.T, st store.Store, rec operation.Record, expected int64) operation.Record {
	t.Helper()
	got, err := st.Update(t.Context(), rec, expected)
	if err != nil {
		t.Fatalf("update %s at %d: %v", rec.OperationID, expected, err)
	}
	if got.Revision != expected+1 {
		t.Fatalf("update %s at %d: returned revision %d, want %d", rec.OperationID, expected, got.Revision, expected+1)
	}
	return got
}

// conflictOf asserts err is a revision conflict and returns its detail.
func conflictOf(t *testing.T, err error, id string, expected int64) *store.ConflictError {
	t.Helper()
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("want ErrConflict, got %v", err)
	}
	var ce *store.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("want *store.ConflictError, got %T: %v", err, err)
	}
	if ce.OperationID != id || ce.Expected != expected {
		t.Fatalf("conflict names %s at %d, want %s at %d", ce.OperationID, ce.Expected, id, expected)
	}
	return ce
}

// wantConflictWithCurrent asserts a conflict whose Current is the stored
// record, and that the stored record is still want.
func wantConflictWithCurrent(t *testing.T, st store.Store, err error, expected int64, want operation.Record) {
	t.Helper()
	ce := conflictOf(t, err, want.OperationID, expected)
	if ce.Current == nil {
		t.Fatalf("conflict has no current record")
	}
	equalRecord(t, "conflict's current record", *ce.Current, want)
	equalRecord(t, "stored record after the refused write", mustGet(t, st, want.OperationID), want)
}

func mustAudit(t *testing.T, st store.Store, id string) []review.AuditEntry {
	t.Helper()
	entries, err := st.Audit(t.Context(), id)
	if err != nil {
		t.Fatalf("audit %s: %v", id, err)
	}
	return entries
}

// eventually retries an index-backed check until it passes or indexWait
// runs out, then fails with its last complaint.
func eventually(t *testing.T, check func() string) {
	t.Helper()
	deadline := time.Now().Add(indexWait)
	for {
		complaint := check()
		if complaint == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(complaint)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ids(recs []operation.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.OperationID
	}
	return out
}

// wantDue checks Due(at, limit) lists exactly want, in order.
func wantDue(t *testing.T, st store.Store, at time.Time, limit int, want ...string) []operation.Record {
	t.Helper()
	var got []operation.Record
	eventually(t, func() string {
		var err error
		got, err = st.Due(t.Context(), at, limit)
		if err != nil {
			return fmt.Sprintf("due: %v", err)
		}
		if g := ids(got); !slices.Equal(g, want) && !(len(g) == 0 && len(want) == 0) {
			return fmt.Sprintf("Due(%s, %d) = %q, want %q", at.Format(time.RFC3339Nano), limit, g, want)
		}
		return ""
	})
	return got
}

// --- records ---

func (s *suite) createIfAbsent(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "op")
	rec := newRecord(id)
	got := mustCreate(t, st, rec)
	if got.Revision != 1 {
		t.Fatalf("create returned revision %d, want 1", got.Revision)
	}
	want := rec
	want.Revision = 1
	equalRecord(t, "create's result", got, want)
	equalRecord(t, "stored record", mustGet(t, st, id), want)

	again := newRecord(id)
	again.UserID = "someone-else"
	again.Revision = 1
	if _, err := st.Create(t.Context(), again); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second create: want ErrExists, got %v", err)
	}
	equalRecord(t, "record after the second create", mustGet(t, st, id), want)

	// A record already at revision 1 is accepted as is.
	one := newRecord(s.id(t, "at-one"))
	one.Revision = 1
	if got := mustCreate(t, st, one); got.Revision != 1 {
		t.Fatalf("create at revision 1 returned revision %d", got.Revision)
	}
}

func (s *suite) createRejectsBadInput(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "op")
	rec := newRecord(id)
	rec.Revision = 5
	if _, err := st.Create(t.Context(), rec); err == nil {
		t.Fatal("create at revision 5 succeeded")
	}
	if _, err := st.Get(t.Context(), id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused create left a record (get: %v)", err)
	}
	if _, err := st.Create(t.Context(), newRecord("")); err == nil {
		t.Fatal("create with an empty id succeeded")
	}
}

func (s *suite) getMissing(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	_, err := st.Get(t.Context(), s.id(t, "absent"))
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get missing: want ErrNotFound, got %v", err)
	}
}

func (s *suite) updateRoundTrips(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "op")
	mustCreate(t, st, newRecord(id))

	full := fullRecord(id)
	full.Revision = 99 // the store sets the revision, whatever came in
	ctx := store.WithWriter(t.Context(), full.Writer)
	got, err := st.Update(ctx, full, 1)
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	want := full
	want.Revision = 2
	equalRecord(t, "update's result", got, want)
	stored := mustGet(t, st, id)
	if zero := zeroFields(reflect.ValueOf(stored), "Record"); len(zero) > 0 {
		t.Fatalf("fields empty after the round trip: %v (a new field? set it in storetest's fullRecord)", zero)
	}
	equalRecord(t, "stored full record", stored, want)

	// Writing back what was read keeps it all too, but for the writer:
	// that is whoever writes now (the context's), not who wrote before.
	stored.Counters.Observations++
	stored.Writer = "the previous writer"
	if _, err := st.Update(ctx, stored, 2); err != nil {
		t.Fatalf("read-modify-write: %v", err)
	}
	want.Revision, want.Counters.Observations = 3, want.Counters.Observations+1
	equalRecord(t, "record after a read-modify-write", mustGet(t, st, id), want)
}

func (s *suite) updateRejectsBadInput(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "op")
	created := mustCreate(t, st, newRecord(id))
	for name, tc := range map[string]struct {
		rec      operation.Record
		expected int64
	}{
		"empty id":   {newRecord(""), 1},
		"revision 0": {newRecord(id), 0},
	} {
		_, err := st.Update(t.Context(), tc.rec, tc.expected)
		if err == nil || errors.Is(err, store.ErrConflict) {
			t.Errorf("%s: want a plain error, got %v", name, err)
		}
	}
	equalRecord(t, "record after refused updates", mustGet(t, st, id), created)
}

func (s *suite) updateMissing(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "absent")
	_, err := st.Update(t.Context(), newRecord(id), 1)
	if ce := conflictOf(t, err, id, 1); ce.Current != nil {
		t.Fatalf("conflict on a missing record has a current record: %+v", ce.Current)
	}
	if _, err := st.Get(t.Context(), id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of a missing record created it (get: %v)", err)
	}
}

func (s *suite) staleRevision(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "op")
	v1 := mustCreate(t, st, newRecord(id))
	next := v1.Clone()
	next.Phase = operation.PhaseSubmitting
	next.LastAppliedMessageID = "msg-2"
	v2 := mustUpdate(t, st, next, 1)

	stale := v1.Clone()
	stale.LastAppliedMessageID = "msg-stale"
	_, err := st.Update(t.Context(), stale, 1)
	wantConflictWithCurrent(t, st, err, 1, v2)

	// Ahead of the stored revision is as wrong as behind it.
	_, err = st.Update(t.Context(), stale, 5)
	wantConflictWithCurrent(t, st, err, 5, v2)
}

func (s *suite) concurrentWriters(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "op")
	mustCreate(t, st, newRecord(id))

	const writers = 16
	errs := make([]error, writers)
	var read, done sync.WaitGroup
	gate := make(chan struct{})
	for i := range writers {
		read.Add(1)
		done.Go(func() {
			cur, err := st.Get(t.Context(), id)
			read.Done()
			if err != nil {
				errs[i] = fmt.Errorf("get: %w", err)
				return
			}
			<-gate
			cur.LastAppliedMessageID = fmt.Sprintf("writer-%02d", i)
			cur.Counters.Observations = i + 1
			_, errs[i] = st.Update(t.Context(), cur, cur.Revision)
		})
	}
	read.Wait() // every writer holds revision 1 before any writes
	close(gate)
	done.Wait()

	winner := -1
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Fatalf("writers %d and %d both wrote on revision 1", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("no writer won: %v", errs)
	}
	stored := mustGet(t, st, id)
	wantMarker := fmt.Sprintf("writer-%02d", winner)
	if stored.Revision != 2 || stored.LastAppliedMessageID != wantMarker || stored.Counters.Observations != winner+1 {
		t.Fatalf("stored revision %d by %q, want revision 2 by %q", stored.Revision, stored.LastAppliedMessageID, wantMarker)
	}
	for i, err := range errs {
		if i == winner {
			continue
		}
		ce := conflictOf(t, err, id, 1)
		if ce.Current == nil {
			t.Fatalf("writer %d: conflict without the current record", i)
		}
		equalRecord(t, fmt.Sprintf("writer %d's conflict", i), *ce.Current, stored)
	}
}

func (s *suite) noLostUpdates(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "op")
	mustCreate(t, st, newRecord(id))

	const goroutines, increments = 8, 20
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range increments {
				cur, err := st.Get(t.Context(), id)
				if err != nil {
					errs <- err
					return
				}
				for attempt := 0; ; attempt++ {
					if attempt == 1000 {
						errs <- errors.New("no progress after 1000 conflicts")
						return
					}
					next := cur.Clone()
					next.Counters.Observations++
					_, err := st.Update(t.Context(), next, cur.Revision)
					if err == nil {
						break
					}
					var ce *store.ConflictError
					if !errors.As(err, &ce) || ce.Current == nil {
						errs <- fmt.Errorf("update: %w", err)
						return
					}
					cur = *ce.Current // retry on what actually stands
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := mustGet(t, st, id)
	if got.Counters.Observations != goroutines*increments || got.Revision != goroutines*increments+1 {
		t.Fatalf("counter %d at revision %d, want %d at %d (a lost update)",
			got.Counters.Observations, got.Revision, goroutines*increments, goroutines*increments+1)
	}
}

func (s *suite) terminal(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		phase operation.Phase
		settl operation.Settlement
	}{
		{"delivered", operation.PhaseDelivered, operation.SettlementNone},
		{"failed-settled", operation.PhaseFailed, operation.SettlementSettled},
		{"rejected", operation.PhaseRejected, operation.SettlementNone},
		{"superseded", operation.PhaseSuperseded, operation.SettlementNone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := s.store(t)
			id := s.id(t, "op")
			v1 := mustCreate(t, st, scheduled(id, base))
			end := v1.Clone()
			end.Phase, end.Settlement = tc.phase, tc.settl
			final := mustUpdate(t, st, end, 1) // becoming terminal is a write like any other
			if !final.Terminal() {
				t.Fatalf("fixture %s is not terminal", tc.name)
			}

			// The correct revision does not help.
			again := final.Clone()
			again.Phase, again.Settlement = operation.PhaseAccepted, operation.SettlementNone
			_, err := st.Update(t.Context(), again, 2)
			wantConflictWithCurrent(t, st, err, 2, final)
			// Nor does an audited write.
			_, err = st.UpdateWithAudit(t.Context(), again, 2, auditEntry(id, tc.phase, operation.PhaseAccepted, 2))
			wantConflictWithCurrent(t, st, err, 2, final)
			if entries := mustAudit(t, st, id); len(entries) != 0 {
				t.Fatalf("refused audited write left entries: %+v", entries)
			}
			// A stale writer is refused too.
			_, err = st.Update(t.Context(), v1, 1)
			wantConflictWithCurrent(t, st, err, 1, final)
		})
	}
	// The control: failed but unresolved is not terminal, and must stay
	// writable (the refund is still being chased).
	t.Run("failed-unresolved-stays-writable", func(t *testing.T) {
		t.Parallel()
		st := s.store(t)
		id := s.id(t, "op")
		v1 := mustCreate(t, st, scheduled(id, base))
		failed := v1.Clone()
		failed.Phase, failed.Settlement = operation.PhaseFailed, operation.SettlementUnresolved
		v2 := mustUpdate(t, st, failed, 1)
		v2.Settlement = operation.SettlementSettled
		mustUpdate(t, st, v2, 2)
	})
}

// --- audit ---

func (s *suite) auditWritesBoth(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "op")
	v1 := mustCreate(t, st, newRecord(id))
	next := v1.Clone()
	next.Phase = operation.PhaseSuperseded
	entry := auditEntry(id, operation.PhasePrepared, operation.PhaseSuperseded, 1)
	got, err := st.UpdateWithAudit(t.Context(), next, 1, entry)
	if err != nil {
		t.Fatalf("update with audit: %v", err)
	}
	want := next
	want.Revision = 2
	equalRecord(t, "update with audit's result", got, want)
	equalRecord(t, "stored record", mustGet(t, st, id), want)

	entries := mustAudit(t, st, id)
	wantEntry := entry
	wantEntry.OperationID, wantEntry.Revision = id, 2 // filled in by the store
	if len(entries) != 1 || !reflect.DeepEqual(normEntry(entries[0]), normEntry(wantEntry)) {
		t.Fatalf("audit = %+v, want [%+v]", entries, wantEntry)
	}
}

func (s *suite) auditStale(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "op")
	v1 := mustCreate(t, st, newRecord(id))
	next := v1.Clone()
	next.LastAppliedMessageID = "msg-2"
	v2 := mustUpdate(t, st, next, 1)

	stale := v1.Clone()
	stale.Phase = operation.PhaseSuperseded
	_, err := st.UpdateWithAudit(t.Context(), stale, 1, auditEntry(id, operation.PhasePrepared, operation.PhaseSuperseded, 1))
	wantConflictWithCurrent(t, st, err, 1, v2)
	if entries := mustAudit(t, st, id); len(entries) != 0 {
		t.Fatalf("refused transaction wrote audit entries: %+v", entries)
	}
}

func (s *suite) oneAuditPerRevision(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "op")
	v1 := mustCreate(t, st, newRecord(id))
	first := v1.Clone()
	first.LastAppliedMessageID = "replay-1"
	firstEntry := auditEntry(id, operation.PhasePrepared, operation.PhasePrepared, 1)
	v2, err := st.UpdateWithAudit(t.Context(), first, 1, firstEntry)
	if err != nil {
		t.Fatalf("first update with audit: %v", err)
	}

	second := v1.Clone()
	second.LastAppliedMessageID = "replay-2"
	secondEntry := auditEntry(id, operation.PhasePrepared, operation.PhasePrepared, 1)
	secondEntry.Operator, secondEntry.Revision = "bob", 2
	_, err = st.UpdateWithAudit(t.Context(), second, 1, secondEntry)
	wantConflictWithCurrent(t, st, err, 1, v2)

	entries := mustAudit(t, st, id)
	if len(entries) != 1 || entries[0].Operator != "alice" || entries[0].Revision != 2 {
		t.Fatalf("audit = %+v, want alice's one entry for revision 2", entries)
	}
}

func (s *suite) auditConcurrent(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "op")
	v1 := mustCreate(t, st, newRecord(id))

	const operators = 8
	errs := make([]error, operators)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range operators {
		wg.Go(func() {
			next := v1.Clone()
			next.LastAppliedMessageID = fmt.Sprintf("operator-%d", i)
			e := auditEntry(id, operation.PhasePrepared, operation.PhasePrepared, 1)
			e.Operator = fmt.Sprintf("operator-%d", i)
			<-gate
			_, errs[i] = st.UpdateWithAudit(t.Context(), next, 1, e)
		})
	}
	close(gate)
	wg.Wait()

	winners := 0
	for i, err := range errs {
		switch {
		case err == nil:
			winners++
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("operator %d: want success or ErrConflict, got %v", i, err)
		}
	}
	if winners != 1 {
		t.Fatalf("%d operators won, want exactly 1: %v", winners, errs)
	}
	stored := mustGet(t, st, id)
	entries := mustAudit(t, st, id)
	if len(entries) != 1 || entries[0].Operator != stored.LastAppliedMessageID {
		t.Fatalf("audit = %+v for a record written by %q, want that operator's one entry", entries, stored.LastAppliedMessageID)
	}
}

func (s *suite) auditMismatch(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "op")
	v1 := mustCreate(t, st, newRecord(id))
	next := v1.Clone()
	next.Phase = operation.PhaseSuperseded

	wrongRev := auditEntry(id, operation.PhasePrepared, operation.PhaseSuperseded, 1)
	wrongRev.Revision = 3 // the update produces 2
	wrongOp := auditEntry(id, operation.PhasePrepared, operation.PhaseSuperseded, 1)
	wrongOp.OperationID = s.id(t, "other")
	for name, e := range map[string]review.AuditEntry{"wrong revision": wrongRev, "wrong operation": wrongOp} {
		_, err := st.UpdateWithAudit(t.Context(), next, 1, e)
		if err == nil || errors.Is(err, store.ErrConflict) {
			t.Errorf("%s: want a plain error, got %v", name, err)
		}
	}
	equalRecord(t, "record after refused audited writes", mustGet(t, st, id), v1)
	if entries := mustAudit(t, st, id); len(entries) != 0 {
		t.Fatalf("refused audited writes left entries: %+v", entries)
	}
}

func (s *suite) auditOrder(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "op")
	cur := mustCreate(t, st, newRecord(id))
	// 12 entries: revisions 2..13 cross from one digit to two, where a
	// store sorting unpadded strings would put 10 before 2.
	for rev := int64(1); rev <= 12; rev++ {
		next := cur.Clone()
		next.Counters.Observations++
		var err error
		cur, err = st.UpdateWithAudit(t.Context(), next, rev, auditEntry(id, operation.PhasePrepared, operation.PhasePrepared, rev))
		if err != nil {
			t.Fatalf("update with audit at %d: %v", rev, err)
		}
	}
	entries := mustAudit(t, st, id)
	var revs []int64
	for _, e := range entries {
		revs = append(revs, e.Revision)
	}
	want := []int64{2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
	if !slices.Equal(revs, want) {
		t.Fatalf("audit revisions %v, want %v", revs, want)
	}
	if entries := mustAudit(t, st, s.id(t, "absent")); len(entries) != 0 {
		t.Fatalf("audit of an unknown operation: %+v", entries)
	}
}

// --- reviews ---

func (s *suite) putReviewOnce(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "review")
	first := newReview(id, base)
	wrote, err := st.PutReview(t.Context(), first)
	if err != nil || !wrote {
		t.Fatalf("first put: wrote=%v err=%v", wrote, err)
	}
	second := newReview(id, base.Add(time.Hour))
	second.Reason, second.ReceiveCount, second.Source = "something else", 9, review.SourceSweep
	wrote, err = st.PutReview(t.Context(), second)
	if err != nil || wrote {
		t.Fatalf("second put: wrote=%v err=%v, want a no-op", wrote, err)
	}
	got, err := st.GetReview(t.Context(), id)
	if err != nil {
		t.Fatalf("get review: %v", err)
	}
	if !reflect.DeepEqual(normReview(got), normReview(first)) {
		t.Fatalf("stored review %+v, want the first write %+v", got, first)
	}
	if _, err := st.PutReview(t.Context(), newReview("", base)); err == nil {
		t.Fatal("put review with an empty id succeeded")
	}
}

func (s *suite) getReviewMissing(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	if _, err := st.GetReview(t.Context(), s.id(t, "absent")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get missing review: want ErrNotFound, got %v", err)
	}
}

// mine filters a listing to this subtest's reviews: a shared table holds
// other subtests' open reviews too.
func (s *suite) mine(t *testing.T, rs []review.Record) []string {
	prefix := s.id(t, "")
	var out []string
	for _, r := range rs {
		if strings.HasPrefix(r.ID, prefix) {
			out = append(out, r.ID)
		}
	}
	return out
}

func (s *suite) openReviews(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	// Written out of creation order; listed oldest first.
	a, b, c, d := s.id(t, "a"), s.id(t, "b"), s.id(t, "c"), s.id(t, "d")
	closedAtBirth := newReview(d, base.Add(-time.Hour))
	closedAtBirth.Open = false
	for _, r := range []review.Record{newReview(a, base.Add(2*time.Minute)), newReview(b, base), newReview(c, base.Add(time.Minute)), closedAtBirth} {
		if _, err := st.PutReview(t.Context(), r); err != nil {
			t.Fatalf("put review %s: %v", r.ID, err)
		}
	}
	check := func(want ...string) {
		t.Helper()
		eventually(t, func() string {
			rs, err := st.OpenReviews(t.Context())
			if err != nil {
				return fmt.Sprintf("open reviews: %v", err)
			}
			for _, r := range rs {
				if !r.Open {
					return fmt.Sprintf("open reviews lists closed review %s", r.ID)
				}
			}
			if got := s.mine(t, rs); !slices.Equal(got, want) {
				return fmt.Sprintf("open reviews = %q, want %q", got, want)
			}
			return ""
		})
	}
	check(b, c, a)
	if err := st.CloseReview(t.Context(), c, "alice", base.Add(time.Hour)); err != nil {
		t.Fatalf("close review: %v", err)
	}
	check(b, a)
	rs, err := st.OpenReviews(t.Context())
	if err != nil {
		t.Fatalf("open reviews: %v", err)
	}
	for _, r := range rs {
		if r.ID == b && !reflect.DeepEqual(normReview(r), normReview(newReview(b, base))) {
			t.Fatalf("listed review %+v differs from what was written", r)
		}
	}
}

func (s *suite) closeReview(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	id := s.id(t, "review")
	r := newReview(id, base)
	if _, err := st.PutReview(t.Context(), r); err != nil {
		t.Fatalf("put review: %v", err)
	}
	closedAt := base.Add(time.Hour + 5)
	if err := st.CloseReview(t.Context(), id, "alice", closedAt); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := st.CloseReview(t.Context(), id, "bob", closedAt.Add(time.Hour)); err != nil {
		t.Fatalf("second close: %v", err)
	}
	// A redelivered DLQ message writing the review again must not reopen it.
	if wrote, err := st.PutReview(t.Context(), r); err != nil || wrote {
		t.Fatalf("put after close: wrote=%v err=%v, want a no-op", wrote, err)
	}
	got, err := st.GetReview(t.Context(), id)
	if err != nil {
		t.Fatalf("get review: %v", err)
	}
	want := r
	want.Open, want.ClosedBy, want.ClosedAt = false, "alice", closedAt
	if !reflect.DeepEqual(normReview(got), normReview(want)) {
		t.Fatalf("closed review %+v, want %+v (the first close stands)", got, want)
	}
	eventually(t, func() string {
		rs, err := st.OpenReviews(t.Context())
		if err != nil {
			return fmt.Sprintf("open reviews: %v", err)
		}
		if mine := s.mine(t, rs); len(mine) != 0 {
			return fmt.Sprintf("closed review still listed open: %q", mine)
		}
		return ""
	})
	if err := st.CloseReview(t.Context(), s.id(t, "absent"), "alice", closedAt); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("close missing review: want ErrNotFound, got %v", err)
	}
}

// --- Due ---

// dueAt is the query time of the Due subtest with index k (0, 1, ...):
// one year further back per subtest.
func dueAt(k int) time.Time { return dueEpoch.AddDate(-k, 0, 0) }

func (s *suite) dueBound(t *testing.T) {
	st := s.store(t)
	at := dueAt(0)
	early, claimed, exact := s.id(t, "early"), s.id(t, "claimed"), s.id(t, "exact")
	later, future := s.id(t, "later-by-1ns"), s.id(t, "future")
	claim := newRecord(claimed)
	claim.Phase = operation.PhaseSubmitting
	claim.Claim = &operation.Claim{Owner: "submit/worker-1", At: at.Add(-30 * time.Minute)}
	for _, r := range []operation.Record{
		scheduled(future, at.Add(time.Hour)),
		scheduled(exact, at),
		claim,
		scheduled(later, at.Add(time.Nanosecond)),
		scheduled(early, at.Add(-time.Hour)),
	} {
		mustCreate(t, st, r)
	}
	got := wantDue(t, st, at, 0, early, claimed, exact)
	for _, r := range got {
		equalRecord(t, "listed record", r, mustGet(t, st, r.OperationID))
	}
	wantDue(t, st, at.Add(-time.Hour), 0, early)
	wantDue(t, st, at.Add(-time.Hour-time.Nanosecond), 0)
}

func (s *suite) dueOrder(t *testing.T) {
	st := s.store(t)
	at := dueAt(1)
	// Created in a shuffled order; two share a due time (ordered by id).
	offsets := map[string]time.Duration{
		"c": -3 * time.Minute, "a": -5 * time.Minute, "e": -time.Minute,
		"b": -4 * time.Minute, "d": -2 * time.Minute, "d2": -2 * time.Minute,
	}
	for _, k := range []string{"c", "a", "e", "d2", "b", "d"} {
		mustCreate(t, st, scheduled(s.id(t, k), at.Add(offsets[k])))
	}
	all := []string{s.id(t, "a"), s.id(t, "b"), s.id(t, "c"), s.id(t, "d"), s.id(t, "d2"), s.id(t, "e")}
	wantDue(t, st, at, 0, all...)
	wantDue(t, st, at, 3, all[:3]...)
	wantDue(t, st, at, 1, all[0])
	wantDue(t, st, at, 100, all...)
}

func (s *suite) dueExcludesInactive(t *testing.T) {
	st := s.store(t)
	at := dueAt(2)
	due := at.Add(-time.Minute)
	with := func(suffix string, edit func(*operation.Record)) operation.Record {
		r := scheduled(s.id(t, suffix), due)
		edit(&r)
		return r
	}
	included := []operation.Record{
		with("accepted", func(*operation.Record) {}),
		// Failed but unresolved is still driven (refund chase).
		with("failed-unresolved", func(r *operation.Record) {
			r.Phase, r.Settlement = operation.PhaseFailed, operation.SettlementUnresolved
			r.Schedule.Due = due.Add(time.Second)
		}),
	}
	excluded := []operation.Record{
		with("delivered", func(r *operation.Record) { r.Phase = operation.PhaseDelivered }),
		with("failed-settled", func(r *operation.Record) {
			r.Phase, r.Settlement = operation.PhaseFailed, operation.SettlementSettled
		}),
		with("rejected", func(r *operation.Record) { r.Phase = operation.PhaseRejected }),
		with("superseded", func(r *operation.Record) { r.Phase = operation.PhaseSuperseded }),
		with("uncertain", func(r *operation.Record) { r.Phase = operation.PhaseUncertain }),
		with("stalled", func(r *operation.Record) { r.Phase = operation.PhaseStalled }),
		with("parked", func(r *operation.Record) {
			r.Parked = &operation.ParkedState{Reason: "operator", At: due}
		}),
		with("unscheduled", func(r *operation.Record) { r.Schedule = nil }),
	}
	for _, r := range append(slices.Clone(excluded), included...) {
		mustCreate(t, st, r)
	}
	wantDue(t, st, at, 0, ids(included)...)
}

func (s *suite) dueFollowsWrites(t *testing.T) {
	st := s.store(t)
	at := dueAt(3)
	id, other := s.id(t, "op"), s.id(t, "other")
	v := mustCreate(t, st, scheduled(id, at.Add(-time.Hour)))
	o := mustCreate(t, st, scheduled(other, at.Add(-30*time.Minute)))
	wantDue(t, st, at, 0, id, other)

	// Rescheduled into the future: out.
	next := v.Clone()
	next.Schedule.Due = at.Add(time.Hour)
	v = mustUpdate(t, st, next, v.Revision)
	wantDue(t, st, at, 0, other)

	// Back, later than other: in again, at its new place, as written.
	next = v.Clone()
	next.Schedule.Due = at.Add(-10 * time.Minute)
	next.LastAppliedMessageID = "rescheduled"
	v = mustUpdate(t, st, next, v.Revision)
	got := wantDue(t, st, at, 0, other, id)
	equalRecord(t, "listed record after reschedule", got[1], v)

	// A refused write changes nothing.
	stale := v.Clone()
	stale.Schedule = nil
	if _, err := st.Update(t.Context(), stale, v.Revision-1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale update: want ErrConflict, got %v", err)
	}
	wantDue(t, st, at, 0, other, id)

	// Parked: out. Unparked via an audited write: in.
	next = v.Clone()
	next.Parked = &operation.ParkedState{Reason: "operator", At: at}
	v = mustUpdate(t, st, next, v.Revision)
	wantDue(t, st, at, 0, other)
	next = v.Clone()
	next.Parked = nil
	var err error
	v, err = st.UpdateWithAudit(t.Context(), next, v.Revision, auditEntry(id, v.Phase, v.Phase, v.Revision))
	if err != nil {
		t.Fatalf("unpark with audit: %v", err)
	}
	wantDue(t, st, at, 0, other, id)

	// Schedule cleared: out. Terminal: out.
	next = o.Clone()
	next.Schedule = nil
	mustUpdate(t, st, next, o.Revision)
	wantDue(t, st, at, 0, id)
	next = v.Clone()
	next.Phase = operation.PhaseDelivered
	mustUpdate(t, st, next, v.Revision)
	wantDue(t, st, at, 0)
}
