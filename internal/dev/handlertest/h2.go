package handlertest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// H2Server speaks just enough raw HTTP/2, over real TLS with ALPN h2, to
// do what Go's own HTTP/2 server cannot: reset a stream with
// REFUSED_STREAM or PROTOCOL_ERROR, or send a GOAWAY naming no processed
// stream, after the whole request body arrived. Those are exactly the
// answers net/http's HTTP/2 transport retries a request after
// (h2_bundle.go: http2canRetryError, http2shouldRetryRequest), body and
// all if Request.GetBody can rewind it. It answers nothing else of the
// protocol than a client needs to get there; the frames are x/net/http2's.
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

// H2Request is one complete request as the server saw it.
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
	H2ProtocolError = uint32(http2.ErrCodeProtocol)
	H2RefusedStream = uint32(http2.ErrCodeRefusedStream)
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

// serve runs one connection until the client closes it, reading and
// writing frames with x/net/http2's Framer.
func (s *H2Server) serve(t testing.TB, c *tls.Conn) {
	defer c.Close()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	if fr.WriteSettings() != nil {
		return
	}
	requests := map[uint32]*H2Request{}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		id := f.Header().StreamID
		var done *H2Request
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				err = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				err = fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			requests[id] = &H2Request{Method: f.PseudoValue("method")}
			if f.StreamEnded() {
				done = requests[id]
			}
		case *http2.DataFrame:
			if r := requests[id]; r != nil {
				r.Body = append(r.Body, f.Data()...)
				if f.StreamEnded() {
					done = r
				}
			}
		}
		if err != nil {
			t.Errorf("handlertest.H2Server: %v", err)
			return
		}
		if done == nil {
			continue
		}
		delete(requests, id)
		switch a := s.record(*done); {
		case a.Reset != 0:
			err = fr.WriteRSTStream(id, http2.ErrCode(a.Reset))
		case a.GoAway:
			// Last-Stream-ID 0 and NO_ERROR: "no stream was processed", so
			// the client may retry every open stream on a new connection.
			err = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
		default:
			block.Reset()
			_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: strconv.Itoa(a.Status)})
			if err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}); err == nil {
				err = fr.WriteData(id, true, a.Body)
			}
		}
		if err != nil {
			return
		}
	}
}
