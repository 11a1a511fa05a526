package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/genjobs/genjobs/client"
	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/intake"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/stack"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/worker"
)

// LocalCredentials are what a local run's own client signs with; a local
// run accepts any signature (see localIdentity), so they are no secret.
const LocalCredentials = "genjobs-local"

// localRegion is the region a local run's client signs for.
const localRegion = "us-east-1"

// api is a local run's intake API: the deployed function's handler
// served on loopback, the door the run's own workload goes through, and
// any application's while the run serves.
type api struct {
	srv    *http.Server
	url    string
	client *client.Client
	done   chan struct{}

	mu  sync.Mutex
	ids []string // created through the API, in order
	has map[string]bool
	// refused are the workload's creates the API refused, with why.
	refused map[string]string
}

func (a *api) refuse(id, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refused[id] = why
}

func (a *api) why(id string) string {
	if a == nil {
		return ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.refused[id]
}

func (a *api) refusedID(id string) bool { return a.why(id) != "" }

// localIdentity is the caller on loopback: the signature's
// access key, read and not verified (a local run has no IAM). Only a
// loopback listener is allowed (CheckLoopback), so only this machine's
// programs reach it. An unsigned request is refused, as the function URL
// refuses it, so that a program that works here signs as it must there.
func localIdentity(r *http.Request) (string, error) {
	auth := r.Header.Get("Authorization")
	_, cred, ok := strings.Cut(auth, "Credential=")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") || !ok {
		return "", errors.New("the request is not signed with AWS Signature Version 4")
	}
	key, _, _ := strings.Cut(cred, "/")
	return "local:" + key, nil
}

// loopbackHost reports whether a request's Host names the listener on
// port by one of this machine's loopback names.
func loopbackHost(host string, port int) bool {
	h, p, err := net.SplitHostPort(host)
	if err != nil || p != strconv.Itoa(port) {
		return false
	}
	ip := net.ParseIP(h)
	return h == "localhost" || ip != nil && ip.IsLoopback()
}

// CheckLoopback refuses a listen address off this machine: the local
// API identifies callers without verifying signatures.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("listen address %q: a local run serves its API on loopback only (127.0.0.1, ::1 or localhost): it does not verify signatures", addr)
	}
	return nil
}

// startAPI serves the intake on addr (default an ephemeral loopback
// port), dispatching through sender as the deployed function does.
func (s *localRun) startAPI(sender worker.Sender) error {
	addr := s.cfg.Listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if err := CheckLoopback(addr); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	a := &api{has: map[string]bool{}, refused: map[string]string{}, done: make(chan struct{})}
	catalog := s.catalog()
	if len(catalog) == 0 {
		catalog = nil // nothing priced here: the deployed default catalog
	}
	fn, _ := stack.Lookup(stack.Intake)
	h := fn.Build(stack.Deps{Config: config.Config{Catalog: catalog}, Store: createdStore{s.store, a.created}, Sender: sender, Events: s.events,
		Clock: s.clk, Log: s.cfg.Log.With("function", stack.Intake)}).HTTP
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("local: intake API: %w", err)
	}
	a.url = "http://" + ln.Addr().String()
	port := ln.Addr().(*net.TCPAddr).Port
	identified := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host, port) {
			// A page in a browser can reach loopback under a name that
			// resolves there (DNS rebinding); only this machine's own
			// names for the listener are served.
			http.Error(w, "genjobs local: the API answers only requests to 127.0.0.1, [::1] or localhost", http.StatusMisdirectedRequest)
			return
		}
		caller, err := localIdentity(r)
		if err == nil {
			r = r.WithContext(intake.WithCaller(r.Context(), caller))
		}
		h.ServeHTTP(w, r)
	})
	a.srv = &http.Server{Handler: identified, ReadHeaderTimeout: 10 * time.Second}
	go func() { defer close(a.done); _ = a.srv.Serve(ln) }()
	static := credentials.NewStaticCredentialsProvider(LocalCredentials, LocalCredentials, "")
	if a.client, err = client.New(a.url, client.WithCredentials(static), client.WithRegion(localRegion)); err != nil {
		a.stop()
		return err
	}
	s.api = a
	if s.cfg.OnServe != nil {
		s.cfg.OnServe(a.url)
	}
	return nil
}

func (a *api) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
	<-a.done
}

func (a *api) created(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.has[id] {
		a.has[id] = true
		a.ids = append(a.ids, id)
	}
}

// catalog is what the local intake prices: each model the run knows a
// price for, and each of the workload's models (unpriced: 0 credits)
// so a workload against another Genace is not refused.
func (s *localRun) catalog() map[string]int64 {
	c := map[string]int64{}
	for m, p := range s.cfg.Prices {
		c[m] = p
	}
	for _, it := range s.cfg.Workload {
		if _, ok := c[it.Model]; !ok {
			c[it.Model] = 0
		}
	}
	return c
}

// createdStore tells the run about each operation the API creates, so an
// application's operations are followed and reported as the workload's.
type createdStore struct {
	store.Store
	created func(id string)
}

func (c createdStore) Create(ctx context.Context, rec operation.Record) (operation.Record, error) {
	saved, err := c.Store.Create(ctx, rec)
	if err == nil {
		c.created(saved.OperationID)
	}
	return saved, err
}
