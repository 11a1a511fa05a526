package bolt_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bbolterrors "go.etcd.io/bbolt/errors"

	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/bolt"
	"github.com/genjobs/genjobs/internal/store/storetest"
)

// openTemp opens a Store in a file of its own under t.TempDir.
func openTemp(t testing.TB) *bolt.Store {
	t.Helper()
	b, err := bolt.Open(filepath.Join(t.TempDir(), "genjobs.db"))
	if err != nil {
		t.Fatalf("open bolt: %v", err)
	}
	return b
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTemp(t) })
}

// TestLostAck: bbolt has no transport to lose an answer, so the fault is
// re-created above it (storetest.LoseAcks); a caller that re-sends a
// write it already applied must hear that it succeeded.
func TestLostAck(t *testing.T) {
	storetest.RunLostAck(t, func(t *testing.T) storetest.LostAck { return storetest.LoseAcks(openTemp(t)) })
}

// TestSharedFile runs the suite with every subtest on one file, as a
// shared DynamoDB table is used, so the suite's id isolation is checked
// without DynamoDB too.
func TestSharedFile(t *testing.T) {
	b := openTemp(t)
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	storetest.Run(t, func(*testing.T) store.Store { return unclosable{b} })
}

// unclosable lets the suite close its per-subtest handle while the shared
// file stays open until the test ends.
type unclosable struct{ *bolt.Store }

func (unclosable) Close() error { return nil }

func TestLockHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "genjobs.db")
	first, err := bolt.Open(path)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer first.Close()

	_, err = bolt.OpenTimeout(path, 100*time.Millisecond)
	if !errors.Is(err, bolt.ErrLocked) || !errors.Is(err, bbolterrors.ErrTimeout) || !strings.Contains(err.Error(), "another process has the store open") {
		t.Fatalf("second open while locked: want a lock timeout that says so, got %v", err)
	}

	if err := first.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	again, err := bolt.OpenTimeout(path, 100*time.Millisecond)
	if err != nil {
		t.Fatalf("reopen after close: %v", err)
	}
	if err := again.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func openBench(b *testing.B) store.Store {
	st := openTemp(b)
	b.Cleanup(func() {
		if err := st.Close(); err != nil {
			b.Error(err)
		}
	})
	return st
}

func BenchmarkUpdate(b *testing.B) { storetest.BenchUpdate(b, openBench(b)) }

func BenchmarkGet(b *testing.B) { storetest.BenchGet(b, openBench(b)) }
