// Package artifact stores rendered outputs in our own storage: S3 when
// deployed, a directory for local runs. Both stores share one contract,
// which is what makes delivery idempotent (design invariant 5):
//
//   - Keys are deterministic (Key), so a replayed delivery looks in the
//     same place and finds what an earlier attempt stored.
//   - Put streams the content (it never holds a whole output in memory)
//     and verifies the declared size and sha256 while it streams; content
//     that fails verification never becomes visible under the final key.
//   - Put never replaces an object: when the key already holds the same
//     content it returns that object, and when it holds different content
//     it refuses with ErrConflict.
//   - Stat reports an object's size and sha256, so a caller can reuse a
//     stored output instead of copying it again.
//
// The interface the deliver handler needs is declared there, where it is
// used; this package only provides the implementations.
package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"mime"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Object is one stored artifact as the store knows it.
type Object struct {
	Key    string
	Size   int64
	SHA256 string // lowercase hex
}

// Sentinels callers branch on with errors.Is.
var (
	// ErrMismatch: the content streamed to Put did not have the declared
	// size or sha256 (or the source failed before its end). Nothing was
	// stored under the key. Retrying with a fresh source may succeed.
	ErrMismatch = errors.New("artifact: content does not match the declared size or sha256")
	// ErrConflict: the key already holds different content. The store
	// never replaces it; someone must look at why a deterministic key
	// holds something else. Permanent.
	ErrConflict = errors.New("artifact: key already holds different content")
	// ErrInvalid: the key, size or checksum given is unusable (a key that
	// escapes the store, a checksum that is not sha256 hex). Permanent.
	ErrInvalid = errors.New("artifact: invalid argument")
)

// MaxKeyLen bounds keys (S3's own limit is 1024 bytes).
const MaxKeyLen = 1024

// ValidSHA256 reports whether s is a sha256 digest in lowercase hex, the
// form Genace reports and the stores keep.
func ValidSHA256(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// CheckKey accepts relative, slash-separated keys whose every segment is a
// real name: no empty, "." or ".." segment, no backslash, no NUL, valid
// UTF-8. Both stores apply it, so a key that works locally works in S3 and
// no key can escape a directory store's root.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key longer than %d bytes", ErrInvalid, MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key is not UTF-8", ErrInvalid)
	case strings.ContainsAny(key, "\\\x00"):
		return fmt.Errorf("%w: key %q has a backslash or NUL", ErrInvalid, key)
	case strings.HasPrefix(key, "/"):
		return fmt.Errorf("%w: key %q is absolute", ErrInvalid, key)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: key %q has an empty, . or .. segment", ErrInvalid, key)
		}
	}
	return nil
}

// CheckPut validates Put's arguments before anything is read or sent.
func CheckPut(key string, size int64, sum string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("%w: negative size %d", ErrInvalid, size)
	}
	if !ValidSHA256(sum) {
		return fmt.Errorf("%w: sha256 %.80q is not 64 lowercase hex digits", ErrInvalid, sum)
	}
	return nil
}

// Key is the deterministic object key of output index of a job:
// ops/<operation>/<job>/<index><ext>. The same operation, job and index
// always give the same key, which is how a replayed delivery finds what an
// earlier attempt stored. The job id is part of the key so an operator's
// decision to render again (a new job) never collides with the old
// outputs.
//
// Ids are escaped injectively into letters, digits and . _ - ~: any other
// byte, a leading '.', and '~' itself become ~XX (hex), so two different
// ids never share a key and no segment can be "." or "..". The extension
// comes from a fixed table (extensionFor), never from the host's MIME
// database, which would make keys depend on where the code runs.
func Key(operationID, jobID string, index int, contentType string) string {
	return "ops/" + escapeSegment(operationID) + "/" + escapeSegment(jobID) + "/" + strconv.Itoa(index) + extensionFor(contentType)
}

// escapeSegment makes s one safe key segment (see Key).
func escapeSegment(s string) string {
	if s == "" {
		return "~" // no escape sequence is a bare "~", so this stays injective
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
			b.WriteByte(c)
		case c == '.' && i > 0:
			b.WriteByte(c)
		default:
			const hexdigits = "0123456789abcdef"
			b.WriteByte('~')
			b.WriteByte(hexdigits[c>>4])
			b.WriteByte(hexdigits[c&0xf])
		}
	}
	return b.String()
}

// extensions maps the media types Genace renders to file extensions. It is
// a fixed table on purpose: keys must not change between machines.
var extensions = map[string]string{
	"image/png":         ".png",
	"image/jpeg":        ".jpg",
	"image/webp":        ".webp",
	"image/gif":         ".gif",
	"image/avif":        ".avif",
	"video/mp4":         ".mp4",
	"video/webm":        ".webm",
	"video/quicktime":   ".mov",
	"audio/mpeg":        ".mp3",
	"audio/wav":         ".wav",
	"application/json":  ".json",
	"model/gltf-binary": ".glb",
}

// extensionFor returns the extension for a Content-Type (parameters and
// case ignored), ".bin" for anything unknown or unparseable.
func extensionFor(contentType string) string {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return ".bin"
	}
	if ext, ok := extensions[strings.ToLower(mt)]; ok {
		return ext
	}
	return ".bin"
}

// Verifier passes a source through while hashing it, and refuses to hand
// over the source's last byte until it has proved the whole content right:
// exactly size bytes, then end of stream, with the declared sha256. A
// consumer (an HTTP request body, a temp file) therefore never receives a
// complete copy of wrong content: a short, long or corrupt source always
// ends in an error with at least one byte still missing, and a store that
// commits only complete bodies (S3 with Content-Length) commits nothing.
type Verifier struct {
	src  io.Reader
	size int64
	want string
	h    hash.Hash
	n    int64
	// err is the sticky failure; ok says every byte was read and verified.
	err error
	ok  bool
}

// NewVerifier verifies src against the declared size and sha256.
func NewVerifier(src io.Reader, size int64, sum string) *Verifier {
	return &Verifier{src: src, size: size, want: sum, h: sha256.New()}
}

// Read implements io.Reader. It never reads more than size bytes into p,
// then probes the source for its end before releasing the last chunk.
func (v *Verifier) Read(p []byte) (int, error) {
	switch {
	case v.ok:
		return 0, io.EOF
	case v.err != nil:
		return 0, v.err
	case v.n == v.size: // only for size 0: nothing to withhold, check now
		return 0, v.finish(nil)
	case len(p) == 0:
		return 0, nil
	}
	if rem := v.size - v.n; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := v.src.Read(p)
	if n < 0 || n > len(p) {
		v.err = fmt.Errorf("%w: source returned an impossible count %d", ErrMismatch, n)
		return 0, v.err
	}
	v.h.Write(p[:n])
	v.n += int64(n)
	switch {
	case v.n == v.size:
		if ferr := v.finish(err); ferr != io.EOF {
			return 0, ferr // withhold the last chunk: the copy stays incomplete
		}
		return n, io.EOF
	case err == io.EOF:
		v.err = fmt.Errorf("%w: source ended after %d of %d bytes", ErrMismatch, v.n, v.size)
		return n, v.err
	case err != nil:
		v.err = fmt.Errorf("%w: source failed after %d of %d bytes: %w", ErrMismatch, v.n, v.size, err)
		return n, v.err
	}
	return n, nil
}

// maxEmptyReads bounds a source that keeps answering (0, nil), which
// io.Reader discourages but allows.
const maxEmptyReads = 100

// finish runs once all declared bytes are hashed. lastErr is what the
// source returned with the final chunk: io.EOF proves the end; nil needs a
// probe read, since a source with more data than declared is wrong too.
// It returns io.EOF when the content is verified, else the failure.
func (v *Verifier) finish(lastErr error) error {
	switch {
	case lastErr == nil:
		var one [1]byte
		for empty := 0; ; empty++ {
			m, err := v.src.Read(one[:])
			if m > 0 {
				v.err = fmt.Errorf("%w: source is longer than the declared %d bytes", ErrMismatch, v.size)
				return v.err
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				v.err = fmt.Errorf("%w: source failed at its end: %w", ErrMismatch, err)
				return v.err
			}
			if empty >= maxEmptyReads {
				v.err = fmt.Errorf("%w: source does not end after the declared %d bytes", ErrMismatch, v.size)
				return v.err
			}
		}
	case lastErr != io.EOF:
		v.err = fmt.Errorf("%w: source failed at its end: %w", ErrMismatch, lastErr)
		return v.err
	}
	if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want {
		v.err = fmt.Errorf("%w: sha256 %s, declared %s", ErrMismatch, got, v.want)
		return v.err
	}
	v.ok = true
	return io.EOF
}

// Verified reports whether every byte was read and proved right.
func (v *Verifier) Verified() bool { return v.ok }

// Same reports whether a stored object is the content Put was asked for.
func Same(o Object, size int64, sum string) bool { return o.Size == size && o.SHA256 == sum }
