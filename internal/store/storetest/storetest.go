// Package storetest is the conformance suite every store.Store passes:
// one set of behaviours, checked the same way against DynamoDB and bbolt,
// so the local stack cannot drift from production semantics.
package storetest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/store"
)

// base is the fixed time every non-Due fixture is built around. It has
// nanoseconds so a store that drops sub-second precision fails.
var base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// indexWait bounds how long the suite waits for an index-backed read
// (Due, OpenReviews) to show a write: DynamoDB's GSIs are eventually
// consistent; the bbolt store answers on the first try.
const indexWait = 10 * time.Second

// Run runs the suite, area by area, one file each: records (create, get,
// update and the revision condition), own writes, audit, reviews, job
// references, the due index. open returns a store for one subtest; it
// may be a fresh store or one on shared storage (a DynamoDB table): every
// subtest uses operation and review ids of its own. Run closes each store
// it gets.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	s := &suite{run: randomID(), open: open}
	s.runRecords(t)
	s.runOwnWrites(t)
	s.runAudit(t)
	s.runReviews(t)
	s.runJobRefs(t)
	// Last, not parallel: see dueEpoch.
	s.runDue(t)
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

// parallel starts a parallel subtest on its own store and operation id.
func (s *suite) parallel(t *testing.T) (store.Store, string) {
	t.Helper()
	t.Parallel()
	return s.store(t), s.id(t, "op")
}

// id is unique to this run, subtest and suffix, so subtests can share a
// table and runs can share nothing by accident.
func (s *suite) id(t *testing.T, suffix string) string {
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return fmt.Sprintf("%s.%s.%s", s.run, name, suffix)
}
