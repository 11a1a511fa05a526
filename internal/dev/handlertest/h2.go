package handlertest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
)

// H2Server speaks just enough raw HTTP/2, over real TLS with ALPN h2, to
// do what Go's own HTTP/2 server cannot: reset a stream with
// REFUSED_STREAM or PROTOCOL_ERROR, or send a GOAWAY naming no processed
// stream, after the whole request body arrived. Those are exactly the
// answers net/http's HTTP/2 transport retries a request after
// (h2_bundle.go: http2canRetryError, http2shouldRetryRequest), body and
// all if Request.GetBody can rewind it. It answers nothing else of the
// protocol than a client needs to get there.
type H2Server struct {
	// URL is the server's https base URL.
	URL string
	// Client uses a clone of http.DefaultTransport, as production does,
	// trusting the server's certificate.
	Client *http.Client

	mu     sync.Mutex
	seen   []H2Request
	answer func(n int, r H2Request) H2Answer
}

// H2Request is one complete request as the server saw it. The method is
// told by framing alone (no HPACK decoding): a request that ends its
// stream on HEADERS is a GET, one that carries DATA a POST.
type H2Request struct {
	Method string
	Body   []byte
}

// H2Answer is what the server does with a complete request: reset the
// stream with Reset (non-zero), send GOAWAY with last stream id 0, or
// answer Status with Body.
type H2Answer struct {
	Reset  uint32
	GoAway bool
	Status int
	Body   []byte
}

// HTTP/2 error codes (RFC 9113 section 7) the transport retries after.
const (
	H2ProtocolError uint32 = 0x1
	H2RefusedStream uint32 = 0x7
)

// NewH2Server starts a server that answers the n-th (1-based) complete
// request as answer says.
func NewH2Server(t testing.TB, answer func(n int, r H2Request) H2Answer) *H2Server {
	t.Helper()
	s := &H2Server{answer: answer}
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.EnableHTTP2 = true
	// An "h2" entry in TLSNextProto replaces the bundled HTTP/2 server.
	srv.Config.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){
		"h2": func(_ *http.Server, c *tls.Conn, _ http.Handler) { s.serve(t, c) },
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	t.Cleanup(tr.CloseIdleConnections)
	s.Client = &http.Client{Transport: tr}
	return s
}

// Requests returns the complete requests seen so far.
func (s *H2Server) Requests() []H2Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]H2Request(nil), s.seen...)
}

// Count returns how many complete requests of method arrived.
func (s *H2Server) Count(method string) int {
	n := 0
	for _, r := range s.Requests() {
		if r.Method == method {
			n++
		}
	}
	return n
}

func (s *H2Server) record(r H2Request) H2Answer {
	s.mu.Lock()
	s.seen = append(s.seen, r)
	n := len(s.seen)
	s.mu.Unlock()
	return s.answer(n, r)
}

// Frame types and flags used (RFC 9113 section 6).
const (
	h2Data          = 0x0
	h2Headers       = 0x1
	h2RSTStream     = 0x3
	h2Settings      = 0x4
	h2Ping          = 0x6
	h2GoAway        = 0x7
	h2FlagEndStream = 0x1
	h2FlagAck       = 0x1
	h2FlagEndHeader = 0x4
	h2Preface       = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

// serve runs one connection until the client closes it.
func (s *H2Server) serve(t testing.TB, c *tls.Conn) {
	defer c.Close()
	preface := make([]byte, len(h2Preface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != h2Preface {
		return
	}
	var wmu sync.Mutex
	write := func(typ, flags byte, stream uint32, payload []byte) {
		wmu.Lock()
		defer wmu.Unlock()
		frame := make([]byte, 9, 9+len(payload))
		frame[0], frame[1], frame[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
		frame[3], frame[4] = typ, flags
		binary.BigEndian.PutUint32(frame[5:], stream&0x7fffffff)
		_, _ = c.Write(append(frame, payload...))
	}
	write(h2Settings, 0, 0, nil)
	bodies := map[uint32]*bytes.Buffer{}
	hdr := make([]byte, 9)
	for {
		if _, err := io.ReadFull(c, hdr); err != nil {
			return
		}
		typ, flags := hdr[3], hdr[4]
		stream := binary.BigEndian.Uint32(hdr[5:]) & 0x7fffffff
		payload := make([]byte, int(hdr[0])<<16|int(hdr[1])<<8|int(hdr[2]))
		if _, err := io.ReadFull(c, payload); err != nil {
			return
		}
		var done *H2Request
		switch typ {
		case h2Settings:
			if flags&h2FlagAck == 0 {
				write(h2Settings, h2FlagAck, 0, nil)
			}
		case h2Ping:
			if flags&h2FlagAck == 0 {
				write(h2Ping, h2FlagAck, 0, payload)
			}
		case h2Headers:
			if flags&h2FlagEndHeader == 0 {
				t.Error("handlertest.H2Server: CONTINUATION frames are not supported")
				return
			}
			bodies[stream] = &bytes.Buffer{}
			if flags&h2FlagEndStream != 0 {
				done = &H2Request{Method: http.MethodGet}
			}
		case h2Data:
			if b := bodies[stream]; b != nil {
				b.Write(payload)
				if flags&h2FlagEndStream != 0 {
					done = &H2Request{Method: http.MethodPost, Body: b.Bytes()}
				}
			}
		}
		if done == nil {
			continue
		}
		delete(bodies, stream)
		switch a := s.record(*done); {
		case a.Reset != 0:
			write(h2RSTStream, 0, stream, binary.BigEndian.AppendUint32(nil, a.Reset))
		case a.GoAway:
			// Last-Stream-ID 0 and NO_ERROR: "no stream was processed", so
			// the client may retry every open stream on a new connection.
			write(h2GoAway, 0, 0, make([]byte, 8))
		default:
			// HPACK: ":status" as a literal without indexing, name from
			// static table index 8.
			st := strconv.Itoa(a.Status)
			write(h2Headers, h2FlagEndHeader, stream, append([]byte{0x08, byte(len(st))}, st...))
			write(h2Data, h2FlagEndStream, stream, a.Body)
		}
	}
}
