package genace_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/genace"
)

// testKey is recognisable so leak assertions can search for it.
const testKey = "sk-live-TOPSECRET-4f9a1c77"

var t0 = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

type env struct {
	sim    *genacesim.Simulator
	srv    *httptest.Server
	client *genace.Client
	clk    *clock.Manual
	hc     *http.Client
}

// newEnv serves a simulator on a manual clock over real HTTP and builds a
// client with its own transport, so other parallel tests closing
// DefaultTransport's idle connections cannot disturb this one.
func newEnv(t testing.TB, cfg genacesim.Config) *env {
	t.Helper()
	clk := clock.NewManual(t0)
	return newEnvClock(t, cfg, clk, clk)
}

func newEnvClock(t testing.TB, cfg genacesim.Config, clk clock.Clock, manual *clock.Manual) *env {
	t.Helper()
	if cfg.APIKey == "" {
		cfg.APIKey = testKey
	}
	sim := genacesim.New(cfg, clk)
	srv := httptest.NewServer(sim)
	tr := &http.Transport{}
	hc := &http.Client{Transport: tr}
	t.Cleanup(srv.Close)
	t.Cleanup(tr.CloseIdleConnections)
	t.Cleanup(sim.Close) // runs first: releases held handlers so srv.Close cannot hang
	c, err := genace.New(srv.URL, testKey, hc)
	if err != nil {
		t.Fatal(err)
	}
	return &env{sim: sim, srv: srv, client: c, clk: manual, hc: hc}
}

// waitForWaiter blocks until the simulator has parked a request on the
// manual clock, so advancing the clock cannot race the request's arrival.
func waitForWaiter(t testing.TB, clk *clock.Manual) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := clk.NextWaiter(); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no request parked on the clock within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func req(op string) genace.SubmitRequest {
	return genace.SubmitRequest{OperationID: op, Model: "flux-pro-2", Input: []byte(`{"prompt":"a cat"}`)}
}

// newRawServer serves h for tests that need replies the simulator never
// gives (malformed headers, foreign bodies); it returns the base URL.
func newRawServer(t testing.TB, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func jsonDecode(resp *http.Response, v any) error {
	return json.NewDecoder(resp.Body).Decode(v)
}
