package bolt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/genjobs/genjobs/internal/operation"
)

// TestOpenExisting: a whole store opens (read-only refuses writes); every
// damage kind is an ErrDamaged naming the file, and Open's habit of
// initialising a 0-byte file is not OpenExisting's.
func TestOpenExisting(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "genjobs.db")
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range []string{"op-1", "op-2", "op-3"} {
		if _, err := st.Create(ctx, operation.Record{OperationID: id, Phase: operation.PhasePrepared, UserID: "u", Model: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenExisting(path, true)
	if err != nil {
		t.Fatalf("whole store: %v", err)
	}
	if _, err := ro.Get(ctx, "op-1"); err != nil {
		t.Errorf("read-only Get: %v", err)
	}
	if _, err := ro.Create(ctx, operation.Record{OperationID: "op-4", Phase: operation.PhasePrepared, UserID: "u", Model: "m"}); err == nil {
		t.Error("a read-only store accepted a write")
	}
	ro.Close()

	whole, _ := os.ReadFile(path)
	page := os.Getpagesize()
	for name, data := range map[string][]byte{
		"empty":      {},
		"one page":   whole[:page],
		"mid-page":   whole[:len(whole)-1],
		"not bbolt":  make([]byte, 4*page),
		"truncated":  whole[:4*page],
		"meta wiped": append(make([]byte, 2*page), whole[2*page:]...),
	} {
		p := filepath.Join(t.TempDir(), "x.db")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := OpenExisting(p, false)
		var de *DamagedError
		if !errors.Is(err, ErrDamaged) || !errors.As(err, &de) || de.Path != p {
			t.Errorf("%s: OpenExisting = %v, want a DamagedError naming %s", name, err, p)
		}
		if after, _ := os.ReadFile(p); len(after) != len(data) {
			t.Errorf("%s: the file changed size (%d → %d bytes)", name, len(data), len(after))
		}
	}
	if _, err := OpenExisting(filepath.Join(t.TempDir(), "missing.db"), true); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
}
