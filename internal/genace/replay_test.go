package genace_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/genace"
)

// These tests prove at the transport boundary that no layer below Submit
// re-sends a POST: Go's HTTP/2 transport retries a request whose stream
// the peer refused (REFUSED_STREAM, PROTOCOL_ERROR) or that a GOAWAY
// cut off, with the body rewound by Request.GetBody
// (net/http h2_bundle.go, http2shouldRetryRequest/http2canRetryError).
// Go's own HTTP/2 server cannot send those codes after reading a body, so
// the server here speaks just enough raw HTTP/2 over real TLS with ALPN h2.

// h2Request is one complete request as the raw server saw it. The method
// is told by framing alone (no HPACK decoding needed): a GET ends its
// stream on HEADERS, a POST carries DATA.
type h2Request struct {
	Method string // "GET" or "POST"
	Body   []byte
}

// h2Answer is what the raw server does with a complete request: reset the
// stream with Reset (non-zero), send GOAWAY naming no processed stream,
// or answer Status with Body.
type h2Answer struct {
	Reset  uint32
	GoAway bool
	Status int
	Body   []byte
}

// HTTP/2 error codes (RFC 9113 section 7).
const (
	h2Protocol      uint32 = 0x1
	h2RefusedStream uint32 = 0x7
)

// h2Server counts complete requests and answers the n-th (1-based) as
// answer says.
type h2Server struct {
	URL    string
	Client *http.Client // http.DefaultTransport's settings, trusting the test cert

	mu     sync.Mutex
	seen   []h2Request
	answer func(n int, r h2Request) h2Answer
}

func newH2Server(t *testing.T, answer func(n int, r h2Request) h2Answer) *h2Server {
	t.Helper()
	s := &h2Server{answer: answer}
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.EnableHTTP2 = true
	srv.Config.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){
		"h2": func(_ *http.Server, c *tls.Conn, _ http.Handler) { s.serve(t, c) },
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	s.URL = srv.URL

	// The production client runs on http.DefaultTransport
	// (ForceAttemptHTTP2); clone it so the test exercises its settings.
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	t.Cleanup(tr.CloseIdleConnections)
	s.Client = &http.Client{Transport: tr}
	return s
}

// count returns how many complete requests of method arrived.
func (s *h2Server) count(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.seen {
		if r.Method == method {
			n++
		}
	}
	return n
}

func (s *h2Server) record(r h2Request) h2Answer {
	s.mu.Lock()
	s.seen = append(s.seen, r)
	n := len(s.seen)
	s.mu.Unlock()
	return s.answer(n, r)
}

// Frame types and flags used below.
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePing         = 0x6
	frameGoAway       = 0x7
	flagEndStream     = 0x1
	flagAck           = 0x1
	flagEndHeaders    = 0x4
	clientPrefaceText = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

func writeFrame(w io.Writer, typ, flags byte, stream uint32, payload []byte) error {
	hdr := make([]byte, 9, 9+len(payload))
	hdr[0], hdr[1], hdr[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	hdr[3], hdr[4] = typ, flags
	binary.BigEndian.PutUint32(hdr[5:], stream&0x7fffffff)
	_, err := w.Write(append(hdr, payload...))
	return err
}

// serve runs one connection until the client closes it.
func (s *h2Server) serve(t *testing.T, c *tls.Conn) {
	defer c.Close()
	preface := make([]byte, len(clientPrefaceText))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != clientPrefaceText {
		return
	}
	var wmu sync.Mutex
	write := func(typ, flags byte, stream uint32, payload []byte) {
		wmu.Lock()
		defer wmu.Unlock()
		_ = writeFrame(c, typ, flags, stream, payload)
	}
	write(frameSettings, 0, 0, nil)
	bodies := map[uint32]*bytes.Buffer{}
	hdr := make([]byte, 9)
	for {
		if _, err := io.ReadFull(c, hdr); err != nil {
			return
		}
		n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		typ, flags := hdr[3], hdr[4]
		stream := binary.BigEndian.Uint32(hdr[5:]) & 0x7fffffff
		payload := make([]byte, n)
		if _, err := io.ReadFull(c, payload); err != nil {
			return
		}
		var done *h2Request
		switch typ {
		case frameSettings:
			if flags&flagAck == 0 {
				write(frameSettings, flagAck, 0, nil)
			}
		case framePing:
			if flags&flagAck == 0 {
				write(framePing, flagAck, 0, payload)
			}
		case frameHeaders:
			if flags&flagEndHeaders == 0 {
				t.Error("raw h2 server: CONTINUATION frames are not supported")
				return
			}
			bodies[stream] = &bytes.Buffer{}
			if flags&flagEndStream != 0 {
				done = &h2Request{Method: http.MethodGet}
			}
		case frameData:
			b := bodies[stream]
			if b == nil {
				continue
			}
			b.Write(payload)
			if flags&flagEndStream != 0 {
				done = &h2Request{Method: http.MethodPost, Body: b.Bytes()}
			}
		}
		if done == nil {
			continue
		}
		delete(bodies, stream)
		a := s.record(*done)
		switch {
		case a.Reset != 0:
			code := make([]byte, 4)
			binary.BigEndian.PutUint32(code, a.Reset)
			write(frameRSTStream, 0, stream, code)
		case a.GoAway:
			// Last-Stream-ID 0: "no stream was processed", so the client
			// may retry every open stream on a new connection.
			write(frameGoAway, 0, 0, make([]byte, 8))
		default:
			// HPACK: literal ":status" (static index 8) without indexing.
			st := strconv.Itoa(a.Status)
			write(frameHeaders, flagEndHeaders, stream, append([]byte{0x08, byte(len(st))}, st...))
			write(frameData, flagEndStream, stream, a.Body)
		}
	}
}

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
		cut  h2Answer
	}{
		{"RST_STREAM REFUSED_STREAM", h2Answer{Reset: h2RefusedStream}},
		{"RST_STREAM PROTOCOL_ERROR", h2Answer{Reset: h2Protocol}},
		{"GOAWAY last stream 0", h2Answer{GoAway: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newH2Server(t, func(n int, r h2Request) h2Answer {
				if n == 1 {
					return tc.cut
				}
				return h2Answer{Status: http.StatusAccepted, Body: jobBody("job_replayed")}
			})
			c, err := genace.New(srv.URL, testKey, srv.Client)
			if err != nil {
				t.Fatal(err)
			}
			res := c.Submit(context.Background(), genace.SubmitRequest{OperationID: "op-h2", Model: "flux-pro-2", Input: []byte(`{"prompt":"a cat"}`)}, 10*time.Second)
			if n := srv.count(http.MethodPost); n != 1 {
				t.Fatalf("Genace received %d POSTs, want exactly 1 (outcome %s, job %q)", n, res.Outcome, res.JobID)
			}
			if res.Outcome != genace.OutcomeUnknown || !res.RequestSent || res.JobID != "" {
				t.Fatalf("got outcome %s, RequestSent %v, job %q; want unknown, sent, no job (err %v)", res.Outcome, res.RequestSent, res.JobID, res.Err)
			}
			srv.mu.Lock()
			body := string(srv.seen[0].Body)
			srv.mu.Unlock()
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
	srv := newH2Server(t, func(n int, r h2Request) h2Answer {
		if n == 1 {
			return h2Answer{Reset: h2RefusedStream}
		}
		return h2Answer{Status: http.StatusOK, Body: jobBody("job_get")}
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
	if n := srv.count(http.MethodGet); n != 2 {
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
	if _, err := c.Get(context.Background(), "job_warm", 0, 5*time.Second); !errors.Is(err, genace.ErrNotFound) {
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
