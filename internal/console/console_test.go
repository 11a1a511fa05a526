package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/replay"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store/bolt"
)

func TestPages(t *testing.T) {
	t.Parallel()
	st := seed(t)
	ts, srv := console(t, st, nil)
	c := login(t, ts, srv)
	for _, tc := range []struct {
		path   string
		status int
		want   []string
	}{
		{"", 303, nil},
		{"reviews", 200, []string{`<span class="action reconcile">reconcile</span> · post_outcome_unknown`,
			`href="` + srv.root + `op/op-uncertain-lost-response"`, "flux-pro-2", "newest first", "24h ago", `acting as <b id="operator">carol</b>`}},
		{"op/op-uncertain-lost-response", 200, []string{`id="phase">uncertain`, `id="revision">1`, `id="remote-state">unknown`,
			`id="event">Operation Needs Attention, r1: owed (the sweep sends it)`,
			`<svg class="timeline"`, "parked for an operator: post_outcome_unknown", "review op:op-uncertain-lost-response:r1 opened",
			`id="plan-action">reconcile`, `name="mode" value="not-submitted"`, `name="confirm"`, "Budget", `Audited as <b id="acting">carol</b>`}},
		{"op/op-succeeded-copy-incomplete", 200, []string{"abc1abc1abc1abc1abc1abc1abc1abc1", "117 bytes", "ops/op/job_succeeded1/0.png",
			"job_succeeded1", "Charged", "output 0 stored (117 bytes)", "outputs_described"}},
		{"op/op-nobody", 404, []string{"not found"}},
		{"op/op-delivered", 200, []string{`id="plan-action">acknowledge`, "terminal", "under the name carol"}},
	} {
		status, body := get(t, c, at(ts, srv, tc.path))
		if status != tc.status {
			t.Errorf("GET %s: %d, want %d\n%s", tc.path, status, tc.status, body)
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s lacks %q", tc.path, w)
			}
		}
	}
}

func TestReviewFilters(t *testing.T) {
	t.Parallel()
	st := seed(t)
	ts, srv := console(t, st, nil)
	c := login(t, ts, srv)
	for _, tc := range []struct {
		query  string
		status int
		want   string
		absent string
	}{
		{"op=uncertain", 200, "op-uncertain-lost-response", "op-stalled-job-known"},
		{"model=no-such-model", 200, "0 of", "op-uncertain"},
		{"model=flux-pro-2", 200, "op-uncertain-lost-response", ""},
		{"newer=2h", 200, "0 of", "op-uncertain"},
		{"newer=2d", 200, "op-uncertain-lost-response", ""},
		{"older=2d", 200, "0 of", "op-uncertain"},
		{"older=20h", 200, "op-stalled-job-known", ""},
		{"older=yesterday", 400, "want e.g. 90m, 36h or 7d", ""},
	} {
		status, body := get(t, c, at(ts, srv, "reviews?"+tc.query))
		if status != tc.status || !strings.Contains(body, tc.want) || tc.absent != "" && strings.Contains(body, tc.absent) {
			t.Errorf("reviews?%s: %d, want %d with %q and without %q", tc.query, status, tc.status, tc.want, tc.absent)
		}
	}
}

// unchanged fails unless the operation is at revision rev with no audit
// entry.
func unchanged(t *testing.T, st *bolt.Store, id string, rev int64) {
	t.Helper()
	rec, err := st.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	audit, err := st.Audit(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Revision != rev || len(audit) != 0 {
		t.Fatalf("%s changed: revision %d (want %d), %d audit entries", id, rec.Revision, rev, len(audit))
	}
}

// TestForgedReplayRefused: a state change of the operator's session must
// come from a page of this console, with the session's token: each
// forgery gets 403 (a foreign Host 421) and changes nothing. Requests
// without the session are TestSameMachineClientRefused's.
func TestForgedReplayRefused(t *testing.T) {
	t.Parallel()
	st := seed(t)
	ts, srv := console(t, st, nil)
	const id = "op-stalled-job-known"
	c := login(t, ts, srv)
	_, page := get(t, c, at(ts, srv, "op/"+id))
	good := formOf(t, page)
	good.Set("confirm", "yes")
	origin := ts.URL
	with := func(k, v string) url.Values {
		f := url.Values{}
		for kk, vv := range good {
			f[kk] = vv
		}
		if v == "" {
			f.Del(k)
		} else {
			f.Set(k, v)
		}
		return f
	}
	for _, tc := range []struct {
		name   string
		origin string
		form   url.Values
		status int
		why    string
	}{
		{"no CSRF token", origin, with("csrf", ""), 403, "no CSRF token"},
		{"wrong CSRF token", origin, with("csrf", "AAAA"+good.Get("csrf")[4:]), 403, "wrong CSRF token"},
		{"foreign Origin", "http://evil.example", good, 403, "is not this console"},
		{"same host, other port", "http://127.0.0.1:1", good, 403, "is not this console"},
		{"no Origin", "", good, 403, "no Origin header"},
	} {
		status, body := post(t, c, at(ts, srv, "op/"+id+"/replay"), tc.origin, tc.form)
		if status != tc.status || !strings.Contains(body, tc.why) || !strings.Contains(body, "nothing was changed") {
			t.Errorf("%s: %d %q, want %d and %q", tc.name, status, body, tc.status, tc.why)
		}
		unchanged(t, st, id, 1)
	}
	// localhost at the console's port is a name it answers to (the
	// session, whose cookie is 127.0.0.1's, is still needed there).
	if status, _ := get(t, c, strings.Replace(at(ts, srv, "reviews"), "127.0.0.1", "localhost", 1)); status != http.StatusUnauthorized {
		t.Errorf("localhost at the console's port: %d, want 401", status)
	}
	// A page asked for under another name (DNS rebinding) is not served.
	req, err := http.NewRequest(http.MethodPost, at(ts, srv, "op/"+id+"/replay"), strings.NewReader(good.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "attacker.example:80"
	req.Header.Set("Origin", "http://attacker.example:80")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("another host name: %d, want 421", resp.StatusCode)
	}
	unchanged(t, st, id, 1)
	// A reason forged onto the form of an action that takes none goes to
	// replay, which refuses it: the console decides nothing itself.
	if status, body := post(t, c, at(ts, srv, "op/"+id+"/replay"), origin, with("reason", "trust me")); status != http.StatusBadRequest ||
		!strings.Contains(body, "Nothing was changed") || !strings.Contains(body, "--reason does not go with observe") {
		t.Errorf("a forged reason: %d\n%s", status, body)
	}
	unchanged(t, st, id, 1)
	// The good form, unaltered, does replay: the refusals above were the checks'.
	if status, body := post(t, c, at(ts, srv, "op/"+id+"/replay"), origin, good); status != 200 || !strings.Contains(body, "Replay done") {
		t.Fatalf("the genuine form: %d\n%s", status, body)
	}
}

// TestStaleFormRecomputesPlan: a form drawn before the record moved
// replays nothing; the page shows the plan recomputed from the record as
// it stands.
func TestStaleFormRecomputesPlan(t *testing.T) {
	t.Parallel()
	st := seed(t)
	ts, srv := console(t, st, nil)
	const id = "op-stalled-job-known"
	c := login(t, ts, srv)
	_, page := get(t, c, at(ts, srv, "op/"+id))
	form := formOf(t, page)
	form.Set("confirm", "yes")
	if form.Get("action") != "observe" || form.Get("revision") != "1" {
		t.Fatalf("form drawn for %s r%s", form.Get("action"), form.Get("revision"))
	}
	// Another operator replays it on the command line meanwhile.
	if _, err := srv.cfg.Replayer.Replay(context.Background(), replay.Request{OperationID: id, Action: operation.ActionObserve, Operator: "bob"}); err != nil {
		t.Fatal(err)
	}
	status, body := post(t, c, at(ts, srv, "op/"+id+"/replay"), ts.URL, form)
	if status != 409 || !strings.Contains(body, "Nothing was changed") || !strings.Contains(body, "the record is now at revision 2") || !strings.Contains(body, `id="revision">2`) {
		t.Fatalf("stale form: %d\n%s", status, body)
	}
	audit, _ := st.Audit(context.Background(), id)
	if len(audit) != 1 || audit[0].Operator != "bob" {
		t.Fatalf("audit after a stale form: %+v", audit)
	}
}

func TestReplayThroughForm(t *testing.T) {
	t.Parallel()
	const key = "sk-live-SECRET-KEY-42"
	for _, tc := range []struct {
		name    string
		id      string
		genace  fakeGenace
		fields  map[string]string
		status  int
		want    []string
		changed bool
	}{
		{"no confirmation", "op-uncertain-lost-response", fakeGenace{}, map[string]string{"mode": "not-submitted", "confirm": ""}, 400,
			[]string{"tick the confirmation"}, false},
		{"a form's operator is ignored", "op-uncertain-lost-response", fakeGenace{}, map[string]string{"mode": "not-submitted", "operator": "mallory", "reason": "the dashboard lists no job for it"}, 200,
			[]string{"Replay done: confirmed-not-submitted", "By <b>carol</b>"}, true},
		{"not submitted needs a reason", "op-uncertain-lost-response", fakeGenace{}, map[string]string{"mode": "not-submitted"}, 400,
			[]string{"needs --reason", "charges about"}, false},
		{"confirmed not submitted", "op-uncertain-lost-response", fakeGenace{}, map[string]string{"mode": "not-submitted", "reason": "support ticket 1234: no job"}, 200,
			[]string{"Replay done: confirmed-not-submitted", "uncertain r1 → <b>prepared r2", `id="audit-entry"`, "Closed reviews: op:op-uncertain-lost-response:r1"}, true},
		{"attach a verified job", "op-uncertain-lost-response", fakeGenace{jobs: map[string]string{"job_found1": "op-uncertain-lost-response"}},
			map[string]string{"mode": "job", "job_id": "job_found1"}, 200,
			[]string{"Replay done: attach-job", "job_found1 (verified)", "Follow-up <b>observe_generation</b>", "scheduled on the record. run the sweep"}, true},
		{"a job of another operation", "op-uncertain-lost-response", fakeGenace{jobs: map[string]string{"job_x": "op-other"}},
			map[string]string{"mode": "job", "job_id": "job_x"}, 409, []string{"names operation op-other"}, false},
		{"a lookup error never shows the key", "op-uncertain-lost-response", fakeGenace{err: errors.New("upstream said key=" + key)},
			map[string]string{"mode": "job", "job_id": "job_y"}, 409, []string{"key=[redacted]"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := seed(t)
			ts, srv := console(t, st, func(c *Config) { c.Replayer.Genace = tc.genace; c.Secrets = []string{key} })
			c := login(t, ts, srv)
			_, page := get(t, c, at(ts, srv, "op/"+tc.id))
			form := formOf(t, page)
			form.Set("confirm", "yes")
			for k, v := range tc.fields {
				form.Set(k, v)
			}
			status, body := post(t, c, at(ts, srv, "op/"+tc.id+"/replay"), ts.URL, form)
			if status != tc.status {
				t.Errorf("status %d, want %d\n%s", status, tc.status, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("page lacks %q\n%s", w, body)
				}
			}
			if strings.Contains(body, key) {
				t.Errorf("the page shows the API key")
			}
			audit, _ := st.Audit(context.Background(), tc.id)
			if tc.changed != (len(audit) == 1) {
				t.Fatalf("audit entries %+v; changed=%v", audit, tc.changed)
			}
			if tc.changed && audit[0].Operator != "carol" {
				t.Errorf("audit operator %q", audit[0].Operator)
			}
		})
	}
}

func TestListen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr    string
		remote  bool
		err     string
		warning bool
	}{
		{"127.0.0.1:0", false, "", false},
		{"localhost:0", false, "", false},
		{"0.0.0.0:0", false, "pass --allow-remote", false},
		{":0", false, "pass --allow-remote", false},
		{"0.0.0.0:0", true, "", true},
		{"nonsense", false, "--addr", false},
	} {
		ln, u, warning, err := Listen(tc.addr, tc.remote)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Listen(%q, %v): %v, want %q", tc.addr, tc.remote, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Listen(%q): %v", tc.addr, err)
		}
		ln.Close()
		if !strings.HasPrefix(u, "http://") || strings.HasSuffix(u, ":0/") || (warning != "") != tc.warning {
			t.Errorf("Listen(%q, %v): url %q warning %q", tc.addr, tc.remote, u, warning)
		}
	}
}

// TestReviewAges: the reviews page says how long ago each review opened,
// in words that read: "just now", never "just now ago".
func TestReviewAges(t *testing.T) {
	t.Parallel()
	st := seed(t)
	ctx := context.Background()
	for i, ago := range []time.Duration{10 * time.Second, 5 * time.Minute, 3 * time.Hour, 72 * time.Hour} {
		rec, err := st.Get(ctx, "op-stalled-job-known")
		if err != nil {
			t.Fatal(err)
		}
		rv := review.ForRecord(fmt.Sprintf("age-%d", i), review.SourceSweep, &rec, now.Add(-ago))
		if _, err := st.PutReview(ctx, rv); err != nil {
			t.Fatal(err)
		}
	}
	ts, srv := console(t, st, nil)
	_, body := get(t, login(t, ts, srv), at(ts, srv, "reviews"))
	for _, want := range []string{">just now</td>", ">5m ago</td>", ">3h ago</td>", ">3d ago</td>"} {
		if !strings.Contains(body, want) {
			t.Errorf("reviews page lacks %q", want)
		}
	}
	if strings.Contains(body, "just now ago") {
		t.Errorf("reviews page says \"just now ago\"")
	}
}
