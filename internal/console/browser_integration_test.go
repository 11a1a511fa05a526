//go:build integration

package console

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/genjobs/genjobs/internal/dev/testenv"
	"github.com/genjobs/genjobs/internal/replay"
)

// chromium is Debian's headless Chromium (.ci/chromium.sh install).
const chromium = "/usr/bin/chromium"

var updateScreenshots = flag.Bool("update-screenshots", os.Getenv("GENJOBS_UPDATE_SCREENSHOTS") == "1",
	"write the console's screenshots into docs/ (env GENJOBS_UPDATE_SCREENSHOTS=1)")

// newBrowser starts a private headless Chromium: a fresh profile, no
// network of its own beyond the pages it is sent to.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		testenv.Skip(t, chromium+" is missing (bash .ci/chromium.sh install)")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	return ctx
}

// do runs browser steps or fails the test.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// value runs one browser action that reads something, or fails the test.
func value[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if !*updateScreenshots {
		return
	}
	// Quality 100: PNG.
	png := value(t, ctx, chromedp.FullScreenshot(100))
	path := filepath.Join("..", "..", "docs", name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", path, len(png))
}

// TestConsoleInBrowser drives the console in a real browser on the
// recovery fixtures: opening the printed URL, the reviews page, one
// operation's timeline, forged submits that change nothing, and one
// replay through the form whose audit entry is then read back from the
// store.
func TestConsoleInBrowser(t *testing.T) {
	st := seed(t)
	ts, srv := console(t, st, func(c *Config) { c.Operator = "browser-operator" })
	ctx := newBrowser(t)
	const id = "op-uncertain-lost-response"
	link := chromedp.CSS(`a.op[href="` + srv.root + `op/` + id + `"]`)

	// Without the printed URL's key the console serves nothing.
	do(t, ctx, chromedp.Navigate(at(ts, srv, "reviews")), chromedp.WaitVisible(chromedp.CSS("body")))
	if body := value(t, ctx, chromedp.Text(chromedp.CSS("body"))); !strings.Contains(body, "no console session") {
		t.Fatalf("the reviews page without the launch key: %q", body)
	}

	// The printed URL: its key is exchanged for the session, and the
	// address bar no longer shows it.
	do(t, ctx, chromedp.Navigate(srv.LaunchURL(ts.URL+"/")), chromedp.WaitVisible(chromedp.ID("summary")))
	if loc := value(t, ctx, chromedp.Location()); loc != at(ts, srv, "reviews") {
		t.Fatalf("after opening the launch URL the browser is at %q, want %q", loc, at(ts, srv, "reviews"))
	}

	// Reviews: grouped, counted, each row linking to its operation; the
	// header names who acts.
	summary := value(t, ctx, chromedp.Text(chromedp.ID("summary")))
	counts := value(t, ctx, chromedp.Text(chromedp.CSS("table.counts")))
	acting := value(t, ctx, chromedp.Text(chromedp.ID("operator")))
	links := value(t, ctx, chromedp.Nodes(chromedp.CSSAll(`a.op[href="`+srv.root+`op/`+id+`"]`)))
	if !strings.Contains(summary, "open reviews") || !strings.Contains(summary, "groups by recommended action and error class") ||
		!strings.Contains(counts, "reconcile") || !strings.Contains(counts, "post_outcome_unknown") || len(links) != 1 || acting != "browser-operator" {
		t.Fatalf("reviews page: summary %q, counts %q, acting %q, %d links to %s", summary, counts, acting, len(links), id)
	}
	screenshot(t, ctx, "console-reviews.png")

	// One operation, reached by its link: the timeline is drawn.
	do(t, ctx, chromedp.Click(link), chromedp.WaitVisible(chromedp.ID("timeline")))
	phase := value(t, ctx, chromedp.Text(chromedp.ID("phase")))
	planAction := value(t, ctx, chromedp.Text(chromedp.ID("plan-action")))
	timelineText := value(t, ctx, chromedp.TextContent(chromedp.ID("timeline")))
	events := value(t, ctx, chromedp.Nodes(chromedp.CSSAll("#timeline g.event circle")))
	if phase != "uncertain" || planAction != "reconcile" || len(events) < 4 ||
		!strings.Contains(timelineText, "parked for an operator") || !strings.Contains(timelineText, "review op:"+id+":r1 opened") {
		t.Fatalf("operation page: phase %q, plan %q, %d events, timeline %q", phase, planAction, len(events), timelineText)
	}

	// A submit without the CSRF token changes nothing.
	fill := chromedp.Steps(
		chromedp.Navigate(at(ts, srv, "op/"+id)),
		chromedp.WaitVisible(chromedp.ID("replay")),
		chromedp.Click(chromedp.ID("mode-not-submitted")),
		chromedp.SendKeys(chromedp.ID("reason"), "no job on the Genace dashboard"),
		chromedp.Click(chromedp.ID("confirm")),
	)
	do(t, ctx, fill)
	value(t, ctx, chromedp.Evaluate[bool](`(document.querySelector('input[name=csrf]').remove(), true)`))
	do(t, ctx, chromedp.Click(chromedp.ID("submit")), chromedp.WaitNotPresent(chromedp.ID("replay")))
	refusal := value(t, ctx, chromedp.Text(chromedp.CSS("body")))
	if !strings.Contains(refusal, "no CSRF token") || !strings.Contains(refusal, "nothing was changed") {
		t.Fatalf("submit without the token: %q", refusal)
	}
	unchanged(t, st, id, 1)

	// A page of another origin posting the form, even with the session's
	// own token, changes nothing (127.0.0.1 at another port is the same
	// site, so the browser sends the session cookie: the Origin check
	// refuses it).
	do(t, ctx, chromedp.Navigate(at(ts, srv, "op/"+id)))
	token := value(t, ctx, chromedp.AttributeValue(chromedp.CSS(`input[name=csrf]`), "value")).Value
	foreign := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s">
<input name="csrf" value="%s"><input name="action" value="reconcile"><input name="revision" value="1">
<input name="operator" value="mallory"><input name="mode" value="not-submitted"><input name="confirm" value="yes">
<button id="go" type="submit">go</button></form>`, at(ts, srv, "op/"+id+"/replay"), token)
	}))
	defer foreign.Close()
	do(t, ctx, chromedp.Navigate(foreign.URL), chromedp.Click(chromedp.ID("go")), chromedp.WaitNotPresent(chromedp.ID("go")))
	refusal = value(t, ctx, chromedp.Text(chromedp.CSS("body")))
	if !strings.Contains(refusal, "is not this console") || !strings.Contains(refusal, "nothing was changed") {
		t.Fatalf("submit from %s: %q", foreign.URL, refusal)
	}
	unchanged(t, st, id, 1)

	// The replay, by clicking: the page shows the resulting revision and
	// the audit entry.
	do(t, ctx, fill, chromedp.Click(chromedp.ID("submit")), chromedp.WaitVisible(chromedp.ID("result")))
	result := value(t, ctx, chromedp.Text(chromedp.ID("result")))
	revision := value(t, ctx, chromedp.Text(chromedp.ID("revision")))
	if !strings.Contains(result, "uncertain r1 → prepared r2") || !strings.Contains(result, "browser-operator") || revision != "2" {
		t.Fatalf("after the replay: revision %q, result %q", revision, result)
	}
	screenshot(t, ctx, "console-operation.png")

	// The audit entry, read back from the store.
	audit, err := st.Audit(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) != 1 || audit[0].Operator != "browser-operator" || audit[0].Decision != replay.DecisionConfirmedNotSubmitted || audit[0].Revision != 2 {
		t.Fatalf("audit trail: %+v", audit)
	}
}
