package modroot

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestFind(t *testing.T) {
	root, err := Find("")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
	if sub, err := Find(filepath.Join(root, "internal", "dev")); err != nil || sub != root {
		t.Fatalf("from a subfolder: %q, %v; want %q", sub, err, root)
	}
	if _, err := Find(t.TempDir()); !errors.Is(err, ErrNoModule) {
		t.Fatalf("outside the module: %v", err)
	}
}
