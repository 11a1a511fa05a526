// Package storetest is the conformance suite every store.Store passes:
// one set of behaviours, checked the same way against DynamoDB and bbolt,
// so the local stack cannot drift from production semantics.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

// base is the fixed time every non-Due fixture is built around. It has
// nanoseconds so a store that drops sub-second precision fails.
var base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// indexWait bounds how long the suite waits for an index-backed read
// (Due, OpenReviews) to show a write: DynamoDB's GSIs are eventually
// consistent; the bbolt store answers on the first try.
const indexWait = 10 * time.Second

// Run runs the suite, area by area (a file each). open returns a store
// for one subtest; it may be a fresh store or one on shared storage (a
// DynamoDB table): every subtest uses operation and review ids of its
// own. Run closes each store it gets.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	s := &suite{run: rand.Text(), open: open}
	// Records: Create, Get and Update, and the revision condition that
	// makes one writer win.
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
	// Own writes: a write re-sent after its answer was lost is its
	// writer's own and succeeds; someone else's write at the next
	// revision is a conflict. RunLostAck has the cases that need the
	// fault itself.
	t.Run("OwnWriteIsWritten", s.ownWriteResent)
	t.Run("OtherWriteAtNextRevisionConflicts", s.otherWriteConflicts)
	// Audit: UpdateWithAudit writes the record and its audit entry
	// together or not at all, one entry per revision, listed in order.
	t.Run("UpdateWithAuditWritesBoth", s.auditWritesBoth)
	t.Run("UpdateWithAuditStaleWritesNeither", s.auditStale)
	t.Run("OneAuditEntryPerRevision", s.oneAuditPerRevision)
	t.Run("UpdateWithAuditConcurrent", s.auditConcurrent)
	t.Run("UpdateWithAuditRejectsMismatchedEntry", s.auditMismatch)
	t.Run("AuditOldestFirst", s.auditOrder)
	t.Run("AppendAuditOnATerminalRecord", s.appendAuditTerminal)
	t.Run("AppendAuditStaleWritesNothing", s.appendAuditStale)
	// Completion events: recorded by the write that causes them, marked
	// sent (or deferred) without a new revision, on terminal records too.
	t.Run("WriteRecordsTheEventItCauses", s.eventRecorded)
	t.Run("SetEventOnATerminalRecord", s.setEventTerminal)
	t.Run("SetEventStaleConflicts", s.setEventStale)
	// Reviews: written once, listed while open, closed once; and the reads
	// by operation that a write settling an operation (OpenReviewsOf,
	// ResolveReview) and an operator's reconciliation (OperationReviews,
	// closed reviews included) rely on.
	t.Run("PutReviewOnce", s.putReviewOnce)
	t.Run("GetReviewMissing", s.getReviewMissing)
	t.Run("OpenReviewsExcludesClosed", s.openReviews)
	t.Run("CloseReviewIdempotent", s.closeReview)
	t.Run("OpenReviewsOfOneOperation", s.openReviewsOf)
	t.Run("ResolveReviewRecordsTheReasonOnce", s.resolveReview)
	t.Run("OperationReviewsOpenAndClosed", s.operationReviews)
	// Job references: every item that names a job, which an operator's
	// reconciliation relies on to find who holds or claims it.
	t.Run("JobRefsFindEveryHolder", s.jobRefs)
	// The sparse due index the sweep reads. Last, not parallel: see dueEpoch.
	t.Run("Due", s.due)
}

type suite struct {
	run  string
	open func(t *testing.T) store.Store
}

// store opens the subtest's store and closes it when the subtest ends.
func (s *suite) store(t *testing.T) store.Store {
	t.Helper()
	return closeAtEnd(t, s.open(t))
}

func closeAtEnd(t *testing.T, st store.Store) store.Store {
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return st
}

// parallel starts a parallel subtest on its own store and operation id.
func (s *suite) parallel(t *testing.T) (store.Store, string) {
	t.Helper()
	t.Parallel()
	return s.store(t), s.id(t, "op")
}

// created is parallel with a new record (newRecord) at revision 1 stored.
func (s *suite) created(t *testing.T) (store.Store, string, operation.Record) {
	t.Helper()
	st, id := s.parallel(t)
	return st, id, mustCreate(t, st, newRecord(id))
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

// FullRecord is the record with every field set, nested ones included,
// with nanosecond times (one in a non-UTC zone), so a lossy encoding
// shows: the suite round-trips it, and a store's own tests of its
// encoding may too.
func FullRecord(id string) operation.Record {
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
		RequestSHA256:          strings.Repeat("e", 64),
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
		Counters: operation.Counters{Observations: 9, RateLimited: 2, WindowObservations: 4, ReadFailures: 1, Unauthorized: 1},
		Timestamps: operation.Timestamps{
			Created:      base,
			Updated:      at(9 * time.Second),
			Accepted:     ptr(at(10 * time.Second)),
			RemoteFailed: ptr(at(11 * time.Second)),
		},
		LastError: "rate_limited",
		Parked:    &operation.ParkedState{Reason: "operator asked", At: at(12 * time.Second)},
		// The parked record's own event, sent: a write keeps it as it is.
		Event: &operation.EventState{Revision: 1, Type: operation.EventNeedsAttention, Settlement: operation.SettlementUnresolved,
			Due: at(13*time.Second + 5), Sent: true},
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

// written is e as the store keeps it once it wrote revision rev of id.
func written(e review.AuditEntry, id string, rev int64) review.AuditEntry {
	e.OperationID, e.Revision = id, rev
	return e
}

// writtenIf is the audit an update at revision 1 leaves: written(e, id,
// 2) if it was audited, else nothing.
func writtenIf(audited bool, e review.AuditEntry, id string) []review.AuditEntry {
	if !audited {
		return nil
	}
	return []review.AuditEntry{written(e, id, 2)}
}

// --- normalisation and comparison ---

// walk calls leaf on every value under v that it does not go into: a
// time, a nil pointer, an empty or byte slice, or any other non-struct.
func walk(v reflect.Value, path string, leaf func(v reflect.Value, path string)) {
	switch {
	case v.Kind() == reflect.Struct && v.Type() != reflect.TypeFor[time.Time]():
		for i := range v.NumField() {
			walk(v.Field(i), path+"."+v.Type().Field(i).Name, leaf)
		}
	case v.Kind() == reflect.Pointer && !v.IsNil():
		walk(v.Elem(), path, leaf)
	case v.Kind() == reflect.Slice && v.Len() > 0 && v.Type().Elem().Kind() != reflect.Uint8:
		for i := range v.Len() {
			walk(v.Index(i), fmt.Sprintf("%s[%d]", path, i), leaf)
		}
	default:
		leaf(v, path)
	}
}

// inUTC returns v with every time in it in UTC (and no monotonic
// reading), the only difference a faithful store may introduce. v must
// share no pointer or slice with anything else: pass a Clone.
func inUTC[T any](v T) T {
	walk(reflect.ValueOf(&v).Elem(), "", func(v reflect.Value, _ string) {
		if t, ok := v.Interface().(time.Time); ok {
			v.Set(reflect.ValueOf(t.UTC()))
		}
	})
	return v
}

func equalRecord(t *testing.T, what string, got, want operation.Record) {
	t.Helper()
	g, w := inUTC(got.Clone()), inUTC(want.Clone())
	if !reflect.DeepEqual(g, w) {
		gj, _ := json.MarshalIndent(g, "", "  ")
		wj, _ := json.MarshalIndent(w, "", "  ")
		t.Fatalf("%s: records differ\n got: %s\nwant: %s", what, gj, wj)
	}
}

// zeroFields lists the zero-valued fields under v, so the round-trip
// fixture cannot silently miss a field added to the record later.
func zeroFields(v reflect.Value, path string) (zero []string) {
	walk(v, path, func(v reflect.Value, path string) {
		t, isTime := v.Interface().(time.Time)
		if isTime && t.IsZero() || !isTime && (v.IsZero() || v.Kind() == reflect.Slice && v.Len() == 0) {
			zero = append(zero, path)
		}
	})
	return zero
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

// mustUpdate writes rec at expected, with the audit entry if one is given.
func mustUpdate(t *testing.T, st store.Store, rec operation.Record, expected int64, entry ...review.AuditEntry) operation.Record {
	t.Helper()
	var e review.AuditEntry
	if len(entry) > 0 {
		e = entry[0]
	}
	got, err := update(t.Context(), st, rec, expected, e, len(entry) > 0)
	if err != nil {
		t.Fatalf("update %s at %d: %v", rec.OperationID, expected, err)
	}
	if got.Revision != expected+1 {
		t.Fatalf("update %s at %d: returned revision %d, want %d", rec.OperationID, expected, got.Revision, expected+1)
	}
	return got
}

// revise writes an edited copy of v over v, with the audit entry if one
// is given.
func revise(t *testing.T, st store.Store, v operation.Record, edit func(*operation.Record), entry ...review.AuditEntry) operation.Record {
	t.Helper()
	next := v.Clone()
	edit(&next)
	return mustUpdate(t, st, next, v.Revision, entry...)
}

// update writes rec at expected, with entry if audited.
func update(ctx context.Context, st store.Store, rec operation.Record, expected int64, entry review.AuditEntry, audited bool) (operation.Record, error) {
	if audited {
		return st.UpdateWithAudit(ctx, rec, expected, entry)
	}
	return st.Update(ctx, rec, expected)
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

// wantAudit asserts id's audit is exactly want, in order.
func wantAudit(t *testing.T, st store.Store, id string, want ...review.AuditEntry) {
	t.Helper()
	got := mustAudit(t, st, id)
	if !slices.EqualFunc(got, want, func(g, w review.AuditEntry) bool { return reflect.DeepEqual(inUTC(g), inUTC(w)) }) {
		t.Fatalf("audit of %s = %+v, want %+v", id, got, want)
	}
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
