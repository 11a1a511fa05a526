package console

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/replay"
	"github.com/genjobs/genjobs/internal/store/bolt"
)

// seed writes the recovery fixtures into a fresh embedded store, as the
// operator commands' tests do, with a review for each parked record.
func seed(t testing.TB) *bolt.Store {
	t.Helper()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "genjobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	handlertest.SeedRecovery(t, st)
	return st
}

// now is the consoles' clock in tests: a day after the fixtures' times.
var now = handlertest.Start.Add(24 * time.Hour)

// fakeGenace answers a job lookup (the narrow replay.JobReader).
type fakeGenace struct {
	err  error
	jobs map[string]string // job id → the operation id in its metadata
}

func (f fakeGenace) Get(_ context.Context, jobID string, _, _ time.Duration) (*genace.Job, error) {
	if f.err != nil {
		return nil, f.err
	}
	op, ok := f.jobs[jobID]
	if !ok {
		return nil, genace.ErrNotFound
	}
	return &genace.Job{ID: jobID, Metadata: map[string]string{"operation_id": op}}, nil
}

// console serves a console on st and returns its server.
func console(t testing.TB, st Store, mod func(*Config)) (*httptest.Server, *Server) {
	t.Helper()
	clk := clock.NewManual(now)
	cfg := Config{Store: st, Replayer: &replay.Replayer{Store: st, Clock: clk}, Clock: clk, Operator: "carol", ScheduledHint: "run the sweep"}
	if mod != nil {
		mod(&cfg)
	}
	ts := httptest.NewUnstartedServer(nil)
	cfg.Hosts = Hosts(ts.Listener)
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = srv
	ts.Start()
	t.Cleanup(ts.Close)
	return ts, srv
}

// at is the URL of path (no leading slash) on the console.
func at(ts *httptest.Server, srv *Server, path string) string { return ts.URL + srv.root + path }

// login is the operator's browser: it has opened the console's printed
// URL, so it holds the launch's session.
func login(t testing.TB, ts *httptest.Server, srv *Server) *http.Client {
	t.Helper()
	c := browser(t)
	resp, err := c.Get(srv.LaunchURL(ts.URL + "/"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != srv.root {
		t.Fatalf("opening the launch URL: %d to %q, want 303 to %s", resp.StatusCode, resp.Header.Get("Location"), srv.root)
	}
	return c
}

// browser is an HTTP client with a cookie jar, as a browser keeps the
// session; it follows no redirect.
func browser(t testing.TB) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t testing.TB, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// formOf returns the replay form's fields as the page drew them.
func formOf(t testing.TB, page string) url.Values {
	t.Helper()
	v := url.Values{}
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF field on the page:\n%s", page)
	}
	v.Set("csrf", m[1])
	for _, name := range []string{"action", "revision"} {
		m := regexp.MustCompile(`name="` + name + `" value="([^"]*)"`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no %s field on the page", name)
		}
		v.Set(name, m[1])
	}
	return v
}

func post(t testing.TB, c *http.Client, u, origin string, form url.Values) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
