package artifact_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/artifact/artifacttest"
	"github.com/genjobs/genjobs/internal/dev/localpack"
)

// store is the contract both implementations share (the deliver handler
// declares the same interface).
type store interface {
	Stat(ctx context.Context, key string) (artifact.Object, bool, error)
	Put(ctx context.Context, key string, r io.Reader, size int64, sha256hex, contentType string) (artifact.Object, error)
}

// kind opens a fresh store and lists every object or file it holds,
// temporaries included, so a test can prove nothing was left behind.
type kind struct {
	name string
	open func(t testing.TB) (store, func() []string)
}

var kinds = []kind{
	{"dir", func(t testing.TB) (store, func() []string) {
		d, err := localpack.New(filepath.Join(t.TempDir(), "artifacts"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d, func() []string {
			// The keys the index file holds, and any file besides the
			// store's two.
			out, err := localpack.DurableKeys(d.Root())
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range listDir(t, d.Root()) {
				if f != localpack.PackName && f != localpack.IndexName {
					out = append(out, "file "+f)
				}
			}
			return out
		}
	}},
	{"s3", func(t testing.TB) (store, func() []string) {
		c, bucket := artifacttest.S3(t)
		return artifact.NewS3(c, bucket), func() []string { return listBucket(t, c, bucket) }
	}},
}

func listDir(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func listBucket(t testing.TB, c *s3.Client, bucket string) []string {
	t.Helper()
	out, err := c.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	sort.Strings(keys)
	return keys
}

func forEachKind(t *testing.T, f func(t *testing.T, s store, list func() []string)) {
	t.Helper()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s, list := k.open(t)
			f(t, s, list)
		})
	}
}

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

// content is a deterministic, non-trivial payload bigger than one read
// buffer, so streaming takes several reads.
func content(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

const key = "ops/op-1/job_1/0.png"

func TestPutStatRoundTrip(t *testing.T) {
	t.Parallel()
	forEachKind(t, func(t *testing.T, s store, list func() []string) {
		ctx := context.Background()
		data := content(300_000)
		if _, ok, err := s.Stat(ctx, key); ok || err != nil {
			t.Fatalf("empty store: Stat = %v, %v", ok, err)
		}
		obj, err := s.Put(ctx, key, bytes.NewReader(data), int64(len(data)), sum(data), "image/png")
		want := artifact.Object{Key: key, Size: int64(len(data)), SHA256: sum(data)}
		if err != nil || obj != want {
			t.Fatalf("Put = %+v, %v; want %+v", obj, err, want)
		}
		got, ok, err := s.Stat(ctx, key)
		if err != nil || !ok || got != want {
			t.Fatalf("Stat = %+v, %v, %v; want %+v", got, ok, err, want)
		}
		if l := list(); len(l) != 1 || l[0] != key {
			t.Fatalf("store holds %v, want only %s", l, key)
		}
	})
}

func TestEmptyObject(t *testing.T) {
	t.Parallel()
	forEachKind(t, func(t *testing.T, s store, list func() []string) {
		ctx := context.Background()
		if _, err := s.Put(ctx, "ops/a/b/0.bin", strings.NewReader("x"), 0, sum(nil), ""); !errors.Is(err, artifact.ErrMismatch) {
			t.Fatalf("a 1-byte source declared empty: %v", err)
		}
		if _, err := s.Put(ctx, "ops/a/b/0.bin", strings.NewReader(""), 0, sum([]byte("x")), ""); !errors.Is(err, artifact.ErrMismatch) {
			t.Fatalf("empty source with another digest: %v", err)
		}
		if l := list(); len(l) != 0 {
			t.Fatalf("left %v", l)
		}
		obj, err := s.Put(ctx, "ops/a/b/0.bin", strings.NewReader(""), 0, sum(nil), "")
		if err != nil || obj.Size != 0 || obj.SHA256 != sum(nil) {
			t.Fatalf("empty object: %+v, %v", obj, err)
		}
		if got, ok, err := s.Stat(ctx, "ops/a/b/0.bin"); !ok || err != nil || got != obj {
			t.Fatalf("Stat = %+v %v %v", got, ok, err)
		}
	})
}

// failing yields n good bytes, then fails.
type failing struct {
	r io.Reader
}

var errDiskOnFire = errors.New("source: disk on fire")

func (f *failing) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, errDiskOnFire
	}
	return n, err
}

// TestWrongContentLeavesNothing is the store's core promise: whatever is
// wrong with the stream (size, digest, a failing source), nothing appears
// under the key, not even a temporary.
func TestWrongContentLeavesNothing(t *testing.T) {
	t.Parallel()
	data := content(200_000)
	corrupt := bytes.Clone(data)
	corrupt[len(corrupt)-1] ^= 0xff
	cases := []struct {
		name string
		src  func() io.Reader
		size int64
		sum  string
	}{
		{"shorter than declared", func() io.Reader { return bytes.NewReader(data[:len(data)-1]) }, int64(len(data)), sum(data)},
		{"longer than declared", func() io.Reader { return io.MultiReader(bytes.NewReader(data), strings.NewReader("!")) }, int64(len(data)), sum(data)},
		{"declared size too small", func() io.Reader { return bytes.NewReader(data) }, int64(len(data) - 1), sum(data[:len(data)-1])},
		{"sha256 differs in the last byte", func() io.Reader { return bytes.NewReader(corrupt) }, int64(len(data)), sum(data)},
		{"sha256 of something else", func() io.Reader { return bytes.NewReader(data) }, int64(len(data)), sum([]byte("other"))},
		{"source fails mid-stream", func() io.Reader { return &failing{r: bytes.NewReader(data[:len(data)/2])} }, int64(len(data)), sum(data)},
		{"source fails with the last byte", func() io.Reader { return &failing{r: bytes.NewReader(data)} }, int64(len(data)), sum(data)},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s, list := k.open(t)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					_, err := s.Put(context.Background(), key, c.src(), c.size, c.sum, "image/png")
					if !errors.Is(err, artifact.ErrMismatch) {
						t.Fatalf("Put = %v, want ErrMismatch", err)
					}
					if _, ok, err := s.Stat(context.Background(), key); ok || err != nil {
						t.Fatalf("after a failed Put the key exists (%v, %v)", ok, err)
					}
					if l := list(); len(l) != 0 {
						t.Fatalf("store holds %v after a failed Put", l)
					}
				})
			}
		})
	}
}

func TestPutNeverReplaces(t *testing.T) {
	t.Parallel()
	forEachKind(t, func(t *testing.T, s store, list func() []string) {
		ctx := context.Background()
		a, b := content(70_000), content(70_001)
		first, err := s.Put(ctx, key, bytes.NewReader(a), int64(len(a)), sum(a), "image/png")
		if err != nil {
			t.Fatal(err)
		}
		again, err := s.Put(ctx, key, bytes.NewReader(a), int64(len(a)), sum(a), "image/png")
		if err != nil || again != first {
			t.Fatalf("same content again: %+v, %v; want the stored object reused", again, err)
		}
		if _, err := s.Put(ctx, key, bytes.NewReader(b), int64(len(b)), sum(b), "image/png"); !errors.Is(err, artifact.ErrConflict) {
			t.Fatalf("other content under a taken key: %v, want ErrConflict", err)
		}
		if got, _, _ := s.Stat(ctx, key); got != first {
			t.Fatalf("stored object changed to %+v", got)
		}
		if l := list(); len(l) != 1 {
			t.Fatalf("store holds %v", l)
		}
	})
}

func TestRejectsBadArguments(t *testing.T) {
	t.Parallel()
	forEachKind(t, func(t *testing.T, s store, list func() []string) {
		ctx := context.Background()
		data := []byte("x")
		for _, k := range []string{"", "/etc/passwd", "../escape", "ops/../../escape", "ops//x", "ops/./x", "ops/x/", `ops\x`, "ops/\x00", strings.Repeat("k", 1025)} {
			if _, err := s.Put(ctx, k, bytes.NewReader(data), 1, sum(data), ""); !errors.Is(err, artifact.ErrInvalid) {
				t.Errorf("Put(%q) = %v, want ErrInvalid", k, err)
			}
			if _, _, err := s.Stat(ctx, k); !errors.Is(err, artifact.ErrInvalid) {
				t.Errorf("Stat(%q) = %v, want ErrInvalid", k, err)
			}
		}
		for _, bad := range []string{"", "abc", strings.ToUpper(sum(data)), sum(data) + "0"} {
			if _, err := s.Put(ctx, key, bytes.NewReader(data), 1, bad, ""); !errors.Is(err, artifact.ErrInvalid) {
				t.Errorf("sha256 %q: %v, want ErrInvalid", bad, err)
			}
		}
		if _, err := s.Put(ctx, key, bytes.NewReader(data), -1, sum(data), ""); !errors.Is(err, artifact.ErrInvalid) {
			t.Errorf("negative size: %v", err)
		}
		if l := list(); len(l) != 0 {
			t.Fatalf("left %v", l)
		}
	})
}

// lazy generates n pseudo-random bytes on demand: a large object without
// a large []byte anywhere.
type lazy struct {
	left  int64
	state uint64
}

func newLazy(n int64) *lazy { return &lazy{left: n, state: 0x9e3779b97f4a7c15} }

func (l *lazy) Read(p []byte) (int, error) {
	if l.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	for i := range p {
		l.state ^= l.state << 13
		l.state ^= l.state >> 7
		l.state ^= l.state << 17
		p[i] = byte(l.state)
	}
	l.left -= int64(len(p))
	return len(p), nil
}

func lazySum(t testing.TB, n int64) string {
	t.Helper()
	h := sha256.New()
	if _, err := io.Copy(h, newLazy(n)); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestLargeObjectRoundTrip(t *testing.T) {
	t.Parallel()
	const n = 16 << 20
	want := lazySum(t, n)
	forEachKind(t, func(t *testing.T, s store, list func() []string) {
		obj, err := s.Put(context.Background(), "ops/big/job/0.mp4", newLazy(n), n, want, "video/mp4")
		if err != nil || obj.Size != n || obj.SHA256 != want {
			t.Fatalf("Put = %+v, %v", obj, err)
		}
		got, ok, err := s.Stat(context.Background(), "ops/big/job/0.mp4")
		if err != nil || !ok || got != obj {
			t.Fatalf("Stat = %+v %v %v", got, ok, err)
		}
	})
}

func TestS3KeepsTheChecksumInMetadata(t *testing.T) {
	t.Parallel()
	c, bucket := artifacttest.S3(t)
	s := artifact.NewS3(c, bucket)
	data := content(1000)
	if _, err := s.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), sum(data), "image/png"); err != nil {
		t.Fatal(err)
	}
	out, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Body.Close()
	body, _ := io.ReadAll(out.Body)
	if !bytes.Equal(body, data) || out.Metadata[artifact.MetaSHA256] != sum(data) || aws.ToString(out.ContentType) != "image/png" {
		t.Fatalf("stored %d bytes, metadata %v, content type %q", len(body), out.Metadata, aws.ToString(out.ContentType))
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		op, job     string
		index       int
		contentType string
		want        string
	}{
		{"op-42", "job_01JABC", 0, "image/png", "ops/op-42/job_01JABC/0.png"},
		{"op-42", "job_01JABC", 3, "IMAGE/JPEG; charset=binary", "ops/op-42/job_01JABC/3.jpg"},
		{"tenant:op.7", "job_x", 1, "video/mp4", "ops/tenant~3aop.7/job_x/1.mp4"},
		{"op", "job", 0, "application/x-unknown", "ops/op/job/0.bin"},
		{"op", "job", 0, "", "ops/op/job/0.bin"},
		{"op", "job", 0, "not a media type;;", "ops/op/job/0.bin"},
		{"..", "a/b", 0, "image/png", "ops/~2e./a~2fb/0.png"},
		{"~7e", "", 0, "image/png", "ops/~7e7e/~/0.png"},
	}
	for _, tt := range tests {
		if got := artifact.Key(tt.op, tt.job, tt.index, tt.contentType); got != tt.want {
			t.Errorf("Key(%q, %q, %d, %q) = %q, want %q", tt.op, tt.job, tt.index, tt.contentType, got, tt.want)
		}
	}
	// Injective: distinct ids never share a key, and every key is one
	// both stores accept.
	ids := []string{"a:b", "a_b", "a~3ab", "a~b", ".a", "~2ea", "a.", "", "~", "a/b", "a~2fb", "é", "~c3~a9"}
	seen := map[string]string{}
	d, err := localpack.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, id := range ids {
		k := artifact.Key(id, "job", 0, "image/png")
		if prev, dup := seen[k]; dup {
			t.Errorf("ids %q and %q share key %q", prev, id, k)
		}
		seen[k] = id
		if strings.Trim(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-~/") != "" {
			t.Errorf("key %q has unsafe characters", k)
		}
		if _, err := d.Path(k); err != nil {
			t.Errorf("key %q refused by the store: %v", k, err)
		}
	}
}
