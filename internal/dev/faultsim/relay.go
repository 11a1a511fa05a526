package faultsim

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
)

// The Genace client reaches the simulator as production reaches Genace:
// HTTP/2 over TLS, through Go's own transport (a clone of
// http.DefaultTransport, which negotiates h2 by ALPN). Between them sits
// relay, a proxy that passes HTTP/2 frames through unchanged, except that
// it replaces the answer to a POST that H2Reset picked by a stream reset
// (REFUSED_STREAM or PROTOCOL_ERROR) after Genace has read the whole
// request and created the job. That is what a proxy or server in front of
// Genace does under load, and Go's HTTP/2 transport answers it by sending
// the request again (net/http h2_bundle.go, http2canRetryError and
// http2shouldRetryRequest): the fault meets the real transport's rules,
// not a model of them.
//
// The relay never decodes headers. To drop an answer's header block
// without breaking the connection's header compression, it asks the
// server to index nothing: it adds SETTINGS_HEADER_TABLE_SIZE = 0 to the
// client's settings, so every header block the server sends stands alone.

// HTTP/2 frame types, flags, settings and error codes the relay uses
// (RFC 9113).
const (
	h2Data         = 0x0
	h2Headers      = 0x1
	h2RSTStream    = 0x3
	h2Settings     = 0x4
	h2WindowUpdate = 0x8
	h2Continuation = 0x9

	h2FlagEndStream = 0x1
	h2FlagAck       = 0x1
	h2FlagPadded    = 0x8

	h2SettingHeaderTableSize = 0x1

	h2ErrProtocol      uint32 = 0x1
	h2ErrRefusedStream uint32 = 0x7
)

const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// relay is the HTTP/2 proxy in front of the simulator's TLS server.
type relay struct {
	wire    *wire
	backend string // the simulator's address
	tlsIn   *tls.Config
	tlsOut  *tls.Config
	ln      net.Listener
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]bool
	closed  bool
	// stopServer closes the client's idle connections and the server.
	stopServer func()
}

// startTLS serves h on an HTTPS server with HTTP/2 behind a relay, and
// returns the relay's base URL, a client trusting the server's
// certificate (on a clone of http.DefaultTransport) and a stop function.
func startTLS(h http.Handler, x *wire) (base string, client *http.Client, r *relay, err error) {
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	r = &relay{
		wire: x, backend: srv.Listener.Addr().String(), conns: map[net.Conn]bool{},
		tlsIn:  &tls.Config{Certificates: srv.TLS.Certificates, NextProtos: []string{"h2"}},
		tlsOut: &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}, ServerName: "127.0.0.1"},
	}
	r.ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		return "", nil, nil, err
	}
	r.wg.Add(1)
	go r.accept()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	r.stopServer = func() {
		tr.CloseIdleConnections()
		srv.Close()
	}
	return "https://" + r.ln.Addr().String(), &http.Client{Transport: tr}, r, nil
}

// close stops the relay, its connections and the server behind it.
func (r *relay) close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	_ = r.ln.Close()
	r.wg.Wait()
	r.stopServer()
}

func (r *relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		_ = c.Close()
		return false
	}
	r.conns[c] = true
	return true
}

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		if !r.track(c) {
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.serve(c)
		}()
	}
}

// serve relays one client connection to a connection of its own to the
// server.
func (r *relay) serve(raw net.Conn) {
	in := tls.Server(raw, r.tlsIn)
	defer in.Close()
	if err := in.Handshake(); err != nil || in.ConnectionState().NegotiatedProtocol != "h2" {
		return
	}
	out, err := tls.Dial("tcp", r.backend, r.tlsOut)
	if err != nil {
		return
	}
	if !r.track(out) {
		return
	}
	defer out.Close()
	c := &h2conn{relay: r, in: in, out: out, posts: map[uint32]*h2post{}, dropped: map[uint32]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.fromServer()
		_ = in.Close()
	}()
	c.fromClient()
	_ = out.Close()
	<-done
}

// h2conn is one relayed connection.
type h2conn struct {
	relay   *relay
	in, out net.Conn
	outMu   sync.Mutex // both directions write to the server

	mu      sync.Mutex
	posts   map[uint32]*h2post // request streams with a body, by stream id
	dropped map[uint32]bool    // streams whose answer the relay swallows
}

// h2post is a request stream with a body.
type h2post struct {
	body []byte
	op   string // metadata.operation_id once the body is complete
	done bool
}

func readFrame(r io.Reader) (hdr [9]byte, payload []byte, err error) {
	if _, err = io.ReadFull(r, hdr[:]); err != nil {
		return hdr, nil, err
	}
	n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
	payload = make([]byte, n)
	_, err = io.ReadFull(r, payload)
	return hdr, payload, err
}

func frame(typ, flags byte, stream uint32, payload []byte) []byte {
	b := make([]byte, 9, 9+len(payload))
	b[0], b[1], b[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	b[3], b[4] = typ, flags
	binary.BigEndian.PutUint32(b[5:], stream&0x7fffffff)
	return append(b, payload...)
}

func (c *h2conn) toServer(b []byte) error {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	_, err := c.out.Write(b)
	return err
}

// fromClient passes the client's frames to the server, asking the server
// to index no headers and noting each request body's operation.
func (c *h2conn) fromClient() {
	preface := make([]byte, len(h2Preface))
	if _, err := io.ReadFull(c.in, preface); err != nil || string(preface) != h2Preface {
		return
	}
	if c.toServer(preface) != nil {
		return
	}
	for {
		hdr, payload, err := readFrame(c.in)
		if err != nil {
			return
		}
		typ, flags, stream := hdr[3], hdr[4], binary.BigEndian.Uint32(hdr[5:])&0x7fffffff
		switch typ {
		case h2Settings:
			if flags&h2FlagAck == 0 {
				payload = noHeaderTable(payload)
			}
		case h2Headers:
			if flags&h2FlagEndStream == 0 {
				c.mu.Lock()
				c.posts[stream] = &h2post{}
				c.mu.Unlock()
			}
		case h2Data:
			c.mu.Lock()
			if p := c.posts[stream]; p != nil && !p.done {
				data := payload
				if flags&h2FlagPadded != 0 && len(data) > 0 {
					pad := int(data[0])
					data = data[1:]
					data = data[:max(0, len(data)-pad)]
				}
				p.body = append(p.body, data...)
				if flags&h2FlagEndStream != 0 {
					// Noted before the frame reaches the server, so the
					// answer, which can only follow, finds it.
					p.done, p.op, p.body = true, opOfPost(p.body), nil
				}
			}
			c.mu.Unlock()
		}
		if c.toServer(frame(typ, flags, stream, payload)) != nil {
			return
		}
	}
}

// noHeaderTable sets SETTINGS_HEADER_TABLE_SIZE to 0 in a SETTINGS
// payload.
func noHeaderTable(p []byte) []byte {
	out := make([]byte, 0, len(p)+6)
	for i := 0; i+6 <= len(p); i += 6 {
		if binary.BigEndian.Uint16(p[i:]) != h2SettingHeaderTableSize {
			out = append(out, p[i:i+6]...)
		}
	}
	return append(out, 0, h2SettingHeaderTableSize, 0, 0, 0, 0)
}

// fromServer passes the server's frames to the client, except the answer
// to a POST the wire ordered reset: its frames are swallowed (the
// server's connection window given back) and the client gets RST_STREAM.
func (c *h2conn) fromServer() {
	for {
		hdr, payload, err := readFrame(c.out)
		if err != nil {
			return
		}
		typ, flags, stream := hdr[3], hdr[4], binary.BigEndian.Uint32(hdr[5:])&0x7fffffff
		c.mu.Lock()
		drop := c.dropped[stream]
		if typ == h2Headers && !drop {
			if p := c.posts[stream]; p != nil && p.done {
				if code, ok := c.relay.wire.takeReset(p.op); ok {
					c.dropped[stream] = true
					delete(c.posts, stream)
					c.mu.Unlock()
					var b [4]byte
					binary.BigEndian.PutUint32(b[:], code)
					if _, err := c.in.Write(frame(h2RSTStream, 0, stream, b[:])); err != nil {
						return
					}
					continue
				}
			}
		}
		if typ == h2Headers || typ == h2RSTStream {
			delete(c.posts, stream)
		}
		if drop && (flags&h2FlagEndStream != 0 && (typ == h2Data || typ == h2Headers) || typ == h2RSTStream) {
			delete(c.dropped, stream)
		}
		c.mu.Unlock()
		if drop {
			if typ == h2Data && len(payload) > 0 {
				// The client never sees these bytes, so it never gives the
				// server its window back for them: the relay does.
				var inc [4]byte
				binary.BigEndian.PutUint32(inc[:], uint32(len(payload)))
				if c.toServer(frame(h2WindowUpdate, 0, 0, inc[:])) != nil {
					return
				}
			}
			continue // the rest of the swallowed answer (or the server's reset of it)
		}
		if _, err := c.in.Write(frame(typ, flags, stream, payload)); err != nil {
			return
		}
	}
}
