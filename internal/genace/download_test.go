package genace_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/genace"
)

// succeededJob submits a job and moves the clock past its render.
func succeededJob(t *testing.T, e *env) *genace.Job {
	t.Helper()
	ctx := context.Background()
	res := e.client.Submit(ctx, req("op"), time.Second)
	if res.Outcome != genace.OutcomeAccepted {
		t.Fatal(res.Err)
	}
	e.clk.Advance(time.Minute + 5*time.Second)
	j, err := e.client.Get(ctx, res.JobID, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != genace.RemoteSucceeded || len(j.Outputs) != 2 {
		t.Fatalf("job = %+v", j)
	}
	return j
}

func TestDownloadOutputs(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(t0)
	sim := genacesim.New(genacesim.Config{APIKey: testKey, Models: models, SignedURLTTL: 15 * time.Minute}, clk)
	var mu sync.Mutex
	var fileAuth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/files/") {
			mu.Lock()
			fileAuth = append(fileAuth, r.Header.Get("Authorization"))
			mu.Unlock()
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(sim.Close)
	c, err := genace.New(srv.URL, testKey, &http.Client{Transport: &http.Transport{}})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{sim: sim, srv: srv, client: c, clk: clk}
	j := succeededJob(t, e)
	ctx := context.Background()

	for i, o := range j.Outputs {
		rc, n, err := c.Download(ctx, o.URL, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != o.SHA256 || int64(len(data)) != o.SizeBytes || n != o.SizeBytes {
			t.Fatalf("output %d: sha/size mismatch (len %d, n %d, %+v)", i, len(data), n, o)
		}
		if o.ContentType != "image/png" {
			t.Errorf("content type %q", o.ContentType)
		}
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil || img.Bounds().Dx() != 8 {
			t.Fatalf("output %d is not an 8x8 PNG: %v", i, err)
		}
	}
	mu.Lock()
	for _, a := range fileAuth {
		if a != "" {
			t.Errorf("download sent Authorization %q", a)
		}
	}
	mu.Unlock()

	// Past the TTL the URL is refused with 410 -> ErrURLExpired.
	clk.Advance(16 * time.Minute)
	_, _, err = c.Download(ctx, j.Outputs[0].URL, 5*time.Second)
	var ae *genace.APIError
	if !errors.Is(err, genace.ErrURLExpired) || !errors.As(err, &ae) || ae.StatusCode != http.StatusGone || genace.Retryable(err) {
		t.Fatalf("expired: %v", err)
	}
	// A fresh GET re-signs the same bytes.
	j2, err := c.Get(ctx, j.ID, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if j2.Outputs[0].URL.Reveal() == j.Outputs[0].URL.Reveal() || j2.Outputs[0].SHA256 != j.Outputs[0].SHA256 {
		t.Fatal("GET did not re-sign the output URL")
	}
	rc, _, err := c.Download(ctx, j2.Outputs[0].URL, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()

	// A tampered signature is refused with 403 -> ErrURLExpired.
	bad := genace.SignedURL(strings.Replace(j2.Outputs[0].URL.Reveal(), "sig=", "sig=00", 1))
	_, _, err = c.Download(ctx, bad, 5*time.Second)
	if !errors.Is(err, genace.ErrURLExpired) || !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden ||
		errors.Is(err, genace.ErrUnauthorized) || genace.Retryable(err) {
		// A signed URL's 403 is the URL's, never our key's.
		t.Fatalf("tampered: %v", err)
	}
	if n := sim.FileGets(); n != 5 {
		t.Errorf("file gets = %d, want 5", n)
	}
}

func TestDownloadStreamsWithoutBuffering(t *testing.T) {
	t.Parallel()
	// A body larger than MaxBodyBytes must stream through untouched.
	const size = 3 * genace.MaxBodyBytes
	srv := newRawServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		chunk := bytes.Repeat([]byte{'x'}, 64<<10)
		for sent := 0; sent < size; sent += len(chunk) {
			w.Write(chunk)
		}
	})
	c, _ := genace.New(srv, testKey, nil)
	rc, _, err := c.Download(context.Background(), genace.SignedURL(srv+"/files/j/0?sig=abc"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	n, err := io.Copy(io.Discard, rc)
	if err != nil || n != size {
		t.Fatalf("copied %d, err %v", n, err)
	}
}
