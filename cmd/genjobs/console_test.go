package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
)

// TestConsoleCommand: the command serves the store the flags name on
// loopback and prints its URL, which carries the launch's key: without it
// nothing is served. An address beyond loopback needs --allow-remote; the
// operator is the launch's, checked as the audit trail needs.
func TestConsoleCommand(t *testing.T) {
	t.Parallel()
	db := seed(t)
	if code, _, errOut := genjobs(t, "console", "--db", db, "--addr", "0.0.0.0:0"); code != 2 || !strings.Contains(errOut, "--allow-remote") {
		t.Fatalf("console --addr 0.0.0.0:0: exit %d, %q", code, errOut)
	}
	if code, _, errOut := genjobs(t, "console", "--db", db, "--operator", "https://evil.example/"); code != 2 || !strings.Contains(errOut, "--operator") {
		t.Fatalf("console --operator URL: exit %d, %q", code, errOut)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"console", "--db", db, "--operator", "grace"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	printed, err := url.Parse(strings.Fields(strings.TrimPrefix(line, "genjobs console: "))[0])
	if err != nil || printed.Host == "" || !strings.HasPrefix(printed.Host, "127.0.0.1:") || printed.Query().Get("key") == "" || !strings.Contains(line, "acting as grace") {
		t.Fatalf("printed %q", line)
	}
	// Another process that found the port, or even the path, gets nothing.
	for _, u := range []string{"http://" + printed.Host + "/reviews", "http://" + printed.Host + printed.Path + "reviews"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the key: %d, want 401", u, resp.StatusCode)
		}
	}
	// The operator's browser opens the printed URL.
	jar, _ := cookiejar.New(nil)
	resp, err := (&http.Client{Jar: jar}).Get(printed.String())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "op-uncertain-lost-response") || !strings.Contains(string(b), "grace") || strings.Contains(resp.Request.URL.RawQuery, "key") {
		t.Fatalf("GET %s: %d at %s\n%s", printed.Path, resp.StatusCode, resp.Request.URL, b)
	}
	// Meanwhile the command line cannot open the store, and says why and
	// what to do.
	code, _, errOut := genjobs(t, "plan", "op-uncertain-lost-response", "--db", db)
	if code != 1 || !strings.Contains(errOut, "genjobs console") || !strings.Contains(errOut, "Ctrl-C") || strings.Contains(errOut, printed.Query().Get("key")) {
		t.Errorf("plan while the console runs: exit %d, want 1 and a message naming the console and how to stop it:\n%s", code, errOut)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("console exited %d after Ctrl-C", code)
	}
}
