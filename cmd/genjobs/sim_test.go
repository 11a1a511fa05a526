package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/handlertest"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestSimServesUntilCancelled(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	out := &handlertest.Buffer{}
	done := make(chan int)
	go func() { done <- run(ctx, []string{"sim", "--addr", addr, "--api-key", "k"}, out, &bytes.Buffer{}) }()
	deadline := time.Now().Add(5 * time.Second)
	var resp *http.Response
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest("POST", "http://"+addr+"/api/v1/jobs", strings.NewReader(`{"model":"m","input":{"p":1},"metadata":{"operation_id":"op-1"}}`))
		req.Header.Set("Authorization", "Bearer k")
		var err error
		if resp, err = http.DefaultClient.Do(req); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if resp == nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST to the simulator: %v", resp)
	}
	resp.Body.Close()
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(out.String(), "stopped: 1 POSTs") {
		t.Fatalf("output:\n%s", out.String())
	}
}

func TestSimRejectsBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"sim", "--fault-rate", "2"}, {"sim", "--outputs", "0"}, {"sim", "--addr", "0.0.0.0:1"}, {"sim", "extra"}} {
		code, _, errOut := genjobs(t, args...)
		if code == 0 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}
