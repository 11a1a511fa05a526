package artifact_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/artifact/artifacttest"
	"github.com/genjobs/genjobs/internal/dev/localpack"
)

// sinkS3 answers PutObject like S3 but keeps nothing: it hashes the body
// as it arrives, checks Content-Length and x-amz-checksum-sha256 as S3
// would, and discards the bytes. An S3 that keeps every object in memory
// which would swamp the figure this benchmark exists for: the memory the
// client side of Put needs.
func sinkS3(b *testing.B) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut {
			http.Error(w, "sink accepts PUT only", http.StatusMethodNotAllowed)
			return
		}
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		want, _ := strconv.ParseInt(r.Header.Get("Content-Length"), 10, 64)
		if err != nil || n != want || base64.StdEncoding.EncodeToString(h.Sum(nil)) != r.Header.Get("X-Amz-Checksum-Sha256") {
			http.Error(w, "<Error><Code>BadDigest</Code></Error>", http.StatusBadRequest)
			return
		}
		w.Header().Set("ETag", `"`+hex.EncodeToString(h.Sum(nil)[:16])+`"`)
		w.WriteHeader(http.StatusOK)
	}))
	b.Cleanup(srv.Close)
	return srv.URL
}

// BenchmarkPutLarge streams a 64 MiB object, generated lazily (no []byte
// of its size exists anywhere), through each store's Put and reports the
// heap bytes allocated per Put from runtime.MemStats. A Put that buffered
// the object would allocate at least 64 MiB per op; a streaming one
// allocates a small constant.
func BenchmarkPutLarge(b *testing.B) {
	const size = 64 << 20
	want := lazySum(b, size)
	stores := []struct {
		name string
		open func(b *testing.B) (store, func(i int) string)
	}{
		{"dir", func(b *testing.B) (store, func(int) string) {
			d, err := localpack.New(filepath.Join(b.TempDir(), "artifacts"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { d.Close() })
			return d, func(i int) string { return fmt.Sprintf("ops/bench/job/%d.bin", i) }
		}},
		{"s3", func(b *testing.B) (store, func(int) string) {
			s := artifact.NewS3(artifacttest.Client(sinkS3(b)), "genjobs-artifacts-bench")
			return s, func(i int) string { return fmt.Sprintf("ops/bench/job/%d.bin", i) }
		}},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			s, keyFor := st.open(b)
			ctx := context.Background()
			b.SetBytes(size)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for i := range b.N {
				if _, err := s.Put(ctx, keyFor(i), newLazy(size), size, want, "application/octet-stream"); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N), "heap-B/put")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "mallocs/put")
		})
	}
}
