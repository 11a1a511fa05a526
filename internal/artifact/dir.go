package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/genjobs/genjobs/internal/groupcommit"
)

// Dir stores artifacts as files under a root directory, the key being the
// file's path relative to the root. It serves local runs and tests where
// no S3 exists, with the same guarantees as S3:
//
//   - Put writes to a temporary file in the destination's own directory
//     (".<name>.partial-<random>"), verifies size and sha256 while
//     writing, fsyncs it, and only then publishes it with a hard link,
//     which is atomic and, unlike rename, never replaces an existing file.
//     The temporary file is removed whatever happens, so a failed or
//     wrong copy never appears under the key.
//   - Put returns once the file and every directory entry leading to it
//     are durable: its directory, and the parent of each directory on the
//     way that this store has not yet made durable, are fsynced. Those
//     directory fsyncs are grouped (package groupcommit): the Puts that
//     finish while one round of fsyncs runs share the next round, each
//     directory fsynced once for all of them, so concurrent Puts do not
//     fsync the shared "ops" folder once each. Directories known to exist
//     durably are remembered, so a Put creates and fsyncs only what is
//     new.
//   - Stat recomputes the sha256 from the file's bytes rather than trusting
//     a sidecar: a sidecar would be a second file to keep consistent
//     through crashes, and for local sizes re-reading is cheap. What Stat
//     reports is therefore always what is really stored.
type Dir struct {
	root string
	// durable holds the directories (absolute paths) known to exist with
	// a durable entry in their parent: no Put needs to create them or
	// fsync their parent again.
	durable sync.Map
	// syncs groups the directory fsyncs of concurrent Puts.
	syncs groupcommit.Group[[]string]
	// fsyncDir is syncDir; tests watch it.
	fsyncDir func(dir string) error
}

// NewDir opens (creating if needed) a directory store rooted at root.
func NewDir(root string) (*Dir, error) {
	if root == "" {
		return nil, fmt.Errorf("%w: empty artifact directory", ErrInvalid)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("artifact: dir %s: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("artifact: dir %s: %w", root, err)
	}
	d := &Dir{root: abs, fsyncDir: syncDir}
	d.durable.Store(abs, struct{}{}) // where its entry lives is not the store's
	return d, nil
}

// Root is the store's absolute root directory.
func (d *Dir) Root() string { return d.root }

// Path is the file that holds key. checkKey guarantees it lies under the
// root: no absolute key, no ".." segment.
func (d *Dir) Path(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	return filepath.Join(d.root, filepath.FromSlash(key)), nil
}

// Stat reports the file's size and sha256 (recomputed), or false when no
// file holds key.
func (d *Dir) Stat(ctx context.Context, key string) (Object, bool, error) {
	p, err := d.Path(key)
	if err != nil {
		return Object{}, false, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Object{}, false, nil
	}
	if err != nil {
		return Object{}, false, fmt.Errorf("artifact: dir stat %s: %w", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Object{}, false, fmt.Errorf("artifact: dir stat %s: %w", key, err)
	}
	if !fi.Mode().IsRegular() {
		return Object{}, false, fmt.Errorf("artifact: dir stat %s: not a regular file", key)
	}
	h := sha256.New()
	n, err := io.Copy(h, ctxReader{ctx: ctx, r: f})
	if err != nil {
		return Object{}, false, fmt.Errorf("artifact: dir stat %s: %w", key, err)
	}
	return Object{Key: key, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, true, nil
}

// Put streams r into the file for key, verifying that it is exactly size
// bytes with the given sha256, and publishes it atomically. When the key
// already holds the same content it returns that object without reading r;
// different content is ErrConflict. contentType is not kept: the key's
// extension carries it.
func (d *Dir) Put(ctx context.Context, key string, r io.Reader, size int64, sum, contentType string) (Object, error) {
	if err := checkPut(key, size, sum); err != nil {
		return Object{}, err
	}
	p, _ := d.Path(key)
	if o, ok, err := d.Stat(ctx, key); err != nil {
		return Object{}, err
	} else if ok {
		return d.existing(o, key, size, sum)
	}
	dir := filepath.Dir(p)
	fresh, err := d.mkdirs(dir)
	if err != nil {
		return Object{}, fmt.Errorf("artifact: dir put %s: %w", key, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(p)+".partial-*")
	if errors.Is(err, fs.ErrNotExist) {
		// A folder this store made was removed under it: forget what it
		// knew of that path and make it again.
		for q := dir; q != d.root && strings.HasPrefix(q, d.root); q = filepath.Dir(q) {
			d.durable.Delete(q)
		}
		if fresh, err = d.mkdirs(dir); err != nil {
			return Object{}, fmt.Errorf("artifact: dir put %s: %w", key, err)
		}
		tmp, err = os.CreateTemp(dir, "."+filepath.Base(p)+".partial-*")
	}
	if err != nil {
		return Object{}, fmt.Errorf("artifact: dir put %s: %w", key, err)
	}
	tmpName := tmp.Name()
	defer func() {
		// Published or not, the temporary name goes: after the link the
		// content lives on under the key.
		_ = tmp.Close()
		_ = os.Remove(tmpName)
	}()
	v := newVerifier(ctxReader{ctx: ctx, r: r}, size, sum)
	if _, err := io.Copy(tmp, v); err != nil {
		return Object{}, fmt.Errorf("artifact: dir put %s: %w", key, err)
	}
	if !v.ok {
		return Object{}, fmt.Errorf("artifact: dir put %s: %w: copy ended before verification", key, ErrMismatch)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return Object{}, fmt.Errorf("artifact: dir put %s: %w", key, err)
	}
	if err := tmp.Sync(); err != nil {
		return Object{}, fmt.Errorf("artifact: dir put %s: fsync: %w", key, err)
	}
	if err := tmp.Close(); err != nil {
		return Object{}, fmt.Errorf("artifact: dir put %s: %w", key, err)
	}
	if err := os.Link(tmpName, p); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Another writer published first. Same content: reuse it.
			o, ok, serr := d.Stat(ctx, key)
			if serr != nil {
				return Object{}, serr
			}
			if ok {
				return d.existing(o, key, size, sum)
			}
		}
		return Object{}, fmt.Errorf("artifact: dir put %s: publish: %w", key, err)
	}
	// The temporary name goes before the directory's fsync, which then
	// makes the removal durable too (the deferred Remove finds nothing).
	_ = os.Remove(tmpName)
	toSync := []string{dir}
	for _, f := range fresh {
		toSync = append(toSync, filepath.Dir(f))
	}
	if err := d.syncs.Do(toSync, d.syncDirs); err != nil {
		// The file is visible but its directory entry may not survive a
		// crash: report it, and a retry's Stat finds and reuses the file.
		return Object{}, fmt.Errorf("artifact: dir put %s: fsync directory: %w", key, err)
	}
	for _, f := range fresh {
		d.durable.Store(f, struct{}{})
	}
	return Object{Key: key, Size: size, SHA256: sum}, nil
}

// mkdirs makes dir and its missing parents under the root, and returns
// the directories on the way that are not yet known to be durable (made
// now, or by another Put, or before this process): their parents need an
// fsync before a file under them is. A directory known durable ends the
// walk up, so a Put into an existing job's folder costs no system call
// here.
func (d *Dir) mkdirs(dir string) ([]string, error) {
	var fresh []string
	for p := dir; ; p = filepath.Dir(p) {
		if _, ok := d.durable.Load(p); ok {
			break
		}
		if p == filepath.Dir(p) || !strings.HasPrefix(p, d.root) {
			return nil, fmt.Errorf("directory %s is outside the store", dir) // checkKey prevents it
		}
		fresh = append(fresh, p)
	}
	// Top down: each Mkdir's parent exists by then.
	for i := len(fresh) - 1; i >= 0; i-- {
		if err := os.Mkdir(fresh[i], 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
	}
	return fresh, nil
}

// syncDirs is one round of grouped directory fsyncs: each distinct
// directory that any of the Puts named, fsynced once, all at the same
// time (a journaling file system commits concurrent fsyncs together). A
// Put's result is the first failure among its own directories.
func (d *Dir) syncDirs(puts [][]string) []error {
	failed := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	seen := map[string]bool{}
	for _, dirs := range puts {
		for _, dir := range dirs {
			if seen[dir] {
				continue
			}
			seen[dir] = true
			wg.Go(func() {
				if err := d.fsyncDir(dir); err != nil {
					mu.Lock()
					failed[dir] = err
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	errs := make([]error, len(puts))
	for i, dirs := range puts {
		for _, dir := range dirs {
			if err := failed[dir]; err != nil {
				errs[i] = fmt.Errorf("%s: %w", dir, err)
				break
			}
		}
	}
	return errs
}

// existing resolves a Put onto a key that is already taken.
func (d *Dir) existing(o Object, key string, size int64, sum string) (Object, error) {
	if same(o, size, sum) {
		return o, nil
	}
	return Object{}, fmt.Errorf("%w: %s holds %d bytes with sha256 %s, not %d bytes with %s", ErrConflict, key, o.Size, o.SHA256, size, sum)
}

// syncDir fsyncs a directory, making its entries durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// ctxReader stops a long copy when the caller's context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
