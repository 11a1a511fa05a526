package genace

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Sentinels for errors.Is. They exist so callers branch on meaning rather
// than on status codes scattered through their code.
var (
	// ErrNotFound: Genace does not know the job (HTTP 404 with its
	// not_found code). Permanent.
	ErrNotFound = errors.New("genace: not found")
	// ErrRateLimited: Genace answered 429; the *APIError carries
	// RetryAfter. Transient.
	ErrRateLimited = errors.New("genace: rate limited")
	// ErrUnauthorized: Genace refused our credentials (HTTP 401 or 403 on
	// an API call, not on a signed output URL). It is a configuration
	// error of ours, not a fault of the request or the job: the same call
	// succeeds once the key is fixed, so it is retryable, and the *APIError
	// names the status.
	ErrUnauthorized = errors.New("genace: API key refused")
	// ErrURLExpired: a signed output URL was refused (403 or 410). Fetch
	// the job again for freshly signed URLs; retrying the same URL is
	// pointless.
	ErrURLExpired = errors.New("genace: signed URL expired or refused")
	// ErrInvalidArgument: the call was refused locally before anything was
	// sent (bad id, timeout not above wait, ...). Permanent.
	ErrInvalidArgument = errors.New("genace: invalid argument")
	// ErrBodyTooLarge: an answer's body is over MaxBodyBytes. It comes
	// wrapped in a *TransportError (the body was cut off here), but unlike
	// a broken connection it repeats on every read: contract drift.
	ErrBodyTooLarge = errors.New("genace: body over the limit")
)

// codeNotFound is the contract's error code for an id Genace does not
// know.
const codeNotFound = "not_found"

// APIError is a non-success HTTP answer from Genace. It carries only the
// operation, status, Genace's error code and retry hint: never the URL,
// the query or the key.
type APIError struct {
	Op         string        // "submit", "get" or "download"
	StatusCode int           // HTTP status
	Code       string        // Genace error.code, "" if the body had none
	JobID      string        // error.job_id when present and a valid job id (submission failures)
	RetryAfter time.Duration // from Retry-After on 429; 0 otherwise
}

// Error names op, status and code, so logs say what happened without any
// request detail that could hold a secret.
func (e *APIError) Error() string {
	code := e.Code
	if code == "" {
		code = "no_code"
	}
	s := fmt.Sprintf("%s: HTTP %d %s", e.Op, e.StatusCode, code)
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return s
}

// Is maps statuses onto the package sentinels.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		// Only Genace's own answer says it lacks the job: a bare 404 (a
		// proxy, a wrong base URL) must not park operations one by one.
		return e.StatusCode == http.StatusNotFound && e.Code == codeNotFound
	case ErrRateLimited:
		return e.StatusCode == http.StatusTooManyRequests
	case ErrURLExpired:
		return e.Op == opDownload && (e.StatusCode == http.StatusForbidden || e.StatusCode == http.StatusGone)
	case ErrUnauthorized:
		return refusesKey(e.Op, e.StatusCode)
	}
	return false
}

// refusesKey reports whether an answer to an API call (a POST or GET of
// /api/v1/jobs, which carry the key) refuses our credentials. A signed
// output URL carries no key: its 403 is the URL's (ErrURLExpired).
func refusesKey(op string, status int) bool {
	return op != opDownload && (status == http.StatusUnauthorized || status == http.StatusForbidden)
}

// TransportError is a failure below HTTP: timeout, reset, refused
// connection, a body that broke off. Its message has been stripped of the
// request URL (net/http's *url.Error embeds it, query string and all).
type TransportError struct {
	Op       string
	Timeout  bool // the per-call timeout or a network timeout fired
	Canceled bool // the caller's context was canceled
	msg      string
	err      error
}

// Error describes the failure without URL, query or key.
func (e *TransportError) Error() string { return e.Op + ": transport: " + e.msg }

// Unwrap exposes the underlying (URL-free) cause, so errors.Is works for
// context.DeadlineExceeded, syscall.ECONNRESET, io.ErrUnexpectedEOF.
func (e *TransportError) Unwrap() error { return e.err }

// DecodeError means an answer arrived but could not be decoded or failed
// validation. For a POST answer that names no usable job id it makes the
// outcome unknown; for one that does, it is SubmitResult.Drift. For a GET
// it is transient (the next read may be fine). It never quotes the body.
type DecodeError struct {
	Op         string
	StatusCode int
	err        error
}

// Error says which operation's body was bad and why, never the body.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("%s: decode HTTP %d body: %v", e.Op, e.StatusCode, e.err)
}

// Unwrap returns the decoding cause.
func (e *DecodeError) Unwrap() error { return e.err }

// Retryable is the one place deciding whether an error from Get or
// Download is transient (retry the same call later) or permanent (retrying
// cannot help). Transient: 5xx, 429, 408, timeouts, resets and other
// transport failures, decode failures of a 200, and ErrUnauthorized (our
// key refused: the call succeeds once the configuration is fixed; callers
// branch on it first, to alarm rather than count it as a job's failure).
// Permanent: other 4xx such as 400 and 404, signed-URL refusals (403,
// 410), invalid arguments, and the caller's own cancellation. Unknown
// errors are treated as permanent so that a bug surfaces instead of
// looping.
//
// It is not for Submit: a POST is never retried blindly; use
// SubmitResult.Outcome. How long a transient failure is retried, and
// which (a 429, a 200 that no longer decodes) are not worth retrying for
// hours, worker.Judge decides on top of it.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrURLExpired) {
		return false
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.StatusCode >= 500 || ae.StatusCode == http.StatusTooManyRequests ||
			ae.StatusCode == http.StatusRequestTimeout || refusesKey(ae.Op, ae.StatusCode)
	}
	var de *DecodeError
	if errors.As(err, &de) {
		return true
	}
	var te *TransportError
	if errors.As(err, &te) {
		return !te.Canceled
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	return errors.Is(err, context.DeadlineExceeded)
}
