package store_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/storetest"
)

// openTempBolt opens a Bolt store in a file of its own under t.TempDir.
func openTempBolt(t testing.TB) *store.Bolt {
	t.Helper()
	b, err := store.OpenBolt(filepath.Join(t.TempDir(), "genjobs.db"))
	if err != nil {
		t.Fatalf("open bolt: %v", err)
	}
	return b
}

func TestBolt(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTempBolt(t) })
}

// TestBoltLostAck: bbolt has no transport to lose an answer, so the fault
// is re-created above it (storetest.LoseAcks); a caller that re-sends a
// write it already applied must hear that it succeeded.
func TestBoltLostAck(t *testing.T) {
	storetest.RunLostAck(t, func(t *testing.T) storetest.LostAck { return storetest.LoseAcks(openTempBolt(t)) })
}

// TestBoltSharedFile runs the suite with every subtest on one file, as a
// shared DynamoDB table is used, so the suite's id isolation is checked
// without DynamoDB too.
func TestBoltSharedFile(t *testing.T) {
	b := openTempBolt(t)
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	storetest.Run(t, func(*testing.T) store.Store { return unclosable{b} })
}

// unclosable lets the suite close its per-subtest handle while the shared
// file stays open until the test ends.
type unclosable struct{ *store.Bolt }

func (unclosable) Close() error { return nil }

func TestBoltLockHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "genjobs.db")
	first, err := store.OpenBolt(path)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer first.Close()

	_, err = store.OpenBoltTimeout(path, 100*time.Millisecond)
	if !errors.Is(err, bolterrors.ErrTimeout) || !strings.Contains(err.Error(), "another process holds its lock") {
		t.Fatalf("second open while locked: want a lock timeout that says so, got %v", err)
	}

	if err := first.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	again, err := store.OpenBoltTimeout(path, 100*time.Millisecond)
	if err != nil {
		t.Fatalf("reopen after close: %v", err)
	}
	if err := again.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}
