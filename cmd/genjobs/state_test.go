package main

import (
	"errors"
	"github.com/genjobs/genjobs/internal/operator"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLocalKeepsEveryRun: two `genjobs local` runs on one state root each
// get their own directory; the second destroys nothing of the first, and
// latest names the newest. (Before, the second run deleted the first's
// store, artifacts and report.)
func TestLocalKeepsEveryRun(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "state")
	runOnce := func() string {
		code, out, errOut := genjobs(t, "local", "--state", root, "--quiet", "--timeout", "60s", "--workload", writeWorkload(t),
			"--queue-for", "50ms", "--run-for", "200ms", "--long-poll", "1s", "--accounting-budget", "1s")
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
		}
		latest, err := os.Readlink(filepath.Join(root, operator.LatestLink))
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Join(root, latest)
	}
	first := runOnce()
	before, err := os.ReadFile(filepath.Join(first, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	second := runOnce()
	if first == second {
		t.Fatalf("both runs used %s", first)
	}
	after, err := os.ReadFile(filepath.Join(first, "report.json"))
	if err != nil || string(after) != string(before) {
		t.Fatalf("the second run changed the first run's report: %v", err)
	}
	for _, dir := range []string{first, second} {
		if _, err := os.Stat(filepath.Join(dir, "genjobs.db")); err != nil {
			t.Errorf("run %s lost its store: %v", dir, err)
		}
	}
	code, out, errOut := genjobs(t, "reviews", "--db", filepath.Join(root, operator.LatestLink, "genjobs.db"))
	if code != 0 {
		t.Errorf("reviews on latest: exit %d %s %s", code, out, errOut)
	}
}

func writeWorkload(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "w.jsonl")
	if err := os.WriteFile(p, []byte(`{"operation_id":"op-a","user_id":"u","model":"m","input":{"prompt":"a cat"},"budget_credits":50}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestStateLock: a second holder of a state directory's lock is refused at
// once, with a message naming the directory and the holder.
func TestStateLock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	unlock, err := lockState(dir)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = lockState(dir)
	if !errors.Is(err, errStateInUse) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "pid ") || time.Since(start) > time.Second {
		t.Fatalf("second lock: %v after %v; want errStateInUse at once", err, time.Since(start))
	}
	unlock()
	unlock2, err := lockState(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}

// TestNewRunDirs: run ids sort by start time and never collide.
func TestNewRunDirs(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	now := time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)
	seen := map[string]bool{}
	for range 20 {
		dir, id, err := newRunDir(root, now)
		if err != nil || seen[dir] || !strings.HasPrefix(id, "20261201T170000Z-") {
			t.Fatalf("newRunDir: %s %s %v", dir, id, err)
		}
		seen[dir] = true
	}
	if err := pointLatest(root, "x"); err != nil {
		t.Fatal(err)
	}
	if l, _ := os.Readlink(filepath.Join(root, operator.LatestLink)); l != filepath.Join(runsDir, "x") {
		t.Fatalf("latest -> %q", l)
	}
}
