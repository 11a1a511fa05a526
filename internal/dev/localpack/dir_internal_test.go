package localpack

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/artifact"
)

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

func openDir(t *testing.T, root string) *Dir {
	t.Helper()
	d, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// read is an object's bytes as the store holds them.
func read(t *testing.T, d *Dir, key string) string {
	t.Helper()
	r, err := d.Open(key)
	if err != nil {
		t.Fatalf("open %s: %v", key, err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// syncs counts the fsyncs of each of the store's files.
type syncs struct {
	mu sync.Mutex
	n  map[string]int
}

func watchSyncs(d *Dir) *syncs {
	s := &syncs{n: map[string]int{}}
	d.syncFile = func(f *os.File) error {
		s.mu.Lock()
		s.n[filepath.Base(f.Name())]++
		s.mu.Unlock()
		return f.Sync()
	}
	return s
}

// Concurrent Puts share commits: far fewer fsyncs than Puts, and every
// Put's content back intact after a reopen.
func TestDirPutsShareCommits(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	d := openDir(t, root)
	s := watchSyncs(d)
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { put(t, d, keyN(i), strings.Repeat("x", i)) })
	}
	wg.Wait()
	if p, ix := s.n[PackName], s.n[IndexName]; p != ix || p == 0 || p >= n {
		t.Errorf("%d Puts: %d pack and %d index fsyncs, want as many of each, fewer than the Puts", n, p, ix)
	}
	d.Close()
	d = openDir(t, root)
	for i := range n {
		if got := read(t, d, keyN(i)); got != strings.Repeat("x", i) {
			t.Errorf("%s after reopen: %q", keyN(i), got)
		}
	}
}

func keyN(i int) string {
	return "ops/op-" + string(rune('a'+i%26)) + "/job/" + strings.Repeat("9", i/26+1) + ".bin"
}

// The index is only ever appended to after the pack is durable: with the
// pack's fsync failing, no line is written, the Put fails, and so does
// every Put after it (the kernel may have dropped what was not written).
func TestDirFailedFsyncWritesNoLineAndStopsTheStore(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	d := openDir(t, root)
	d.syncFile = func(f *os.File) error {
		if filepath.Base(f.Name()) == PackName {
			return errors.New("EIO")
		}
		return f.Sync()
	}
	r, n, sum := content("lost")
	if _, err := d.Put(context.Background(), "ops/a/j/0.bin", r, n, sum, ""); err == nil || !strings.Contains(err.Error(), "EIO") {
		t.Fatalf("put with a failing fsync: %v", err)
	}
	d.syncFile = (*os.File).Sync
	r, n, sum = content("later")
	if _, err := d.Put(context.Background(), "ops/b/j/0.bin", r, n, sum, ""); err == nil {
		t.Fatal("a put after a failed fsync succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(root, IndexName)); len(b) != 0 {
		t.Errorf("index after the failure: %q", b)
	}
	if _, ok, err := d.Stat(context.Background(), "ops/a/j/0.bin"); ok || err != nil {
		t.Errorf("the failed object is visible: %v %v", ok, err)
	}
}

// A crash tears at most the commit being written. Reopening drops it,
// keeps every complete commit, cuts the index back to them, and later
// Puts commit after them.
func TestDirDropsATornCommit(t *testing.T) {
	t.Parallel()
	for name, tail := range map[string]string{
		"line cut short":      `0 4 ` + strings.Repeat("a", 64),
		"no commit line":      "0 4 " + strings.Repeat("a", 64) + " \"ops/torn/j/0.bin\"\n",
		"commit line damaged": "0 4 " + strings.Repeat("a", 64) + " \"ops/torn/j/0.bin\"\ncommit 1 00000000\n",
		"zeros":               string(make([]byte, 512)),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			d := openDir(t, root)
			put(t, d, "ops/kept/j/0.bin", "kept")
			d.Close()
			idx := filepath.Join(root, IndexName)
			good, err := os.ReadFile(idx)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(idx, append(bytes.Clone(good), tail...), 0o644); err != nil {
				t.Fatal(err)
			}
			d = openDir(t, root)
			if got := read(t, d, "ops/kept/j/0.bin"); got != "kept" {
				t.Errorf("kept object reads %q", got)
			}
			if _, ok, _ := d.Stat(context.Background(), "ops/torn/j/0.bin"); ok {
				t.Error("the torn commit's object is visible")
			}
			if b, _ := os.ReadFile(idx); !bytes.Equal(b, good) {
				t.Errorf("index not cut back to its complete commits:\n%q\nwant\n%q", b, good)
			}
			cuts, _ := filepath.Glob(idx + ".cut-*")
			if len(cuts) != 1 {
				t.Fatalf("cut tails kept: %v", cuts)
			}
			if b, _ := os.ReadFile(cuts[0]); string(b) != tail {
				t.Errorf("kept %q, cut %q", b, tail)
			}
			put(t, d, "ops/next/j/0.bin", "next")
			d.Close()
			d = openDir(t, root)
			if got := read(t, d, "ops/next/j/0.bin"); got != "next" {
				t.Errorf("a put after the cut reads %q after reopening", got)
			}
		})
	}
}

// Damage is not a crash: a broken commit with a complete one after it
// means lines were lost from the middle, and the store refuses to open
// rather than silently forget objects.
func TestDirRefusesADamagedIndex(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	d := openDir(t, root)
	put(t, d, "ops/a/j/0.bin", "first")
	put(t, d, "ops/b/j/0.bin", "second")
	d.Close()
	idx := filepath.Join(root, IndexName)
	b, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	b[2] ^= 0x10 // inside the first commit's first line
	if err := os.WriteFile(idx, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := New(root); err == nil || !strings.Contains(err.Error(), "damaged") {
		if d != nil {
			d.Close()
		}
		t.Fatalf("opening a damaged index: %v", err)
	}
}

// One store has a directory at a time: a second opener is refused at
// once, and may open it after the first closes.
func TestDirIsExclusive(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	d, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(root); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second open: %v", err)
	}
	d.Close()
	openDir(t, root)
}

// Export writes a plain copy of an object under the root, checked against
// its sha256, and refuses what is not stored or would overwrite the
// store's own files.
func TestDirExport(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	d := openDir(t, root)
	put(t, d, "ops/op/job/0.png", "picture")
	p, err := d.Export(context.Background(), "ops/op/job/0.png")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "picture" || p != filepath.Join(root, "ops", "op", "job", "0.png") {
		t.Errorf("exported %s: %q %v", p, b, err)
	}
	if _, err := d.Export(context.Background(), "ops/none/job/0.png"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("export of a missing object: %v", err)
	}
	r, n, sum := content("x")
	for _, key := range []string{PackName, IndexName} {
		if _, err := d.Put(context.Background(), key, r, n, sum, ""); !errors.Is(err, artifact.ErrInvalid) {
			t.Errorf("put %s: %v", key, err)
		}
	}
	// The pack, not the copy, is what Stat reads: a changed copy changes
	// nothing.
	if err := os.WriteFile(p, []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	if o, ok, err := d.Stat(context.Background(), "ops/op/job/0.png"); err != nil || !ok || o.Size != int64(len("picture")) {
		t.Errorf("stat after editing the copy: %+v %v %v", o, ok, err)
	}
}

// A writer process killed mid-Put (SIGKILL: no deferred cleanup or Close,
// Puts half streamed, regions reserved and never committed) leaves a
// store that opens, holds every Put it acknowledged with its exact
// content, and takes new Puts. The page cache survives a killed process,
// so this proves nothing is held back in the process (buffered, or
// written at Close); TestDirCrashPoints covers a machine's crash. The
// writer is this test binary run again as a child process.
func TestDirSurvivesAKilledWriter(t *testing.T) {
	t.Parallel()
	if root := os.Getenv("GENJOBS_TEST_KILLED_WRITER"); root != "" {
		killedWriter(root)
		return
	}
	root := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDirSurvivesAKilledWriter$")
	cmd.Env = append(os.Environ(), "GENJOBS_TEST_KILLED_WRITER="+root)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	watchdog := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
	defer watchdog.Stop()
	acked := map[string]string{}
	var other []string
	sc := bufio.NewScanner(out)
	for len(acked) < 300 && sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "acked" {
			acked[f[1]] = f[2]
		} else {
			other = append(other, sc.Text())
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if len(acked) < 300 {
		t.Fatalf("the writer acknowledged %d Puts before it stopped (%v): %q %s", len(acked), sc.Err(), other, stderr.String())
	}
	d := openDir(t, root)
	for key, sum := range acked {
		if o, ok, err := d.Stat(context.Background(), key); err != nil || !ok || o.SHA256 != sum {
			t.Errorf("acknowledged %s: %+v %v %v", key, o, ok, err)
		}
	}
	put(t, d, "ops/after/j/0.bin", "after the kill")
}

// killedWriter Puts from 8 goroutines until it is killed, printing each
// acknowledged key and sha256.
func killedWriter(root string) {
	d, err := New(root)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				body := strings.Repeat(fmt.Sprintf("%d-%d;", g, i), 1+i%300)
				key := fmt.Sprintf("ops/w%d/j/%d.bin", g, i)
				r, n, sum := content(body)
				if _, err := d.Put(context.Background(), key, r, n, sum, ""); err != nil {
					fmt.Println("error", err)
					os.Exit(1)
				}
				mu.Lock()
				fmt.Println("acked", key, sum)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// What a machine crash (power lost, kernel gone) leaves: each file as it
// was when its last fsync was called, nothing written after. Concurrent
// Puts run with every fsync recorded that way; then, for a crash after
// each fsync in turn, the store opened on those files must hold every
// Put acknowledged by then, with its content. Writing an index line
// before its content is durable, or acknowledging a Put before its line
// is, fails here.
func TestDirCrashPoints(t *testing.T) {
	t.Parallel()
	d := openDir(t, t.TempDir())
	// At each fsync: which file, and both files' bytes as written so far.
	type snapshot struct {
		file        string
		pack, index []byte
	}
	var mu sync.Mutex
	var fsyncs []snapshot
	acked := map[string]int{} // key → fsyncs recorded when its Put returned
	sums := map[string]string{}
	d.syncFile = func(f *os.File) error {
		mu.Lock()
		defer mu.Unlock()
		pack, err := os.ReadFile(filepath.Join(d.root, PackName))
		if err != nil {
			return err
		}
		index, err := os.ReadFile(filepath.Join(d.root, IndexName))
		if err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		fsyncs = append(fsyncs, snapshot{filepath.Base(f.Name()), pack, index})
		return nil
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				key := fmt.Sprintf("ops/w%d/j/%d.bin", g, i)
				r, n, sum := content(strings.Repeat(key, i%4)) // some empty
				mu.Lock()
				sums[key] = sum
				mu.Unlock()
				if _, err := d.Put(context.Background(), key, r, n, sum, ""); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked[key] = len(fsyncs)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	d.Close()
	if len(fsyncs) < 4 {
		t.Fatalf("%d fsyncs", len(fsyncs))
	}
	// A crash after fsync k, before the next one is called, keeps each
	// file as it was when its last fsync was called; the index may also
	// have kept whatever was written before the next fsync was called
	// (the kernel writes back when it likes), the pack not.
	for k := range len(fsyncs) + 1 {
		var pack, synced []byte
		for _, f := range fsyncs[:k] {
			if f.file == PackName {
				pack = f.pack
			} else {
				synced = f.index
			}
		}
		written := fsyncs[min(k, len(fsyncs)-1)].index
		for _, index := range [][]byte{synced, written} {
			crashed(t, k, pack, index, acked, sums)
		}
	}
}

// crashed opens a store on pack and index as a crash after fsync k left
// them, and checks it holds every Put acknowledged by then, and nothing
// with content other than its Put's.
func crashed(t *testing.T, k int, pack, index []byte, acked map[string]int, sums map[string]string) {
	t.Helper()
	root := t.TempDir()
	for name, b := range map[string][]byte{PackName: pack, IndexName: index} {
		if err := os.WriteFile(filepath.Join(root, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(root)
	if err != nil {
		t.Fatalf("crash after fsync %d: %v", k, err)
	}
	defer c.Close()
	for key, at := range acked {
		if at > k {
			continue
		}
		if o, ok, err := c.Stat(context.Background(), key); err != nil || !ok || o.SHA256 != sums[key] {
			t.Errorf("crash after fsync %d: acknowledged %s: %+v %v %v", k, key, o, ok, err)
		}
	}
	for key := range c.objects {
		if o, _, err := c.Stat(context.Background(), key); err != nil || o.SHA256 != sums[key] {
			t.Errorf("crash after fsync %d: %s holds %+v (%v), not its Put's content", k, key, o, err)
		}
	}
}

// Two Puts of one key at once: the same content gives both the one
// object; other content gives one of them artifact.ErrConflict, never two objects.
func TestDirConcurrentPutsOfOneKey(t *testing.T) {
	t.Parallel()
	for _, same := range []bool{true, false} {
		d := openDir(t, t.TempDir())
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				body := "content"
				if !same {
					body += strconv.Itoa(i)
				}
				r, n, sum := content(body)
				_, errs[i] = d.Put(context.Background(), "ops/a/j/0.bin", r, n, sum, "")
			})
		}
		wg.Wait()
		conflicts := 0
		for _, err := range errs {
			switch {
			case errors.Is(err, artifact.ErrConflict):
				conflicts++
			case err != nil:
				t.Errorf("same %v: %v", same, err)
			}
		}
		idx, _ := os.ReadFile(filepath.Join(d.Root(), IndexName))
		if want := map[bool]int{true: 0, false: 1}[same]; conflicts != want || strings.Count(string(idx), `"ops/a/j/0.bin"`) != 1 {
			t.Errorf("same content %v: %d conflicts, index %q", same, conflicts, idx)
		}
	}
}

// An empty object stored while another Put's region is reserved but not
// written (still streaming, or failed) survives a reopen: it has no
// region, so it never points past the pack's end.
func TestDirEmptyObjectAfterAnUnwrittenRegion(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	d := openDir(t, root)
	_, _, sum := content(strings.Repeat("z", 100))
	if _, err := d.Put(context.Background(), "ops/a/j/0.bin", strings.NewReader("short"), 100, sum, ""); !errors.Is(err, artifact.ErrMismatch) {
		t.Fatalf("short source: %v", err)
	}
	put(t, d, "ops/b/j/0.bin", "")
	d.Close()
	d = openDir(t, root)
	if o, ok, err := d.Stat(context.Background(), "ops/b/j/0.bin"); err != nil || !ok || o.Size != 0 {
		t.Fatalf("empty object after reopening: %+v %v %v", o, ok, err)
	}
}

// A complete commit that names content the pack no longer holds is not a
// torn write: the store refuses to open, and the index stays as it was.
func TestDirRefusesAPackThatLostContent(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	d := openDir(t, root)
	put(t, d, "ops/a/j/0.bin", "content")
	d.Close()
	idx := filepath.Join(root, IndexName)
	before, _ := os.ReadFile(idx)
	if err := os.Truncate(filepath.Join(root, PackName), 2); err != nil {
		t.Fatal(err)
	}
	if d, err := New(root); err == nil || !strings.Contains(err.Error(), "lost content") {
		if d != nil {
			d.Close()
		}
		t.Fatalf("open: %v", err)
	}
	if after, _ := os.ReadFile(idx); !bytes.Equal(before, after) {
		t.Errorf("index changed: %q → %q", before, after)
	}
}

// Stat reads the pack's bytes, not the index: a flipped byte shows.
func TestDirStatRecomputes(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	d := openDir(t, root)
	put(t, d, "ops/a/j/0.bin", "content")
	f, err := os.OpenFile(filepath.Join(root, PackName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("C"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, _, want := content("Content")
	if o, ok, err := d.Stat(context.Background(), "ops/a/j/0.bin"); err != nil || !ok || o.SHA256 != want {
		t.Errorf("stat: %+v %v %v, want sha256 %s", o, ok, err, want)
	}
}

// A failed index fsync fails the Put and every later one.
func TestDirFailedIndexFsync(t *testing.T) {
	t.Parallel()
	d := openDir(t, t.TempDir())
	d.syncFile = func(f *os.File) error {
		if filepath.Base(f.Name()) == IndexName {
			return errors.New("EIO")
		}
		return f.Sync()
	}
	r, n, sum := content("a")
	if _, err := d.Put(context.Background(), "ops/a/j/0.bin", r, n, sum, ""); err == nil {
		t.Fatal("put with a failing index fsync succeeded")
	}
	d.syncFile = (*os.File).Sync
	r, n, sum = content("b")
	if _, err := d.Put(context.Background(), "ops/b/j/0.bin", r, n, sum, ""); err == nil {
		t.Fatal("a put after a failed index fsync succeeded")
	}
}
