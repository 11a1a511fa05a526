package faultsim

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"

	"golang.org/x/net/http2"

	"github.com/genjobs/genjobs/internal/dev/genacesim"
)

// The Genace client reaches the simulator over HTTP/2 over TLS, through
// Go's own transport. Between them sits relay, a proxy that passes HTTP/2
// frames through unchanged, except that it replaces the answer to a POST
// that H2Reset picked by a stream reset after Genace has created the job,
// so the fault meets the real transport's retry rules, not a model of
// them. The relay never decodes headers: to drop an answer's header block
// without breaking header compression, it sets the client's
// SETTINGS_HEADER_TABLE_SIZE to 0, so every block the server sends
// stands alone.

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
	c := &h2conn{relay: r, fromIn: newFramer(nil, in), toIn: newFramer(in, nil), fromOut: newFramer(nil, out), toOut: newFramer(out, nil),
		posts: map[uint32]*h2post{}, dropped: map[uint32]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.fromServer()
		_ = in.Close()
	}()
	c.fromClient(in, out)
	_ = out.Close()
	<-done
}

// h2conn is one relayed connection. Frames are read and written with
// x/net/http2's Framer: one per direction and end, since a Framer is
// not safe for concurrent use.
type h2conn struct {
	relay          *relay
	fromIn, toIn   *http2.Framer
	fromOut, toOut *http2.Framer
	outMu          sync.Mutex // both directions write to the server

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

// newFramer reads and writes frames of any size a peer may announce.
func newFramer(w io.Writer, r io.Reader) *http2.Framer {
	f := http2.NewFramer(w, r)
	f.SetMaxReadFrameSize(1<<24 - 1)
	return f
}

// forward writes f to w unchanged (a DATA frame's padding aside, which
// Go's transport never sends).
func forward(w *http2.Framer, f http2.Frame) error {
	h := f.Header()
	switch f := f.(type) {
	case *http2.DataFrame:
		return w.WriteData(h.StreamID, f.StreamEnded(), f.Data())
	case *http2.HeadersFrame:
		return w.WriteHeaders(http2.HeadersFrameParam{StreamID: h.StreamID, BlockFragment: f.HeaderBlockFragment(),
			EndStream: f.StreamEnded(), EndHeaders: f.HeadersEnded(), Priority: f.Priority})
	case *http2.ContinuationFrame:
		return w.WriteContinuation(h.StreamID, f.HeadersEnded(), f.HeaderBlockFragment())
	case *http2.SettingsFrame:
		if f.IsAck() {
			return w.WriteSettingsAck()
		}
		var settings []http2.Setting
		_ = f.ForeachSetting(func(s http2.Setting) error { settings = append(settings, s); return nil })
		return w.WriteSettings(settings...)
	case *http2.WindowUpdateFrame:
		return w.WriteWindowUpdate(h.StreamID, f.Increment)
	case *http2.PingFrame:
		return w.WritePing(f.IsAck(), f.Data)
	case *http2.RSTStreamFrame:
		return w.WriteRSTStream(h.StreamID, f.ErrCode)
	case *http2.GoAwayFrame:
		return w.WriteGoAway(f.LastStreamID, f.ErrCode, f.DebugData())
	case *http2.PriorityFrame:
		return w.WritePriority(h.StreamID, f.PriorityParam)
	case *http2.UnknownFrame:
		return w.WriteRawFrame(h.Type, h.Flags, h.StreamID, f.Payload())
	}
	return fmt.Errorf("relay: cannot forward %v", h)
}

func (c *h2conn) toServer(f http2.Frame) error {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	return forward(c.toOut, f)
}

// fromClient passes the client's frames to the server, asking the server
// to index no headers and noting each request body's operation.
func (c *h2conn) fromClient(in, out net.Conn) {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(in, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	if _, err := out.Write(preface); err != nil {
		return
	}
	for {
		f, err := c.fromIn.ReadFrame()
		if err != nil {
			return
		}
		stream := f.Header().StreamID
		switch fr := f.(type) {
		case *http2.SettingsFrame:
			if !fr.IsAck() {
				if c.noHeaderTable(fr) != nil {
					return
				}
				continue
			}
		case *http2.HeadersFrame:
			if !fr.StreamEnded() {
				c.mu.Lock()
				c.posts[stream] = &h2post{}
				c.mu.Unlock()
			}
		case *http2.DataFrame:
			c.mu.Lock()
			if p := c.posts[stream]; p != nil && !p.done {
				p.body = append(p.body, fr.Data()...)
				if fr.StreamEnded() {
					// Noted before the frame reaches the server, so the
					// answer, which can only follow, finds it.
					p.done, p.op, p.body = true, genacesim.OperationID(p.body), nil
				}
			}
			c.mu.Unlock()
		}
		if c.toServer(f) != nil {
			return
		}
	}
}

// noHeaderTable passes the client's SETTINGS on with
// SETTINGS_HEADER_TABLE_SIZE set to 0.
func (c *h2conn) noHeaderTable(f *http2.SettingsFrame) error {
	var settings []http2.Setting
	_ = f.ForeachSetting(func(s http2.Setting) error {
		if s.ID != http2.SettingHeaderTableSize {
			settings = append(settings, s)
		}
		return nil
	})
	settings = append(settings, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
	c.outMu.Lock()
	defer c.outMu.Unlock()
	return c.toOut.WriteSettings(settings...)
}

// fromServer passes the server's frames to the client, except the answer
// to a POST the wire ordered reset: its frames are swallowed (the
// server's connection window given back) and the client gets RST_STREAM.
func (c *h2conn) fromServer() {
	for {
		f, err := c.fromOut.ReadFrame()
		if err != nil {
			return
		}
		h := f.Header()
		stream := h.StreamID
		_, isHeaders := f.(*http2.HeadersFrame)
		_, isReset := f.(*http2.RSTStreamFrame)
		_, isData := f.(*http2.DataFrame)
		c.mu.Lock()
		drop := c.dropped[stream]
		if isHeaders && !drop {
			if p := c.posts[stream]; p != nil && p.done {
				if code, ok := c.relay.wire.takeReset(p.op); ok {
					c.dropped[stream] = true
					delete(c.posts, stream)
					c.mu.Unlock()
					if c.toIn.WriteRSTStream(stream, http2.ErrCode(code)) != nil {
						return
					}
					continue
				}
			}
		}
		if isHeaders || isReset {
			delete(c.posts, stream)
		}
		if drop && (h.Flags.Has(http2.FlagDataEndStream) && (isData || isHeaders) || isReset) {
			delete(c.dropped, stream)
		}
		c.mu.Unlock()
		if drop {
			if isData && h.Length > 0 {
				// The client never sees these bytes, so it never gives the
				// server its window back for them: the relay does.
				c.outMu.Lock()
				err := c.toOut.WriteWindowUpdate(0, h.Length)
				c.outMu.Unlock()
				if err != nil {
					return
				}
			}
			continue // the rest of the swallowed answer (or the server's reset of it)
		}
		if forward(c.toIn, f) != nil {
			return
		}
	}
}
