package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// syncWatch records the directories a Dir fsyncs, relative to its root.
type syncWatch struct {
	mu     sync.Mutex
	synced []string
}

func watchSyncs(t *testing.T, d *Dir) *syncWatch {
	w := &syncWatch{}
	d.fsyncDir = func(dir string) error {
		rel, err := filepath.Rel(d.root, dir)
		if err != nil {
			t.Errorf("fsync outside the root: %s", dir)
		}
		w.mu.Lock()
		w.synced = append(w.synced, filepath.ToSlash(rel))
		w.mu.Unlock()
		return syncDir(dir)
	}
	return w
}

func (w *syncWatch) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.synced
	w.synced = nil
	slices.Sort(out)
	return out
}

func content(s string) (*bytes.Reader, int64, string) {
	sum := sha256.Sum256([]byte(s))
	return bytes.NewReader([]byte(s)), int64(len(s)), hex.EncodeToString(sum[:])
}

func put(t *testing.T, d *Dir, key, s string) {
	t.Helper()
	r, n, sum := content(s)
	if _, err := d.Put(context.Background(), key, r, n, sum, "application/octet-stream"); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// A Put returns once every directory entry leading to its file is
// durable: the file's folder, and the parent of each folder it created
// (otherwise a crash can lose the new folder and the file with it). A
// second Put into a known folder fsyncs that folder only.
func TestDirPutSyncsTheEntriesItCreates(t *testing.T) {
	t.Parallel()
	d, err := NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := watchSyncs(t, d)
	put(t, d, "ops/a/job/0.bin", "first")
	if got, want := w.take(), []string{".", "ops", "ops/a", "ops/a/job"}; !slices.Equal(got, want) {
		t.Errorf("first put fsynced %q, want %q", got, want)
	}
	put(t, d, "ops/a/job/1.bin", "second")
	if got, want := w.take(), []string{"ops/a/job"}; !slices.Equal(got, want) {
		t.Errorf("put into a known folder fsynced %q, want %q", got, want)
	}
	put(t, d, "ops/b/job/0.bin", "third")
	if got, want := w.take(), []string{"ops", "ops/b", "ops/b/job"}; !slices.Equal(got, want) {
		t.Errorf("put under a new operation fsynced %q, want %q", got, want)
	}
}

// Puts that finish while a round of directory fsyncs runs share the next
// round: the "ops" folder, which each new operation's folder changes, is
// fsynced once for all of them.
func TestDirPutsShareDirectoryFsyncs(t *testing.T) {
	t.Parallel()
	d, err := NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put(t, d, "ops/warm/job/0.bin", "warm") // "ops" exists and is durable
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w := watchSyncs(t, d)
	inner := d.fsyncDir
	d.fsyncDir = func(dir string) error {
		once.Do(func() { close(held); <-release })
		return inner(dir)
	}
	first := make(chan struct{})
	go func() { defer close(first); put(t, d, "ops/held/job/0.bin", "held") }()
	<-held
	const n = 20
	var wg, started sync.WaitGroup
	for i := range n {
		started.Add(1)
		wg.Go(func() {
			started.Done()
			put(t, d, fmt.Sprintf("ops/op-%02d/job/0.bin", i), fmt.Sprint(i))
		})
	}
	started.Wait()
	time.Sleep(200 * time.Millisecond) // for each to reach its fsyncs
	close(release)
	wg.Wait()
	<-first
	ops := 0
	for _, s := range w.take() {
		if s == "ops" {
			ops++
		}
	}
	if ops > 3 {
		t.Errorf("%d Puts under new operations fsynced \"ops\" %d times, want at most 3 (the held round, then the queue)", n+1, ops)
	}
}

// A folder removed under a running store is made again.
func TestDirPutRemakesARemovedFolder(t *testing.T) {
	t.Parallel()
	d, err := NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put(t, d, "ops/a/job/0.bin", "first")
	if err := os.RemoveAll(filepath.Join(d.root, "ops")); err != nil {
		t.Fatal(err)
	}
	put(t, d, "ops/a/job/1.bin", "second")
	if o, ok, err := d.Stat(context.Background(), "ops/a/job/1.bin"); err != nil || !ok || o.Size != int64(len("second")) {
		t.Fatalf("stat after put: %+v %v %v", o, ok, err)
	}
}
