package main

import (
	"bytes"
	"crypto/sha256"
	"os"
	"strings"
	"testing"
)

// TestDamagedStore: a truncated, corrupted or empty store file gives one
// line naming the file and the problem, exit status 1, no stack trace, and
// the file is left as it was. (Before: a Go runtime fault with a goroutine
// dump and exit status 2, and an empty file silently became a new store.)
func TestDamagedStore(t *testing.T) {
	t.Parallel()
	whole, err := os.ReadFile(seed(t))
	if err != nil {
		t.Fatal(err)
	}
	page := os.Getpagesize()
	if len(whole) < 6*page {
		t.Fatalf("seeded store is only %d bytes", len(whole))
	}
	damage := map[string]func() []byte{
		"empty":              func() []byte { return nil },
		"truncated to pages": func() []byte { return bytes.Clone(whole[:4*page]) },
		"truncated mid-page": func() []byte { return bytes.Clone(whole[:len(whole)-page/2]) },
		"page headers overwritten": func() []byte {
			b := bytes.Clone(whole)
			for pg := 2; pg*page+16 <= len(b); pg++ {
				copy(b[pg*page:], bytes.Repeat([]byte{0xff}, 16))
			}
			return b
		},
	}
	for name, make := range damage {
		for _, args := range [][]string{{"reviews"}, {"plan", "op-delivered"}, {"audit", "op-delivered"},
			{"replay", "op-delivered", "--action", "acknowledge", "--operator", "x"}} {
			path := t.TempDir() + "/genjobs.db"
			if err := os.WriteFile(path, make(), 0o600); err != nil {
				t.Fatal(err)
			}
			before := sum(t, path)
			code, out, errOut := genjobs(t, append(args, "--db", path)...)
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			if code != 1 || len(lines) != 1 || !strings.Contains(errOut, path+" is damaged") || strings.Contains(errOut, "goroutine") || out != "" {
				t.Errorf("%s, genjobs %s: exit %d, stdout %q, stderr %q; want exit 1 and one line naming the damaged file", name, args[0], code, out, errOut)
			}
			if sum(t, path) != before {
				t.Errorf("%s, genjobs %s: the damaged file was written to", name, args[0])
			}
		}
	}
}

func sum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}
