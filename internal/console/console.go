// Package console is `genjobs console`: a web page on the operator's
// machine over the store the operator commands open, showing the open
// reviews, one operation's history and its plan, and carrying out the one
// allowed replay through a form. It decides nothing on its own: every
// plan and every replay is internal/replay's, as on the command line.
//
// It is operator tooling and never linked by a deployed function
// (functions/deps_test.go checks that). Its server is the standard
// library's: no script runs on its pages, and a state change is a POST
// that carries the session's CSRF token from a page of the console's own
// origin.
package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/replay"
	"github.com/genjobs/genjobs/internal/review"
)

// Store is what the console reads beyond what replay needs: the open
// reviews (store.Store is one).
type Store interface {
	replay.Store
	OpenReviews(ctx context.Context) ([]review.Record, error)
}

// Config is what a console serves.
type Config struct {
	// Store is the store the operator's flags name, opened for writing.
	Store Store
	// Replayer plans and replays on Store; its Genace and Sender are the
	// command line's (nil Genace: a job id cannot be verified, so the
	// console, which offers no override, refuses to attach one).
	Replayer *replay.Replayer
	// Clock tells the age of reviews.
	Clock clock.Clock
	// Hosts are the host:port values the console answers to (the Host
	// header): a page served under another name, as a DNS-rebinding
	// attack would have it, is refused. Empty: any host.
	Hosts []string
	// Secrets are values no page may show (the Genace API key): an error
	// text that carried one has it replaced before it is drawn.
	Secrets []string
	// ScheduledHint tells the operator how a follow-up scheduled on the
	// record (no queue to send it) gets carried out, e.g. "genjobs local
	// --resume" for a local run.
	ScheduledHint string
	// AfterReplay runs after each replay that reached the store (the
	// command saves the local run's simulator with what a lookup changed).
	AfterReplay func()
}

// Server is the console's http.Handler.
type Server struct {
	cfg   Config
	key   []byte // signs CSRF tokens; new with each console
	pages *template.Template
	mux   *http.ServeMux
}

//go:embed templates/*.html static/console.css
var assets embed.FS

// sessionCookie names the browser's session; the CSRF token is derived
// from it, so each session has its own.
const sessionCookie = "genjobs_console_session"

// New builds a console.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Replayer == nil || cfg.Clock == nil {
		return nil, errors.New("console: Store, Replayer and Clock are required")
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	pages, err := template.New("").Funcs(funcs).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console templates: %w", err)
	}
	s := &Server{cfg: cfg, key: key, pages: pages, mux: http.NewServeMux()}
	static, _ := fs.Sub(assets, "static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/reviews", http.StatusSeeOther) })
	s.mux.HandleFunc("GET /reviews", s.reviews)
	s.mux.HandleFunc("GET /op/{id}", s.operation)
	s.mux.HandleFunc("POST /op/{id}/replay", s.replay)
	return s, nil
}

// ServeHTTP checks the Host, sets the headers every answer carries and
// the session, and refuses a state change that is not the console's own.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.hostAllowed(r.Host) {
		http.Error(w, "console: unknown host "+r.Host, http.StatusMisdirectedRequest)
		return
	}
	h := w.Header()
	// No script, no frame, no form posting elsewhere, no referrer elsewhere.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	// same-origin, not no-referrer: under no-referrer Chromium sends
	// "Origin: null" with the console's own form posts.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if why := s.refuse(r); why != "" {
			http.Error(w, "console: refused: "+why+"; nothing was changed", http.StatusForbidden)
			return
		}
	} else if _, ok := s.session(r); !ok {
		s.newSession(w, r)
	}
	s.mux.ServeHTTP(w, r)
}

func (s *Server) hostAllowed(host string) bool {
	if len(s.cfg.Hosts) == 0 {
		return true
	}
	for _, h := range s.cfg.Hosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

// refuse says why a state-changing request is not the console's own ("" if
// it is): it must come from a page of this origin, in a session, with that
// session's token.
func (s *Server) refuse(r *http.Request) string {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return "no Origin header"
	}
	if origin != "http://"+r.Host {
		return "Origin " + origin + " is not this console"
	}
	id, ok := s.session(r)
	if !ok {
		return "no console session"
	}
	if err := r.ParseForm(); err != nil {
		return "unreadable form"
	}
	got := r.PostForm.Get("csrf")
	if got == "" {
		return "no CSRF token"
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(s.token(id))) != 1 {
		return "wrong CSRF token"
	}
	return ""
}

func (s *Server) session(r *http.Request) (string, bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || len(c.Value) != 43 {
		return "", false
	}
	return c.Value, true
}

// newSession starts a session and puts it on r, so the page being drawn
// carries its token.
func (s *Server) newSession(w http.ResponseWriter, r *http.Request) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on a supported platform
	}
	c := &http.Cookie{Name: sessionCookie, Value: base64.RawURLEncoding.EncodeToString(b), Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode}
	http.SetCookie(w, c)
	r.AddCookie(c)
}

// token is the session's CSRF token: a MAC of its id under this console's
// key, so it is never stored and dies with the console.
func (s *Server) token(session string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("csrf\x00" + session))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// redact removes every configured secret from text shown on a page.
func (s *Server) redact(text string) string {
	for _, sec := range s.cfg.Secrets {
		if sec != "" {
			text = strings.ReplaceAll(text, sec, "[redacted]")
		}
	}
	return text
}

// Listen binds the console's address: loopback unless allowRemote. It
// returns the page's URL and, for an address beyond loopback, the warning
// to print.
func Listen(addr string, allowRemote bool) (ln net.Listener, url, warning string, err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, "", "", fmt.Errorf("--addr %q: %w", addr, err)
	}
	loopback := host == "localhost"
	if ip := net.ParseIP(host); ip != nil {
		loopback = ip.IsLoopback()
	}
	if !loopback {
		if !allowRemote {
			return nil, "", "", fmt.Errorf("--addr %s is reachable beyond this machine: the console replays operations for whoever reaches it; "+
				"pass --allow-remote to bind it anyway", addr)
		}
		warning = fmt.Sprintf("WARNING: the console listens on %s, beyond loopback: anyone who can reach it sees the reviews "+
			"and can replay operations (every replay names its operator, unverified). It has no login; keep it on a trusted network.", addr)
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		return nil, "", "", err
	}
	return ln, "http://" + ln.Addr().String() + "/", warning, nil
}

// Hosts are the Host values a console on ln answers to: its address and,
// on loopback, localhost at its port.
func Hosts(ln net.Listener) []string {
	a := ln.Addr().String()
	out := []string{a}
	if host, port, err := net.SplitHostPort(a); err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			out = append(out, net.JoinHostPort("localhost", port))
		}
	}
	return out
}

// Serve serves h on ln until ctx ends, then shuts it down.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx) // ends with the process either way
		<-done
		return nil
	}
}
