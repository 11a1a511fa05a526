package worker_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/worker"
)

func TestJudge(t *testing.T) {
	t.Parallel()
	api := func(status int, code string) error {
		return fmt.Errorf("genace get job_x: %w", &genace.APIError{Op: "get", StatusCode: status, Code: code})
	}
	cases := []struct {
		name     string
		err      error
		verdict  worker.Verdict
		category string
		budget   int // with a transient budget of 50
	}{
		{"5xx", api(500, "internal"), worker.VerdictRetry, "fallback", 50},
		{"408", api(408, ""), worker.VerdictRetry, "fallback", 50},
		{"timeout", &genace.TransportError{Op: "get", Timeout: true}, worker.VerdictRetry, "fallback", 50},
		{"store error", errors.New("s3: InternalError"), worker.VerdictRetry, "fallback", 50},
		{"429", &genace.APIError{Op: "get", StatusCode: http.StatusTooManyRequests, RetryAfter: 7 * time.Second}, worker.VerdictWait, "genace_rate_limited", 0},
		{"key", api(401, "unauthorized"), worker.VerdictKey, "genace_unauthorized", 0},
		{"404 not_found", api(404, "not_found"), worker.VerdictPark, "genace_job_not_found", 1},
		{"400", api(400, "invalid_request"), worker.VerdictPark, "genace_refused", 1},
		{"drift", &genace.DecodeError{Op: "get", StatusCode: 200}, worker.VerdictSuspect, "genace_contract_drift", worker.SuspectAttempts},
		{"body over the limit", fmt.Errorf("get: transport: %w", genace.ErrBodyTooLarge), worker.VerdictSuspect, "genace_contract_drift", worker.SuspectAttempts},
		{"mismatch", fmt.Errorf("output 0: %w", artifact.ErrMismatch), worker.VerdictSuspect, "artifact_verify_failed", worker.SuspectAttempts},
		{"conflict", worker.MarkPermanent(artifact.ErrConflict), worker.VerdictPark, "artifact_conflict", 1},
		{"url expired twice", &genace.APIError{Op: "download", StatusCode: http.StatusGone}, worker.VerdictRetry, "signed_url_expired", 50},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := worker.Judge(c.err, "fallback")
			if f.Verdict != c.verdict || f.Category != c.category || f.Budget(50) != c.budget {
				t.Fatalf("Judge(%v) = %+v budget %d; want %s %s budget %d", c.err, f, f.Budget(50), c.verdict, c.category, c.budget)
			}
		})
	}
	if f := worker.Judge(cases[4].err, ""); f.Wait != 7*time.Second {
		t.Fatalf("429 wait %s, want Retry-After's 7s", f.Wait)
	}
}

func TestParks(t *testing.T) {
	t.Parallel()
	retry := worker.Failure{Category: "genace_read_failed", Verdict: worker.VerdictRetry}
	drift := worker.Failure{Category: "genace_contract_drift", Verdict: worker.VerdictSuspect}
	wait := worker.Failure{Category: "genace_rate_limited", Verdict: worker.VerdictWait}
	cases := []struct {
		f        worker.Failure
		failures int
		last     string
		want     bool
	}{
		{retry, 9, "genace_read_failed", false},
		{retry, 10, "genace_read_failed", true},
		{drift, 3, "genace_contract_drift", true},
		{drift, 2, "genace_contract_drift", false},
		// A drift after an outage's failures is not parked for them.
		{drift, 9, "genace_read_failed", false},
		{wait, 1000, "genace_read_failed", false},
	}
	for _, c := range cases {
		if got := c.f.Parks(c.failures, c.last, 10); got != c.want {
			t.Errorf("%s at %d after %s: parks %t, want %t", c.f.Category, c.failures, c.last, got, c.want)
		}
	}
}
