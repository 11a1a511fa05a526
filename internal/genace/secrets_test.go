package genace_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/genace"
)

// leakCheck collects everything that could be printed and asserts no
// secret appears in it.
type leakCheck struct {
	t       *testing.T
	secrets []string
	buf     bytes.Buffer
	json    *slog.Logger
	text    *slog.Logger
}

func newLeakCheck(t *testing.T, secrets ...string) *leakCheck {
	lc := &leakCheck{t: t, secrets: secrets}
	lc.json = slog.New(slog.NewJSONHandler(&lc.buf, nil))
	lc.text = slog.New(slog.NewTextHandler(&lc.buf, nil))
	return lc
}

// log sends v through both slog handlers and every fmt verb.
func (lc *leakCheck) log(name string, v any) {
	lc.json.Info(name, "v", v)
	lc.text.Info(name, "v", v)
	fmt.Fprintf(&lc.buf, "%v|%+v|%#v|%s|%q|%x\n", v, v, v, v, v, v)
	if b, err := json.Marshal(v); err == nil {
		lc.buf.Write(b)
	}
}

func (lc *leakCheck) err(name string, err error) {
	lc.t.Helper()
	if err == nil {
		lc.t.Fatalf("%s: expected an error", name)
	}
	lc.buf.WriteString(err.Error() + "\n")
	lc.log(name, err)
}

func (lc *leakCheck) check() {
	lc.t.Helper()
	out := lc.buf.String()
	for _, s := range lc.secrets {
		if s != "" && strings.Contains(out, s) {
			i := strings.Index(out, s)
			lc.t.Errorf("secret %q leaked near: %q", s, out[max(0, i-120):min(len(out), i+len(s)+40)])
		}
	}
}

func TestSecretsNeverLeak(t *testing.T) {
	t.Parallel()
	e := newEnv(t, genacesim.Config{Models: models})
	ctx := context.Background()
	j := succeededJob(t, e)
	u, err := url.Parse(j.Outputs[0].URL.Reveal())
	if err != nil {
		t.Fatal(err)
	}
	sig := u.Query().Get("sig")
	if len(sig) < 32 {
		t.Fatalf("no signature in %q", u.RawQuery)
	}
	lc := newLeakCheck(t, testKey, sig, "sig=", "expires=", u.RawQuery)

	// Successful objects, logged every way.
	lc.log("job", j)
	lc.log("job value", *j)
	lc.log("outputs", j.Outputs)
	lc.log("output", j.Outputs[0])
	lc.log("url", j.Outputs[0].URL)
	lc.log("client", e.client)
	lc.log("client value", *e.client)

	// Submit failures: timeout, reset, garbage, 5xx.
	for i, f := range []genacesim.Fault{
		genacesim.DelayResponse(time.Hour), genacesim.AcceptThenDrop(), genacesim.GarbageBody(),
		genacesim.ServerErrorNoJob(503), genacesim.SubmissionFailed(502), genacesim.RateLimited(time.Second),
	} {
		op := fmt.Sprintf("leak-%d", i)
		e.sim.ScriptPOST(op, f)
		res := e.client.Submit(ctx, req(op), 300*time.Millisecond)
		lc.err(op, res.Err)
		lc.log(op, res)
		lc.log(op+" ptr", &res)
	}
	res := e.client.Submit(ctx, req("ok"), time.Second)
	lc.log("accepted", res)

	// Get failures.
	for i, f := range []genacesim.Fault{
		genacesim.DelayResponse(time.Hour), genacesim.GarbageBody(), genacesim.ServerErrorNoJob(500),
	} {
		e.sim.ScriptGET(j.ID, f)
		_, err := e.client.Get(ctx, j.ID, 0, 300*time.Millisecond)
		lc.err(fmt.Sprintf("get-%d", i), err)
	}
	// Without keep-alive net/http cannot replay the GET, so exactly one
	// scripted drop is consumed per call.
	nk, _ := genace.New(e.srv.URL, testKey, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}})
	e.sim.ScriptGET(j.ID, genacesim.AcceptThenDrop())
	_, err = nk.Get(ctx, j.ID, 0, time.Second)
	lc.err("get-drop", err)

	// Download failures: reset, timeout, 5xx, expiry.
	e.sim.ScriptFile(j.ID, genacesim.AcceptThenDrop())
	_, _, err = nk.Download(ctx, j.Outputs[0].URL, time.Second)
	lc.err("download-drop", err)
	var te *genace.TransportError
	if !errors.As(err, &te) || !genace.Retryable(err) {
		t.Errorf("download drop: %v", err)
	}
	e.sim.ScriptFile(j.ID, genacesim.DelayResponse(time.Hour))
	_, _, err = nk.Download(ctx, j.Outputs[0].URL, 300*time.Millisecond)
	lc.err("download-timeout", err)
	if !errors.As(err, &te) || !te.Timeout {
		t.Errorf("download timeout: %v", err)
	}
	e.sim.ScriptFile(j.ID, genacesim.ServerErrorNoJob(503))
	_, _, err = nk.Download(ctx, j.Outputs[0].URL, time.Second)
	lc.err("download-503", err)
	if !genace.Retryable(err) {
		t.Errorf("download 503: %v", err)
	}
	e.clk.Advance(time.Hour)
	_, _, err = nk.Download(ctx, j.Outputs[0].URL, time.Second)
	lc.err("download-expired", err)
	if !errors.Is(err, genace.ErrURLExpired) {
		t.Errorf("download expired: %v", err)
	}

	// Connection refused: net/http's *url.Error would print the full URL.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	_, _, err = e.client.Download(ctx, genace.SignedURL("http://"+dead+"/files/x/0?expires=1&sig="+sig), time.Second)
	lc.err("download-refused", err)
	dc, _ := genace.New("http://"+dead, testKey, nil)
	lc.err("submit-refused", dc.Submit(ctx, req("x"), time.Second).Err)
	_, err = dc.Get(ctx, "job_1", 0, time.Second)
	lc.err("get-refused", err)

	// A body that breaks off mid-stream.
	cut := newRawServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.Write([]byte("partial"))
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	})
	rc, _, err := e.client.Download(ctx, genace.SignedURL(cut+"/files/x/0?expires=1&sig="+sig), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = bytes.NewBuffer(nil).ReadFrom(rc)
	rc.Close()
	lc.err("download-cut", err)

	lc.check()
	if testing.Verbose() {
		t.Log(lc.buf.String())
	}
}
