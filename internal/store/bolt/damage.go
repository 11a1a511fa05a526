package bolt

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"go.etcd.io/bbolt"
	bbolterrors "go.etcd.io/bbolt/errors"
)

// DamagedError reports a store file that is not a readable genjobs store:
// empty, truncated, corrupted, or another program's bbolt file. Nothing is
// written to such a file.
type DamagedError struct {
	Path    string
	Problem string
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("store %s is damaged: %s (nothing was written to it; restore it from a copy or start a new run)", e.Path, e.Problem)
}

// ErrDamaged matches every *DamagedError with errors.Is.
var ErrDamaged = errors.New("store file damaged")

// Is makes errors.Is(err, ErrDamaged) true.
func (e *DamagedError) Is(target error) bool { return target == ErrDamaged }

// guard runs fn and turns what bbolt does on a damaged file into a
// DamagedError: its panics (an invalid page, a bad freelist) and memory
// faults on the mapped file (a truncated file reads past its end: SIGBUS),
// which SetPanicOnFault turns into panics of this goroutine.
func guard(path string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			problem := fmt.Sprint(r)
			if re, ok := r.(runtime.Error); ok && strings.Contains(re.Error(), "invalid memory address") {
				// A fault on the mapped file: a page it refers to
				// lies past its end.
				problem = "a page lies past the end of the file (truncated?): " + problem
			}
			err = &DamagedError{Path: path, Problem: problem}
		}
	}()
	return fn()
}

// OpenExisting opens a store file that must already exist and be whole:
// what the operator's commands open. Unlike Open it never creates or
// initialises a file (bbolt would turn a 0-byte file into an empty store),
// and it first reads every page of the file read-only, so a damaged file
// is reported as a DamagedError before anything could write to it. With
// readOnly the store is opened read-only too; its writes then fail.
func OpenExisting(path string, readOnly bool) (*Store, error) {
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("open store %s: %w", path, err)
	case err != nil:
		return nil, fmt.Errorf("open store %s: %w", path, err)
	case info.IsDir():
		return nil, &DamagedError{Path: path, Problem: "a directory, not a file"}
	case info.Size() == 0:
		return nil, &DamagedError{Path: path, Problem: "empty (0 bytes)"}
	case info.Size()%int64(os.Getpagesize()) != 0:
		return nil, &DamagedError{Path: path, Problem: fmt.Sprintf("%d bytes, not a whole number of %d-byte pages: truncated", info.Size(), os.Getpagesize())}
	}
	if err := verify(path); err != nil {
		return nil, err
	}
	var st *Store
	err = guard(path, func() error {
		var err error
		st, err = openWith(path, LockTimeout, Options{readOnly: readOnly})
		return err
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// verify opens path read-only and reads every bucket, key and value (the
// records, reviews and audit entries decoded), so every page reachable
// from the root is touched once under guard.
func verify(path string) error {
	return guard(path, func() error {
		db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: LockTimeout})
		if err != nil {
			if errors.Is(err, bbolterrors.ErrTimeout) {
				return lockedError(path, LockTimeout, err)
			}
			return &DamagedError{Path: path, Problem: err.Error()}
		}
		defer db.Close()
		return db.View(func(tx *bbolt.Tx) error {
			for _, name := range [][]byte{bucketOps, bucketAudit, bucketReviews, bucketOpenReviews, bucketDue, bucketOpReviews} {
				if tx.Bucket(name) == nil {
					return &DamagedError{Path: path, Problem: fmt.Sprintf("no %q bucket: not a genjobs store", name)}
				}
			}
			return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
				return walk(path, string(name), b)
			})
		})
	})
}

// walk reads every key and value under b, nested buckets included, and
// decodes the JSON ones.
func walk(path, name string, b *bbolt.Bucket) error {
	return b.ForEach(func(k, v []byte) error {
		if v == nil {
			nested := b.Bucket(k)
			if nested == nil {
				return &DamagedError{Path: path, Problem: fmt.Sprintf("bucket %s: key %q is neither a value nor a bucket", name, k)}
			}
			return walk(path, name+"/"+string(k), nested)
		}
		switch name {
		case string(bucketOps), string(bucketReviews):
			if !json.Valid(v) {
				return &DamagedError{Path: path, Problem: fmt.Sprintf("bucket %s: the value of %q is not JSON", name, k)}
			}
		}
		return nil
	})
}

// read is db.View under guard, as write's commits are (group.go): a page
// damaged after the file was opened gives an error, not a crash.
func (b *Store) read(fn func(*bbolt.Tx) error) error {
	return guard(b.db.Path(), func() error { return b.db.View(fn) })
}
