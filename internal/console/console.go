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
//
// Those defences stop browsers, not the other users and processes of the
// machine, which reach a loopback port as easily. So each launch makes a
// secret: the printed URL carries a one-time key that the first request
// exchanges for the session cookie, scoped to a path of its own, and
// every request, every route, must carry that cookie. Whoever lacks it is
// refused before any handler runs.
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
	"sync/atomic"
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
	// Operator is who every replay through this console is audited as:
	// the launch's, never a form's (replay.CheckOperator).
	Operator string
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
	cfg Config
	key []byte // signs CSRF tokens; new with each console
	// root is the path every page lives under, new with each console
	// ("/<random>/"): the session cookie is scoped to it, so the browser
	// sends it to no other server on this host, whatever its port.
	root string
	// launchKey is the one-time key the printed URL carries; launched
	// says it has been exchanged for the session.
	launchKey string
	launched  atomic.Bool
	// session is the session cookie's value: the one the launch key was
	// exchanged for, never printed.
	session string
	pages   *template.Template
	mux     *http.ServeMux
	// routes are what mux serves, each registered from here, so a test
	// can walk every one.
	routes []route
}

// route is one pattern the console serves.
type route struct {
	method, path string // path is a ServeMux path pattern
	handler      http.Handler
}

//go:embed templates/*.html static/console.css
var assets embed.FS

// sessionCookie names the browser's session, the one the launch key was
// exchanged for; the CSRF token is derived from it.
const sessionCookie = "genjobs_console_session"

// New builds a console.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Replayer == nil || cfg.Clock == nil {
		return nil, errors.New("console: Store, Replayer and Clock are required")
	}
	if err := replay.CheckOperator(cfg.Operator); err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	for _, sec := range cfg.Secrets {
		if sec != "" && strings.Contains(cfg.Operator, sec) {
			return nil, errors.New("console: the operator name contains a secret; it would be kept in the audit trail")
		}
	}
	s := &Server{cfg: cfg, key: randomBytes(32), root: "/" + randomText(12) + "/",
		launchKey: randomText(32), session: randomText(32), mux: http.NewServeMux()}
	pages, err := template.New("").Funcs(funcs).Funcs(template.FuncMap{
		"root":     func() string { return s.root },
		"operator": func() string { return s.cfg.Operator },
	}).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console templates: %w", err)
	}
	s.pages = pages
	static, _ := fs.Sub(assets, "static")
	s.routes = []route{
		{http.MethodGet, "static/", http.StripPrefix(s.root+"static/", http.FileServerFS(static))},
		{http.MethodGet, "{$}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, s.root+"reviews", http.StatusSeeOther)
		})},
		{http.MethodGet, "reviews", http.HandlerFunc(s.reviews)},
		{http.MethodGet, "op/{id}", http.HandlerFunc(s.operation)},
		{http.MethodPost, "op/{id}/replay", http.HandlerFunc(s.replay)},
	}
	for _, rt := range s.routes {
		s.mux.Handle(rt.method+" "+s.root+rt.path, rt.handler)
	}
	return s, nil
}

// randomBytes reads n bytes from crypto/rand, which does not fail on a
// supported platform.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b
}

// randomText is n random bytes, base64url: safe in a path, a query and a
// cookie.
func randomText(n int) string { return base64.RawURLEncoding.EncodeToString(randomBytes(n)) }

// LaunchURL is the URL to print on the operator's terminal: base (Listen's
// URL) with this console's root and its one-time launch key. It is the
// only place the key appears; it works once.
func (s *Server) LaunchURL(base string) string {
	return strings.TrimSuffix(base, "/") + s.root + "?" + launchParam + "=" + s.launchKey
}

// launchParam names the launch key in the printed URL's query.
const launchParam = "key"

// ServeHTTP checks the Host, sets the headers every answer carries,
// admits only the launch's session, and refuses a state change that is
// not the console's own.
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
	if !s.admit(w, r) {
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if why := s.refuse(r); why != "" {
			http.Error(w, "console: refused: "+why+"; nothing was changed", http.StatusForbidden)
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// admit lets through a request of the launch's session and answers every
// other itself: the launch key's one exchange for the session cookie (a
// redirect that drops the key from the address bar), 401 without a
// session, 403 with a wrong one or a spent key. Nothing it refuses
// reaches a handler.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) bool {
	deny := func(status int, why string) bool {
		http.Error(w, "console: "+why+"; nothing was changed", status)
		return false
	}
	q := r.URL.Query()
	// Only a GET spends the key: a HEAD (a link preview) must not.
	key, exchange := q.Get(launchParam), q.Has(launchParam) && r.Method == http.MethodGet
	session := s.hasSession(r)
	switch {
	case exchange && !session:
		if subtle.ConstantTimeCompare([]byte(key), []byte(s.launchKey)) != 1 {
			return deny(http.StatusForbidden, "wrong console key; open the URL genjobs console printed")
		}
		if !s.launched.CompareAndSwap(false, true) {
			return deny(http.StatusForbidden, "this console's URL was already used, by the browser holding its session; "+
				"to open it elsewhere, restart genjobs console (if that was not you, stop it now)")
		}
		http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.session, Path: s.root,
			HttpOnly: true, SameSite: http.SameSiteStrictMode})
		fallthrough
	case exchange:
		q.Del(launchParam)
		to := s.root
		if strings.HasPrefix(r.URL.Path, s.root) {
			to = r.URL.Path
		}
		if len(q) > 0 {
			to += "?" + q.Encode()
		}
		http.Redirect(w, r, to, http.StatusSeeOther)
		return false
	case session:
		return true
	case len(r.CookiesNamed(sessionCookie)) > 0:
		return deny(http.StatusForbidden, "wrong console session; open the URL genjobs console printed")
	}
	return deny(http.StatusUnauthorized, "no console session: open the URL genjobs console printed (it carries this launch's key)")
}

// hasSession says whether r carries the launch's session cookie.
func (s *Server) hasSession(r *http.Request) bool {
	for _, c := range r.CookiesNamed(sessionCookie) {
		if subtle.ConstantTimeCompare([]byte(c.Value), []byte(s.session)) == 1 {
			return true
		}
	}
	return false
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

// refuse says why a state-changing request of the session (admit) is not
// the console's own ("" if it is): it must come from a page of this
// origin, with the session's token.
func (s *Server) refuse(r *http.Request) string {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return "no Origin header"
	}
	if origin != "http://"+r.Host {
		return "Origin " + origin + " is not this console"
	}
	if err := r.ParseForm(); err != nil {
		return "unreadable form"
	}
	got := r.PostForm.Get("csrf")
	if got == "" {
		return "no CSRF token"
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(s.token())) != 1 {
		return "wrong CSRF token"
	}
	return ""
}

// token is the session's CSRF token: a MAC of it under this console's
// key, so it is never stored and dies with the console.
func (s *Server) token() string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("csrf\x00" + s.session))
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
		warning = fmt.Sprintf("WARNING: the console listens on %s, beyond loopback, over plain HTTP: its URL's key and its "+
			"session cookie cross the network in clear, and whoever reads them replays operations as this console's operator. "+
			"Keep it on a trusted network.", addr)
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
