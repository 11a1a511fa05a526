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
//   - Stat recomputes the sha256 from the file's bytes rather than trusting
//     a sidecar: a sidecar would be a second file to keep consistent
//     through crashes, and for local sizes re-reading is cheap. What Stat
//     reports is therefore always what is really stored.
type Dir struct {
	root string
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
	return &Dir{root: abs}, nil
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
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Object{}, fmt.Errorf("artifact: dir put %s: %w", key, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(p)+".partial-*")
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
	if err := syncDir(dir); err != nil {
		// The file is visible but its directory entry may not survive a
		// crash: report it, and a retry's Stat finds and reuses the file.
		return Object{}, fmt.Errorf("artifact: dir put %s: fsync directory: %w", key, err)
	}
	return Object{Key: key, Size: size, SHA256: sum}, nil
}

// existing resolves a Put onto a key that is already taken.
func (d *Dir) existing(o Object, key string, size int64, sum string) (Object, error) {
	if same(o, size, sum) {
		return o, nil
	}
	return Object{}, fmt.Errorf("%w: %s holds %d bytes with sha256 %s, not %d bytes with %s", ErrConflict, key, o.Size, o.SHA256, size, sum)
}

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
