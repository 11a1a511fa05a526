// Package localpack is the artifact store of local runs and tests, where
// no S3 exists: one pack file and its index in a directory. Nothing
// deployed links it (functions/deps_test.go).
package localpack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/groupcommit"
)

// The two files of a directory store. A key never names them: every key
// Key makes starts with "ops/", and Export refuses these names.
const (
	PackName  = "artifacts.pack"
	IndexName = "artifacts.index"
)

// Dir stores artifacts in a directory, for local runs and tests where no
// S3 exists, with the same guarantees as S3, in two files
// (docs/how-it-works.md says why and how): artifacts.pack holds the
// content, each Put streaming into a region it reserved at the pack's end;
// artifacts.index holds one line per object (offset, size, sha256, key),
// appended in grouped commits that each end with a checksummed commit
// line, written only after the pack is fsynced. On open, a torn last
// commit is cut (and kept beside the index as artifacts.index.cut-<time>);
// a damaged commit before a complete one refuses the open. Stat recomputes
// the sha256 from the pack. One process has a store at a time (a lock on
// the index), and after a failed fsync every later Put fails. Export
// writes a plain copy of an object for people; the pack stays the durable
// copy.
type Dir struct {
	root  string
	pack  *os.File
	index *os.File

	// commits groups the Puts' durable steps.
	commits groupcommit.Group[*pending]
	// syncFile is (*os.File).Sync; tests watch and fail it.
	syncFile func(*os.File) error
	// syncs counts the commits' fsyncs (Syncs).
	syncs atomic.Int64

	mu      sync.Mutex
	end     int64            // next free offset in the pack
	objects map[string]entry // committed objects by key
	broken  error            // a failed fsync or index write, or Close: no Put succeeds after it
	// writing counts the Puts between their reservation and their end;
	// Close waits for them, so no write lands in a closed (or reopened)
	// pack.
	writing sync.WaitGroup
}

// entry is where an object's content lies in the pack.
type entry struct {
	off, size int64
	sum       string
}

// pending is a Put whose content is written, waiting for its commit.
type pending struct {
	key string
	entry
}

// CommitSpacing is the least time between two commits of a directory
// store: a commit costs two flushes whatever it carries, so spaced-out
// commits carry more Puts (on ext4, a local run went from about 60 % to
// 75 % of its tmpfs speed). A Put after a quiet spell commits at once.
const CommitSpacing = 5 * time.Millisecond

// New opens (creating if needed) a directory store rooted at root. It
// fails when another Dir, in this process or another, has it open.
func New(root string) (*Dir, error) {
	if root == "" {
		return nil, fmt.Errorf("%w: empty artifact directory", artifact.ErrInvalid)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("artifact: dir %s: %w", root, err)
	}
	if err := mkdirDurable(abs); err != nil {
		return nil, fmt.Errorf("artifact: dir %s: %w", root, err)
	}
	d := &Dir{root: abs, syncFile: (*os.File).Sync, objects: map[string]entry{}}
	d.commits.Spacing = CommitSpacing
	if err := d.open(); err != nil {
		d.Close()
		return nil, fmt.Errorf("artifact: dir %s: %w", abs, err)
	}
	return d, nil
}

// Syncs is how many fsyncs d's commits have issued (two per commit that
// adds an object, one per commit that adds none). `genjobs bench` divides
// operations by it.
func (d *Dir) Syncs() int64 { return d.syncs.Load() }

// open opens both files, locks the index, loads it and cuts a torn tail.
func (d *Dir) open() error {
	var err error
	if d.index, err = os.OpenFile(filepath.Join(d.root, IndexName), os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		return err
	}
	if err := syscall.Flock(int(d.index.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return errors.New("in use: another process (or another store in this one) has it open")
		}
		return fmt.Errorf("lock %s: %w", IndexName, err)
	}
	if d.pack, err = os.OpenFile(filepath.Join(d.root, PackName), os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		return err
	}
	// Either file may be new: make their entries durable before any line
	// is. Once per open, so no need to know.
	if err := syncPath(d.root); err != nil {
		return err
	}
	st, err := d.pack.Stat()
	if err != nil {
		return err
	}
	d.end = st.Size()
	raw, err := io.ReadAll(d.index)
	if err != nil {
		return err
	}
	objects, good, err := parseIndex(raw, d.end)
	if err != nil {
		return err
	}
	d.objects = objects
	if good < int64(len(raw)) {
		// A commit torn by a crash: its Puts never returned. Cut it, so
		// the next commit does not follow garbage, but keep the bytes
		// beside the index: damage to the last commit looks the same.
		if err := d.keepCut(raw[good:]); err != nil {
			return err
		}
		if err := d.index.Truncate(good); err != nil {
			return err
		}
		if err := d.index.Sync(); err != nil {
			return err
		}
	}
	_, err = d.index.Seek(good, io.SeekStart)
	return err
}

// Close waits for the Puts under way (a Put streaming from a slow source
// ends when its context does), then releases the files and the lock. Puts
// after Close fail.
func (d *Dir) Close() error {
	d.mu.Lock()
	if d.broken == nil {
		d.broken = errors.New("store closed")
	}
	d.mu.Unlock()
	d.writing.Wait()
	var errs []error
	for _, f := range []*os.File{d.pack, d.index} { // the pack first: the lock is on the index
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}

// Root is the store's absolute root directory.
func (d *Dir) Root() string { return d.root }

// Path is the file Export writes key to. checkKey guarantees it lies
// under the root: no absolute key, no ".." segment.
func (d *Dir) Path(key string) (string, error) {
	if err := artifact.CheckKey(key); err != nil {
		return "", err
	}
	if err := notOwnFile(key); err != nil {
		return "", err
	}
	return filepath.Join(d.root, filepath.FromSlash(key)), nil
}

// notOwnFile refuses the keys whose plain copies would overwrite the
// store's own files.
func notOwnFile(key string) error {
	if key == PackName || key == IndexName {
		return fmt.Errorf("%w: key %q names one of the store's own files", artifact.ErrInvalid, key)
	}
	return nil
}

// lookup is the committed entry for key.
func (d *Dir) lookup(key string) (entry, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.objects[key]
	return e, ok
}

// Open reads an object's stored bytes; fs.ErrNotExist when no object has
// the key.
func (d *Dir) Open(key string) (*io.SectionReader, error) {
	if err := artifact.CheckKey(key); err != nil {
		return nil, err
	}
	e, ok := d.lookup(key)
	if !ok {
		return nil, fmt.Errorf("artifact: dir open %s: %w", key, fs.ErrNotExist)
	}
	return io.NewSectionReader(d.pack, e.off, e.size), nil
}

// Stat reports the object's size and sha256 (recomputed from the pack), or
// false when no object has key.
func (d *Dir) Stat(ctx context.Context, key string) (artifact.Object, bool, error) {
	if err := artifact.CheckKey(key); err != nil {
		return artifact.Object{}, false, err
	}
	e, ok := d.lookup(key)
	if !ok {
		return artifact.Object{}, false, nil
	}
	o, err := d.stat(ctx, key, e)
	return o, err == nil, err
}

// stat hashes the bytes of e, key's region.
func (d *Dir) stat(ctx context.Context, key string, e entry) (artifact.Object, error) {
	h := sha256.New()
	n, err := io.Copy(h, ctxReader{ctx: ctx, r: io.NewSectionReader(d.pack, e.off, e.size)})
	if err != nil {
		return artifact.Object{}, fmt.Errorf("artifact: dir stat %s: %w", key, err)
	}
	return artifact.Object{Key: key, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// Put streams r into the pack for key, verifying that it is exactly size
// bytes with the given sha256, and returns once the object is durable.
// When the key already holds the same content it returns that object
// without reading r; different content is artifact.ErrConflict.
// contentType is not kept: the key's extension carries it.
func (d *Dir) Put(ctx context.Context, key string, r io.Reader, size int64, sum, contentType string) (artifact.Object, error) {
	if err := artifact.CheckPut(key, size, sum); err != nil {
		return artifact.Object{}, err
	}
	if err := notOwnFile(key); err != nil {
		return artifact.Object{}, err
	}
	if e, ok := d.lookup(key); ok {
		o, err := d.stat(ctx, key, e)
		if err != nil || artifact.Same(o, size, sum) {
			return o, err
		}
		return artifact.Object{}, conflict(key, o.Size, o.SHA256, size, sum)
	}
	d.mu.Lock()
	if err := d.broken; err != nil {
		d.mu.Unlock()
		return artifact.Object{}, fmt.Errorf("artifact: dir put %s: %w", key, err)
	}
	d.writing.Add(1)
	defer d.writing.Done()
	// The region is ours alone: nobody else writes there, and until its
	// index line is durable nobody reads it. An empty object needs none,
	// and gets offset 0: a region past the pack's real end (others still
	// streaming, or failed) would not be there after a crash.
	var off int64
	if size > 0 {
		off = d.end
		d.end += size
	}
	d.mu.Unlock()
	v := artifact.NewVerifier(ctxReader{ctx: ctx, r: r}, size, sum)
	if _, err := io.Copy(io.NewOffsetWriter(d.pack, off), v); err != nil {
		return artifact.Object{}, fmt.Errorf("artifact: dir put %s: %w", key, err)
	}
	if !v.Verified() {
		return artifact.Object{}, fmt.Errorf("artifact: dir put %s: %w: copy ended before verification", key, artifact.ErrMismatch)
	}
	if err := d.commits.Do(&pending{key: key, entry: entry{off: off, size: size, sum: sum}}, d.commit); err != nil {
		return artifact.Object{}, fmt.Errorf("artifact: dir put %s: %w", key, err)
	}
	return artifact.Object{Key: key, Size: size, SHA256: sum}, nil
}

// commit makes a group of written Puts durable: one pack fsync, then
// their index lines and a commit line in one write, then one index fsync.
// A key that an earlier commit (or an earlier Put of this one) already
// holds gets no second line: the same content is that object, other
// content is artifact.ErrConflict.
func (d *Dir) commit(puts []*pending) []error {
	errs := make([]error, len(puts))
	fail := func(err error) []error {
		d.mu.Lock()
		if d.broken == nil {
			d.broken = err
		}
		d.mu.Unlock()
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	d.mu.Lock()
	broken := d.broken
	d.mu.Unlock()
	if broken != nil {
		return fail(broken)
	}
	d.syncs.Add(1)
	if err := d.syncFile(d.pack); err != nil {
		return fail(fmt.Errorf("fsync %s: %w", PackName, err))
	}
	fresh := map[string]entry{}
	var lines []byte
	n := 0
	d.mu.Lock() // only this commit adds objects: what it reads stays true
	for i, p := range puts {
		e, ok := fresh[p.key]
		if !ok {
			e, ok = d.objects[p.key]
		}
		if ok {
			if e.size != p.size || e.sum != p.sum {
				errs[i] = conflict(p.key, e.size, e.sum, p.size, p.sum)
			}
			continue
		}
		fresh[p.key] = p.entry
		lines = appendLine(lines, p.key, p.entry)
		n++
	}
	d.mu.Unlock()
	if n == 0 {
		return errs
	}
	lines = fmt.Appendf(lines, "commit %d %08x\n", n, crc32.Checksum(lines, castagnoli))
	if _, err := d.index.Write(lines); err != nil {
		return fail(fmt.Errorf("write %s: %w", IndexName, err))
	}
	d.syncs.Add(1)
	if err := d.syncFile(d.index); err != nil {
		return fail(fmt.Errorf("fsync %s: %w", IndexName, err))
	}
	d.mu.Lock()
	maps.Copy(d.objects, fresh)
	d.mu.Unlock()
	return errs
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendLine is an object's index line: "<offset> <size> <sha256> <key,
// quoted>".
func appendLine(b []byte, key string, e entry) []byte {
	return fmt.Appendf(b, "%d %d %s %q\n", e.off, e.size, e.sum, key)
}

// parseIndex reads the committed objects from an index's bytes, and how
// many leading bytes hold complete commits. A commit without a valid
// commit line ends the index there. It must be the last thing in it, as a
// crash tears only the commit being written: a complete commit after it
// is damage, an error, and so is a commit whose commit line is valid but
// whose lines are not. packSize bounds every region.
func parseIndex(raw []byte, packSize int64) (map[string]entry, int64, error) {
	objects := map[string]entry{}
	for pos := 0; pos < len(raw); {
		batch, next, err := parseCommit(raw, pos, packSize)
		if err != nil {
			return nil, 0, fmt.Errorf("%s damaged at byte %d: %w", IndexName, pos, err)
		}
		if batch == nil {
			for s := nextLine(raw, pos); s < len(raw); s = nextLine(raw, s) {
				if b, _, err := parseCommit(raw, s, packSize); b != nil || err != nil {
					return nil, 0, fmt.Errorf("%s damaged at byte %d: a complete commit follows a broken one", IndexName, pos)
				}
			}
			return objects, int64(pos), nil
		}
		maps.Copy(objects, batch)
		pos = next
	}
	return objects, int64(len(raw)), nil
}

// parseCommit reads the commit that starts at pos: object lines, then a
// commit line with their count and checksum. It returns the objects and
// where the next commit starts; no objects when there is no valid commit
// line (a torn commit); an error when the commit line is valid but a line
// it covers is not, which no crash does (damage, or a pack that lost
// content).
func parseCommit(raw []byte, pos int, packSize int64) (map[string]entry, int, error) {
	var lines []string
	for p := pos; ; {
		nl := bytes.IndexByte(raw[p:], '\n')
		if nl < 0 {
			return nil, 0, nil // a line the crash cut short
		}
		line, next := string(raw[p:p+nl]), p+nl+1
		rest, ok := strings.CutPrefix(line, "commit ")
		if !ok {
			lines, p = append(lines, line), next
			continue
		}
		var count int
		var sum uint32
		if _, err := fmt.Sscanf(rest, "%d %x", &count, &sum); err != nil || count == 0 || count != len(lines) ||
			line != fmt.Sprintf("commit %d %08x", count, sum) || sum != crc32.Checksum(raw[pos:p], castagnoli) {
			return nil, 0, nil
		}
		batch := make(map[string]entry, len(lines))
		for _, l := range lines {
			key, e, err := parseLine(l, packSize)
			if err != nil {
				return nil, 0, err
			}
			batch[key] = e
		}
		return batch, next, nil
	}
}

// nextLine is the offset after the line that holds at.
func nextLine(raw []byte, at int) int {
	if nl := bytes.IndexByte(raw[at:], '\n'); nl >= 0 {
		return at + nl + 1
	}
	return len(raw)
}

// parseLine reads one object line: "<offset> <size> <sha256> <key,
// quoted>", its region inside a pack of packSize bytes.
func parseLine(line string, packSize int64) (string, entry, error) {
	f := strings.SplitN(line, " ", 4)
	if len(f) != 4 {
		return "", entry{}, fmt.Errorf("line %.100q is not an object", line)
	}
	off, err1 := strconv.ParseInt(f[0], 10, 64)
	size, err2 := strconv.ParseInt(f[1], 10, 64)
	key, err3 := strconv.Unquote(f[3])
	switch {
	case err1 != nil || err2 != nil || err3 != nil || off < 0 || size < 0 || !artifact.ValidSHA256(f[2]):
		return "", entry{}, fmt.Errorf("line %.100q is not an object", line)
	case artifact.CheckKey(key) != nil:
		return "", entry{}, fmt.Errorf("line %.100q: %w", line, artifact.CheckKey(key))
	case off > packSize || size > packSize-off:
		return "", entry{}, fmt.Errorf("%s holds %d bytes, but %s is %d bytes at %d: the pack lost content", PackName, packSize, key, size, off)
	}
	return key, entry{off: off, size: size, sum: f[2]}, nil
}

// Export writes the object under key out as a plain file at Path(key) and
// returns that path: a copy for people to open, checked against the
// object's sha256 on the way. It is not fsynced; the pack is the durable
// copy, and Export can write it again at any time.
func (d *Dir) Export(ctx context.Context, key string) (string, error) {
	p, err := d.Path(key)
	if err != nil {
		return "", err
	}
	e, ok := d.lookup(key)
	if !ok {
		return "", fmt.Errorf("artifact: dir export %s: %w", key, fs.ErrNotExist)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", fmt.Errorf("artifact: dir export %s: %w", key, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".partial-*")
	if err != nil {
		return "", fmt.Errorf("artifact: dir export %s: %w", key, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	v := artifact.NewVerifier(ctxReader{ctx: ctx, r: io.NewSectionReader(d.pack, e.off, e.size)}, e.size, e.sum)
	if _, err := io.Copy(tmp, v); err != nil {
		return "", fmt.Errorf("artifact: dir export %s: %w", key, err)
	}
	if !v.Verified() {
		return "", fmt.Errorf("artifact: dir export %s: %w: copy ended before verification", key, artifact.ErrMismatch)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return "", fmt.Errorf("artifact: dir export %s: %w", key, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return "", fmt.Errorf("artifact: dir export %s: %w", key, err)
	}
	return p, nil
}

// conflict is artifact.ErrConflict for key, which holds other content than a Put's.
func conflict(key string, heldSize int64, heldSum string, size int64, sum string) error {
	return fmt.Errorf("%w: %s holds %d bytes with sha256 %s, not %d bytes with %s", artifact.ErrConflict, key, heldSize, heldSum, size, sum)
}

// keepCut saves the bytes cut from the index's tail as
// artifacts.index.cut-<unix nanoseconds>, durably, before the cut.
func (d *Dir) keepCut(b []byte) error {
	name := filepath.Join(d.root, fmt.Sprintf("%s.cut-%d", IndexName, time.Now().UnixNano()))
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	serr := f.Sync()
	if err := errors.Join(werr, serr, f.Close()); err != nil {
		return fmt.Errorf("keep the index's cut tail: %w", err)
	}
	return syncPath(d.root)
}

// mkdirDurable makes dir and any missing parents, and fsyncs the parent
// of each folder it made, so a crash cannot lose the way to the store.
func mkdirDurable(dir string) error {
	var made []string
	for p := dir; ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil || p == filepath.Dir(p) {
			break
		}
		made = append(made, p)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range made {
		if err := syncPath(filepath.Dir(p)); err != nil {
			return err
		}
	}
	return nil
}

// syncPath fsyncs a directory, making its entries durable.
func syncPath(dir string) error {
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

// DurableKeys lists, sorted, the keys the index file under root names in
// complete commits: what a reopened store would hold, not what this
// process remembers.
func DurableKeys(root string) ([]string, error) {
	raw, err := os.ReadFile(filepath.Join(root, IndexName))
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(filepath.Join(root, PackName))
	if err != nil {
		return nil, err
	}
	objects, _, err := parseIndex(raw, st.Size())
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(objects)), nil
}
