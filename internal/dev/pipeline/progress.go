package pipeline

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
)

// Status is a run at one moment, for a progress display.
type Status struct {
	Elapsed time.Duration
	// Total operations, and those automation is done with (terminal or
	// waiting for review).
	Total, Settled int
	// Done and Pending count the settled and the other operations by
	// phase.
	Done, Pending map[operation.Phase]int
	// Blocked names each operation parked for a person, with the reason.
	Blocked map[string]string
	// Posts and Gets Genace answered (-1 when not the built-in simulator),
	// and the messages in the dead-letter queues.
	Posts, Gets, DLQ int
	// Genace is the latest problem reaching Genace ("" when its last
	// answer was fine): what a person must fix before anything moves.
	Genace string
}

// Key is what changes when something happened: a display prints a new
// line only when it differs (elapsed time and rates always change).
func (s Status) Key() string {
	var phases []string
	for _, p := range operation.Phases {
		phases = append(phases, fmt.Sprintf("%d/%d", s.Done[p], s.Pending[p]))
	}
	blocked := make([]string, 0, len(s.Blocked))
	for id, why := range s.Blocked {
		blocked = append(blocked, id+": "+why)
	}
	slices.Sort(blocked)
	return fmt.Sprintf("%s|%d|%d|%d|%s|%s", strings.Join(phases, ", "), s.Posts, s.Gets, s.DLQ, s.Genace, strings.Join(blocked, "; "))
}

// Line renders the status as one plain line: what is settled, at what
// rate, what is still pending, Genace's counts and any problem.
func (s Status) Line() string {
	var b strings.Builder
	rate := 0.0
	if s.Elapsed > 0 {
		rate = float64(s.Settled) / s.Elapsed.Seconds()
	}
	fmt.Fprintf(&b, "%d/%d settled (%.1f/s)", s.Settled, s.Total, rate)
	var pending, done []string
	for _, p := range operation.Phases {
		if n := s.Done[p]; n > 0 {
			done = append(done, fmt.Sprintf("%s %d", p, n))
		}
		if n := s.Pending[p]; n > 0 {
			pending = append(pending, fmt.Sprintf("%s %d", p, n))
		}
	}
	if len(done) > 0 {
		fmt.Fprintf(&b, " | %s", strings.Join(done, ", "))
	}
	if len(pending) > 0 {
		fmt.Fprintf(&b, " | pending: %s", strings.Join(pending, ", "))
	}
	if s.Posts >= 0 {
		fmt.Fprintf(&b, " | POSTs %d, GETs %d", s.Posts, s.Gets)
	}
	if s.DLQ > 0 {
		fmt.Fprintf(&b, " | DLQ %d", s.DLQ)
	}
	for _, id := range slices.Sorted(maps.Keys(s.Blocked)) {
		fmt.Fprintf(&b, " | %s waits for review: %s", id, s.Blocked[id])
	}
	if s.Genace != "" {
		fmt.Fprintf(&b, " | Genace: %s", s.Genace)
	}
	return b.String()
}

// RefusedError ends a run whose Genace refuses the API key (401 or 403):
// no operation can move until a person fixes the configuration.
type RefusedError struct{ Status int }

func (e *RefusedError) Error() string {
	return fmt.Sprintf("Genace answered %d %s: check GENACE_API_KEY", e.Status, strings.ToLower(http.StatusText(e.Status)))
}

// ErrGenaceUnreachable ends a run whose Genace stayed unreachable for
// Config.GiveUpAfter.
var ErrGenaceUnreachable = errors.New("cannot reach Genace")

// wireWatch watches the Genace client's requests at the transport: the
// last problem (a refused key, a connection that fails) for the progress
// display and for ending the run early.
type wireWatch struct {
	mu           sync.Mutex
	last         string
	unauthorized int       // HTTP status, 0 when none
	failingSince time.Time // first of the current run of transport errors
	lastErr      error
}

func (w *wireWatch) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		w.mu.Lock()
		defer w.mu.Unlock()
		switch {
		case err != nil && req.Context().Err() == nil:
			if w.failingSince.IsZero() {
				w.failingSince = time.Now()
			}
			w.lastErr = err
			w.last = "unreachable: " + err.Error()
		case err != nil:
			// Our own cancellation (a long poll cut short): no news.
		case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
			if strings.Contains(req.URL.Path, "/api/v1/jobs") { // the API, not a signed output URL (whose 403 is the URL's)
				w.unauthorized = resp.StatusCode
				w.last = fmt.Sprintf("answered %d %s: check GENACE_API_KEY", resp.StatusCode, strings.ToLower(http.StatusText(resp.StatusCode)))
			}
			w.failingSince = time.Time{}
		default:
			w.failingSince, w.last = time.Time{}, ""
		}
		return resp, err
	})
}

func (w *wireWatch) problem() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// fatal says why the run cannot go on: Genace refused the key, or has
// been unreachable for giveUp.
func (w *wireWatch) fatal(giveUp time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.unauthorized != 0:
		return &RefusedError{Status: w.unauthorized}
	case !w.failingSince.IsZero() && time.Since(w.failingSince) >= giveUp:
		return fmt.Errorf("%w for %s: %v", ErrGenaceUnreachable, giveUp, w.lastErr)
	}
	return nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
