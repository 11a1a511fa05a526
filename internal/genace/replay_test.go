package genace_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/genace"
)

// These tests prove at the transport boundary that no layer below Submit
// re-sends a POST. handlertest.H2Server resets streams the way Go's
// HTTP/2 transport would retry after (REFUSED_STREAM, PROTOCOL_ERROR from
// the peer, GOAWAY), which Go's own server cannot do after reading a body.

// jobBody is a contract-valid job object.
func jobBody(id string) []byte {
	return []byte(`{"id":"` + id + `","model":"flux-pro-2","state":"queued","submission_failure":false,` +
		`"created_at":"2026-11-29T08:00:00Z","updated_at":"2026-11-29T08:00:00Z","started_at":null,` +
		`"finished_at":null,"progress":0,"outputs":null,"error":null,` +
		`"credits":{"reserved":12,"charged":0,"refunded":0,"refund_state":"none"},"metadata":{"operation_id":"op-h2"}}`)
}

// TestSubmitNeverReplayedByHTTP2 resets the stream after the whole POST
// body arrived, with each reason the HTTP/2 transport would retry for,
// and answers any second POST with a 202: a replay would show up as two
// POSTs and an accepted outcome.
func TestSubmitNeverReplayedByHTTP2(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cut  handlertest.H2Answer
	}{
		{"RST_STREAM REFUSED_STREAM", handlertest.H2Answer{Reset: handlertest.H2RefusedStream}},
		{"RST_STREAM PROTOCOL_ERROR", handlertest.H2Answer{Reset: handlertest.H2ProtocolError}},
		{"GOAWAY last stream 0", handlertest.H2Answer{GoAway: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := handlertest.NewH2Server(t, func(n int, r handlertest.H2Request) handlertest.H2Answer {
				if n == 1 {
					return tc.cut
				}
				return handlertest.H2Answer{Status: http.StatusAccepted, Body: jobBody("job_replayed")}
			})
			c, err := genace.New(srv.URL, testKey, srv.Client)
			if err != nil {
				t.Fatal(err)
			}
			res := c.Submit(context.Background(), genace.SubmitRequest{OperationID: "op-h2", Model: "flux-pro-2", Input: []byte(`{"prompt":"a cat"}`)}, 10*time.Second)
			if n := srv.Count(http.MethodPost); n != 1 {
				t.Fatalf("Genace received %d POSTs, want exactly 1 (outcome %s, job %q)", n, res.Outcome, res.JobID)
			}
			if res.Outcome != genace.OutcomeUnknown || !res.RequestSent || res.JobID != "" {
				t.Fatalf("got outcome %s, RequestSent %v, job %q; want unknown, sent, no job (err %v)", res.Outcome, res.RequestSent, res.JobID, res.Err)
			}
			body := string(srv.Requests()[0].Body)
			if !strings.Contains(body, `"operation_id":"op-h2"`) {
				t.Fatalf("the POST that arrived was not the whole body: %q", body)
			}
		})
	}
}

// TestGetStillRetriedByHTTP2 is the other half: a GET carries no body and
// stays retryable by the transport, which is safe and wanted.
func TestGetStillRetriedByHTTP2(t *testing.T) {
	t.Parallel()
	srv := handlertest.NewH2Server(t, func(n int, r handlertest.H2Request) handlertest.H2Answer {
		if n == 1 {
			return handlertest.H2Answer{Reset: handlertest.H2RefusedStream}
		}
		return handlertest.H2Answer{Status: http.StatusOK, Body: jobBody("job_get")}
	})
	c, err := genace.New(srv.URL, testKey, srv.Client)
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.Get(context.Background(), "job_get", 0, 10*time.Second)
	if err != nil {
		t.Fatalf("GET after a refused stream: %v", err)
	}
	if j.ID != "job_get" {
		t.Fatalf("job %q", j.ID)
	}
	if n := srv.Count(http.MethodGet); n != 2 {
		t.Fatalf("server saw %d GETs, want 2 (the refused one and its retry)", n)
	}
}

// TestSubmitNeverReplayedByHTTP1 breaks a reused HTTP/1 connection after
// the POST body was read: the HTTP/1 transport must not retry it either.
func TestSubmitNeverReplayedByHTTP1(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_, _ = io.ReadAll(r.Body)
		mu.Lock()
		posts++
		mu.Unlock()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	}))
	t.Cleanup(srv.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := genace.New(srv.URL, testKey, &http.Client{Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	// A GET first, so the POST goes out on a reused keep-alive connection:
	// the only kind the HTTP/1 transport ever retries on.
	var ae *genace.APIError
	if _, err := c.Get(context.Background(), "job_warm", 0, 5*time.Second); !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound {
		t.Fatalf("warm-up GET: %v", err)
	}
	res := c.Submit(context.Background(), req("op-h1"), 5*time.Second)
	mu.Lock()
	n := posts
	mu.Unlock()
	if n != 1 || res.Outcome != genace.OutcomeUnknown || !res.RequestSent {
		t.Fatalf("POSTs %d, outcome %s, sent %v; want 1, unknown, sent", n, res.Outcome, res.RequestSent)
	}
}

// TestSubmitNeverFollowsRedirects: a followed 307/308 would re-send the
// POST body to the new location.
func TestSubmitNeverFollowsRedirects(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			hits := map[string]int{}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				mu.Lock()
				hits[r.Method+" "+r.URL.Path]++
				mu.Unlock()
				if r.URL.Path == "/api/v1/jobs" {
					http.Redirect(w, r, "/elsewhere", status)
					return
				}
				w.WriteHeader(http.StatusAccepted)
				_, _ = w.Write(jobBody("job_redirected"))
			}))
			t.Cleanup(srv.Close)
			tr := &http.Transport{}
			t.Cleanup(tr.CloseIdleConnections)
			// A caller's client that would follow redirects: New must not
			// let it do so for the API.
			c, err := genace.New(srv.URL, testKey, &http.Client{Transport: tr})
			if err != nil {
				t.Fatal(err)
			}
			res := c.Submit(context.Background(), req("op-redirect"), 5*time.Second)
			mu.Lock()
			defer mu.Unlock()
			if len(hits) != 1 || hits["POST /api/v1/jobs"] != 1 {
				t.Fatalf("requests %v, want exactly one POST /api/v1/jobs", hits)
			}
			if res.Outcome != genace.OutcomeUnknown || res.StatusCode != status {
				t.Fatalf("outcome %s status %d, want unknown %d", res.Outcome, res.StatusCode, status)
			}
		})
	}
}
