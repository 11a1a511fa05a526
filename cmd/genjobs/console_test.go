package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestConsoleCommand: the command serves the store the flags name on
// loopback and prints its URL; an address beyond loopback needs
// --allow-remote.
func TestConsoleCommand(t *testing.T) {
	t.Parallel()
	db := seed(t)
	if code, _, errOut := genjobs(t, "console", "--db", db, "--addr", "0.0.0.0:0"); code != 2 || !strings.Contains(errOut, "--allow-remote") {
		t.Fatalf("console --addr 0.0.0.0:0: exit %d, %q", code, errOut)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"console", "--db", db}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	url := strings.Fields(strings.TrimPrefix(line, "genjobs console: "))[0]
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("printed %q", line)
	}
	resp, err := http.Get(url + "reviews")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "op-uncertain-lost-response") {
		t.Fatalf("GET /reviews: %d\n%s", resp.StatusCode, b)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("console exited %d after Ctrl-C", code)
	}
}
