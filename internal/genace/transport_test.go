package genace

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Polls held at once, round after round, reuse their connections: with
// Go's default of 2 idle connections per host, each round dialled again
// for all but two of them.
func TestTransportKeepsAConnectionPerHeldPoll(t *testing.T) {
	t.Parallel()
	var dials atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond) // held, as a long poll
		w.Write([]byte("{}"))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	const held, rounds = 40, 3
	for _, tc := range []struct {
		name      string
		transport *http.Transport
		most      int64
	}{
		{"Transport(held)", Transport(held), held},
		// The failure this guards against, shown: Go's default redials.
		{"DefaultTransport's settings", http.DefaultTransport.(*http.Transport).Clone(), 1 << 30},
	} {
		dials.Store(0)
		c := &http.Client{Transport: tc.transport}
		for range rounds {
			var wg sync.WaitGroup
			for range held {
				wg.Go(func() {
					resp, err := c.Get(srv.URL)
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body) // as the client reads it
					resp.Body.Close()
				})
			}
			wg.Wait()
		}
		tc.transport.CloseIdleConnections()
		if got := dials.Load(); got > tc.most {
			t.Errorf("%s: %d connections for %d rounds of %d held polls, want at most %d", tc.name, got, rounds, held, tc.most)
		}
		if tc.most > held && dials.Load() <= held {
			t.Errorf("%s: %d connections; the default was expected to redial", tc.name, dials.Load())
		}
	}
}
