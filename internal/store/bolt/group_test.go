package bolt_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/bolt"
)

var epoch = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func groupRecord(id string) operation.Record {
	return operation.Record{
		OperationID: id, Phase: operation.PhasePrepared, UserID: "user-1", Model: "genace-v2",
		Input: json.RawMessage(`{"prompt":"a small boat"}`), Timestamps: operation.Timestamps{Created: epoch, Updated: epoch},
	}
}

// Writes that arrive while a commit is under way share the next one: one
// transaction (one fsync) for the lot, not one each.
func TestWritesQueuedDuringACommitShareOne(t *testing.T) {
	t.Parallel()
	st := openTemp(t)
	defer st.Close()
	ctx := context.Background()
	const queued = 20
	held, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- st.Write(func(*bbolt.Tx) error {
			close(held)
			<-release // the commit is under way until the others wait
			return nil
		})
	}()
	<-held
	before := bolt.Commits(st)
	var started, wg sync.WaitGroup
	errs := make([]error, queued)
	for i := range queued {
		started.Add(1)
		wg.Go(func() {
			started.Done()
			_, errs[i] = st.Create(ctx, groupRecord(fmt.Sprintf("queued-%02d", i)))
		})
	}
	started.Wait()
	time.Sleep(200 * time.Millisecond) // for each to reach the store
	close(release)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatalf("held write: %v", err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		if _, err := st.Get(ctx, fmt.Sprintf("queued-%02d", i)); err != nil {
			t.Fatalf("get %d after its create returned: %v", i, err)
		}
	}
	// The held commit, then the queued writes: one transaction, or two if
	// one goroutine was late.
	if n := bolt.Commits(st) - before; n > 2 {
		t.Errorf("%d writes queued behind a commit took %d more transactions, want at most 2", queued, n)
	}
}

// Many writers racing on a few records, every kind of conditional write
// mixed, and writes that fail inside a shared transaction (forcing the
// group to run again without them): every result is one that running the
// writes one at a time, in some order, would give.
func TestConcurrentWritesSerialise(t *testing.T) {
	t.Parallel()
	st := openTemp(t)
	defer st.Close()
	ctx := context.Background()
	const (
		records = 4
		writers = 24
		rounds  = 15
	)
	type success struct {
		rec   operation.Record
		entry *review.AuditEntry
	}
	var (
		mu        sync.Mutex
		created   = map[string]int{}       // id → successful creates
		wrote     = map[string]int{}       // review id → PutReview that wrote
		successes = map[string][]success{} // id → updates that won
		conflicts = map[string][]store.ConflictError{}
	)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				id := fmt.Sprintf("op-%d", (w+r/2)%records)
				wctx := store.WithWriter(ctx, fmt.Sprintf("writer-%d-%d", w, r))
				switch (w + r) % 4 {
				case 0: // everyone creates every record: one wins
					_, err := st.Create(wctx, groupRecord(id))
					if err != nil && !errors.Is(err, store.ErrExists) {
						t.Errorf("create %s: %v", id, err)
					}
					mu.Lock()
					if err == nil {
						created[id]++
					}
					mu.Unlock()
				case 1: // the same review from many writers: one writes it
					rid := fmt.Sprintf("review-%d", r%3)
					ok, err := st.PutReview(ctx, review.Record{ID: rid, OperationID: id, Open: true, CreatedAt: epoch, Reason: "review"})
					if err != nil {
						t.Errorf("put review %s: %v", rid, err)
					}
					mu.Lock()
					if ok {
						wrote[rid]++
					}
					mu.Unlock()
				case 2: // a write bbolt refuses midway: it fails alone
					_, err := st.PutReview(ctx, review.Record{ID: strings.Repeat("k", bbolt.MaxKeySize+1), Open: true, CreatedAt: epoch})
					if err == nil {
						t.Errorf("put review with an oversized key: no error")
					}
				default: // read, then update from what was read
					cur, err := st.Get(ctx, id)
					if errors.Is(err, store.ErrNotFound) {
						continue
					}
					if err != nil {
						t.Errorf("get %s: %v", id, err)
						continue
					}
					next := cur
					next.BudgetCredits = int64(w*1000 + r)
					var got operation.Record
					var entry *review.AuditEntry
					if r%2 == 0 {
						got, err = st.Update(wctx, next, cur.Revision)
					} else {
						e := review.AuditEntry{Operator: fmt.Sprintf("w%d", w), Action: operation.ActionObserve, Decision: "note",
							FromPhase: cur.Phase, ToPhase: cur.Phase, FromRevision: cur.Revision, At: epoch}
						got, err = st.UpdateWithAudit(wctx, next, cur.Revision, e)
						e.OperationID, e.Revision = id, cur.Revision+1
						entry = &e
					}
					var ce *store.ConflictError
					mu.Lock()
					switch {
					case err == nil:
						successes[id] = append(successes[id], success{got, entry})
					case errors.As(err, &ce):
						conflicts[id] = append(conflicts[id], *ce)
					default:
						t.Errorf("update %s: %v", id, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()

	for rid, n := range wrote {
		if n != 1 {
			t.Errorf("review %s: %d PutReview calls reported writing it, want 1", rid, n)
		}
	}
	for i := range records {
		id := fmt.Sprintf("op-%d", i)
		if created[id] != 1 {
			t.Errorf("%s: %d creates succeeded, want 1", id, created[id])
		}
		final := mustGet(t, st, id)
		// The winners form the record's history: revisions 2..final, one
		// each, and each as its writer was told it was written.
		byRev := map[int64]success{}
		for _, s := range successes[id] {
			if _, dup := byRev[s.rec.Revision]; dup {
				t.Errorf("%s: two updates won revision %d", id, s.rec.Revision)
			}
			byRev[s.rec.Revision] = s
		}
		if int64(len(byRev)) != final.Revision-1 {
			t.Errorf("%s: %d updates won, but the record is at revision %d", id, len(byRev), final.Revision)
		}
		if s, ok := byRev[final.Revision]; final.Revision > 1 && (!ok || !sameJSON(s.rec, final)) {
			t.Errorf("%s: stored %+v, the last winner was told %+v", id, final, s.rec)
		}
		audit, err := st.Audit(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		wantEntries := 0
		for _, s := range byRev {
			if s.entry != nil {
				wantEntries++
			}
		}
		if len(audit) != wantEntries {
			t.Errorf("%s: %d audit entries, %d audited updates won", id, len(audit), wantEntries)
		}
		for _, e := range audit {
			s, ok := byRev[e.Revision]
			if !ok || s.entry == nil || !sameJSON(*s.entry, e) {
				t.Errorf("%s: audit entry at revision %d is not the one its winner wrote", id, e.Revision)
			}
		}
		// A loser saw the record as some winner left it, past what it read.
		for _, c := range conflicts[id] {
			if c.Current == nil || c.Current.Revision <= c.Expected {
				t.Errorf("%s: conflict %v does not show a later revision", id, &c)
				continue
			}
			if s, ok := byRev[c.Current.Revision]; !ok || !sameJSON(s.rec, *c.Current) {
				t.Errorf("%s: conflict shows revision %d as %+v, not as its winner wrote it", id, c.Current.Revision, *c.Current)
			}
		}
	}
	if t.Failed() {
		return
	}
	n := 0
	for _, c := range conflicts {
		n += len(c)
	}
	t.Logf("%d updates won, %d lost, %d transactions", func() int {
		k := 0
		for _, s := range successes {
			k += len(s)
		}
		return k
	}(), n, bolt.Commits(st))
}

func mustGet(t *testing.T, st store.Store, id string) operation.Record {
	t.Helper()
	rec, err := st.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return rec
}

func sameJSON[T any](a, b T) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
