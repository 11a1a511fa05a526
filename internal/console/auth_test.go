package console

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/replay"
)

// routePath is a request path for rt under root: its wildcards filled in
// (the test fails on one it does not know, so a new route is not skipped).
func routePath(t *testing.T, root string, rt route, id string) string {
	t.Helper()
	p := strings.NewReplacer("{id}", id, "{$}", "").Replace(rt.path)
	if strings.HasSuffix(p, "static/") {
		p += "console.css"
	}
	if strings.ContainsAny(p, "{}") {
		t.Fatalf("route %s %s: a wildcard this test does not fill in; teach routePath it", rt.method, rt.path)
	}
	return root + p
}

// TestSameMachineClientRefused: a process on the operator's machine that
// reaches the console's port but lacks its launch secret does what the
// issue's attacker did: GET a page, take the cookie and the CSRF token,
// send the console's own Origin, and POST a replay. On every route the
// console serves, GET and POST, it is refused (401 or 403, a short text,
// no cookie) and nothing changes; the operator's browser, which opened
// the printed URL, is served on each.
func TestSameMachineClientRefused(t *testing.T) {
	t.Parallel()
	st := seed(t)
	ts, srv := console(t, st, nil)
	_, other := console(t, seed(t), nil) // another launch: its key and cookie are not this one's
	const id = "op-uncertain-lost-response"
	operator := login(t, ts, srv)
	reviews, err := st.OpenReviews(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The replay form as the operator's page draws it, its token included:
	// the most an attacker could have copied.
	_, page := get(t, operator, at(ts, srv, "op/"+id))
	form := formOf(t, page)
	form.Set("operator", "mallory")
	form.Set("mode", "not-submitted")
	form.Set("reason", "no job on the dashboard")
	form.Set("confirm", "yes")

	type attacker struct {
		name   string
		root   string // the path the attacker asks under: the console's (leaked) or none
		query  string
		cookie *http.Cookie
	}
	attackers := []attacker{
		{"no session, the console's root known", srv.root, "", nil},
		{"no session, the old paths", "/", "", nil},
		{"a wrong session cookie", srv.root, "", &http.Cookie{Name: sessionCookie, Value: randomText(32)}},
		{"another launch's session cookie", srv.root, "", &http.Cookie{Name: sessionCookie, Value: other.session}},
		{"a wrong launch key", srv.root, launchParam + "=" + randomText(32), nil},
		{"another launch's key", srv.root, launchParam + "=" + other.launchKey, nil},
		{"the spent launch key", srv.root, launchParam + "=" + srv.launchKey, nil},
	}
	for _, rt := range srv.routes {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			for _, a := range attackers {
				u := ts.URL + routePath(t, a.root, rt, id)
				if a.query != "" {
					u += "?" + a.query
				}
				body := ""
				if method == http.MethodPost {
					body = form.Encode()
				}
				req, err := http.NewRequest(method, u, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Origin", ts.URL)
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				if a.cookie != nil {
					req.AddCookie(a.cookie)
				}
				c := browser(t)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b := new(strings.Builder)
				_, _ = io.Copy(b, resp.Body)
				resp.Body.Close()
				what := method + " " + u + " (route " + rt.method + " " + rt.path + ", " + a.name + ")"
				if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
					t.Errorf("%s: %d, want 401 or 403\n%.300s", what, resp.StatusCode, b)
				}
				if !strings.HasPrefix(b.String(), "console: ") || !strings.Contains(b.String(), "nothing was changed") || b.Len() > 300 {
					t.Errorf("%s: body %q, want a short refusal", what, b)
				}
				if len(resp.Cookies()) != 0 {
					t.Errorf("%s: handed out cookies %v", what, resp.Cookies())
				}
				for _, sec := range []string{srv.session, srv.launchKey, srv.token()} {
					if strings.Contains(b.String(), sec) {
						t.Errorf("%s: the refusal shows a secret", what)
					}
				}
				unchanged(t, st, id, 1)
			}
		}
	}
	if after, _ := st.OpenReviews(context.Background()); len(after) != len(reviews) {
		t.Fatalf("open reviews %d → %d", len(reviews), len(after))
	}

	// The operator is served on every route: each GET route answers, and
	// the replay is carried out, audited as the launch's operator.
	for _, rt := range srv.routes {
		u := ts.URL + routePath(t, srv.root, rt, id)
		var status int
		var body string
		if rt.method == http.MethodGet {
			status, body = get(t, operator, u)
		} else {
			status, body = post(t, operator, u, ts.URL, form)
		}
		if status != http.StatusOK && status != http.StatusSeeOther {
			t.Errorf("the operator's %s %s: %d\n%.300s", rt.method, u, status, body)
		}
		if strings.Contains(body, srv.session) || strings.Contains(body, srv.launchKey) {
			t.Errorf("the operator's %s %s: the page shows the session or the launch key", rt.method, u)
		}
	}
	audit, err := st.Audit(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) != 1 || audit[0].Operator != "carol" {
		t.Fatalf("after the operator's replay: audit %+v, want one entry by carol (the form's mallory ignored)", audit)
	}
}

// TestLaunchKeyExchange: the printed URL's key is exchanged once for an
// HttpOnly, SameSite=Strict cookie scoped to the console's root, and the
// redirect drops it from the address bar; the same browser opening the
// URL again is let through, another is refused.
func TestLaunchKeyExchange(t *testing.T) {
	t.Parallel()
	ts, srv := console(t, seed(t), nil)
	u, err := url.Parse(srv.LaunchURL(ts.URL + "/"))
	if err != nil {
		t.Fatal(err)
	}
	if u.Path != srv.root || u.Query().Get(launchParam) != srv.launchKey || len(srv.root) < 16 {
		t.Fatalf("launch URL %s", u)
	}
	// A HEAD (a link preview) does not spend it.
	if resp, err := browser(t).Head(u.String()); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("HEAD of the launch URL: %v %v, want 401", resp, err)
	}
	c := browser(t)
	resp, err := c.Get(u.String() + "&op=x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != srv.root+"?op=x" || len(cookies) != 1 {
		t.Fatalf("exchange: %d to %q, cookies %v", resp.StatusCode, resp.Header.Get("Location"), cookies)
	}
	ck := cookies[0]
	if ck.Name != sessionCookie || ck.Value != srv.session || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != srv.root {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=%s", ck, srv.root)
	}
	// The same browser again: no new cookie, just the redirect.
	resp, err = c.Get(u.String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 0 {
		t.Fatalf("the operator's browser reopening the URL: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	// Another browser with the same URL: the key is spent.
	status, body := get(t, browser(t), u.String())
	if status != http.StatusForbidden || !strings.Contains(body, "already used") || !strings.Contains(body, "restart genjobs console") {
		t.Fatalf("a second browser: %d %q", status, body)
	}
	// The operator's session still works.
	if status, _ := get(t, c, at(ts, srv, "reviews")); status != http.StatusOK {
		t.Fatalf("the operator after a refused second browser: %d", status)
	}
}

// TestOperatorFromLaunch: a console is not started for an operator name
// the audit trail would refuse, nor for one carrying a secret.
func TestOperatorFromLaunch(t *testing.T) {
	t.Parallel()
	st := seed(t)
	for _, tc := range []struct {
		operator string
		want     string
	}{
		{"", "operator name is required"},
		{"https://evil.example/x", "the operator name is a URL"},
		{"ops-sk-live-42", "contains a secret"},
	} {
		_, err := New(Config{Store: st, Replayer: &replay.Replayer{Store: st, Clock: clock.Real{}}, Clock: clock.Real{},
			Operator: tc.operator, Secrets: []string{"sk-live-42"}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with operator %q: %v, want %q", tc.operator, err, tc.want)
		}
	}
}
