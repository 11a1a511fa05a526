// Package genace is the client for the Genace render API (see
// shared/genace-api.md). Genace has no idempotency on job creation, so
// Submit never retries and classifies every outcome into exactly one
// Outcome; Get and Download return typed errors and Retryable decides
// which ones are transient. The API key and signed output URLs never
// appear in errors, fmt output or slog output.
//
// No layer re-sends a POST. The request has no GetBody, so once any of
// the body was written neither net/http's HTTP/2 transport (which
// otherwise retries after REFUSED_STREAM, a PROTOCOL_ERROR from the peer
// or a GOAWAY) nor its HTTP/1 transport can rewind it; redirects are not
// followed for API calls; no Idempotency-Key header is sent (net/http
// treats a request carrying one as replayable). The one thing this
// package cannot see is a RoundTripper that buffers bodies and retries on
// its own: New must never be given one. GETs carry no body and stay
// retryable by the transport.
package genace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// MaxBodyBytes caps every JSON response body read by the client. A job
// object is a few KiB; the cap stops a broken or hostile server from
// exhausting a Lambda's memory.
const MaxBodyBytes = 1 << 20

// MaxWait is the longest long poll Genace accepts (wait=30).
const MaxWait = 30 * time.Second

const (
	opSubmit   = "submit"
	opGet      = "get"
	opDownload = "download"
)

// Client talks to one Genace endpoint with one API key. It is safe for
// concurrent use. It holds no timeouts of its own: every call takes an
// explicit timeout so long polls and short reads can be bounded
// differently.
type Client struct {
	base *url.URL     // validated, no userinfo/query/fragment, no trailing slash
	auth secret       // "Bearer <key>", redacted in every printing path
	api  *http.Client // redirects disabled: a followed 307 would re-send a POST
	dl   *http.Client // the caller's redirect policy, for signed URLs
}

// Transport is the transport for a client that holds up to held long
// polls at once (an observe invocation holds up to OBSERVE_HOLD records,
// each with its poll, and the next poll overlaps the last): Go's
// DefaultTransport settings, keeping up to held idle connections to the
// host instead of 2. With 2, over HTTP/1.1 nearly every poll of a full
// invocation dialled again, a TCP and TLS handshake per 30 s poll, on
// the little CPU a 128 MB sandbox has. Over HTTP/2 the polls share
// connections as streams and this changes nothing.
func Transport(held int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = max(held, t.MaxIdleConnsPerHost)
	t.MaxIdleConns = max(held, t.MaxIdleConns)
	return t
}

// New builds a client. baseURL is like "http://127.0.0.1:1234" (an
// optional path prefix is kept). httpClient may be nil, giving a client
// with no Timeout; a non-nil client is copied and its Timeout (if any)
// caps every call including long polls, so prefer leaving it zero. The
// error never contains the key or the URL, since the URL may carry
// credentials.
func New(baseURL, apiKey string, httpClient *http.Client) (*Client, error) {
	if baseURL == "" {
		return nil, fmt.Errorf("%w: empty base URL", ErrInvalidArgument)
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("%w: unparseable base URL", ErrInvalidArgument)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: base URL must be absolute http(s)", ErrInvalidArgument)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: base URL must not have userinfo, query or fragment", ErrInvalidArgument)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	if apiKey == "" {
		return nil, fmt.Errorf("%w: empty API key", ErrInvalidArgument)
	}
	for _, r := range apiKey {
		if r <= ' ' || r == 0x7f {
			return nil, fmt.Errorf("%w: API key contains whitespace or control characters", ErrInvalidArgument)
		}
	}
	var hc http.Client
	if httpClient != nil {
		hc = *httpClient
	}
	dl := hc
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{base: u, auth: secret("Bearer " + apiKey), api: &hc, dl: &dl}, nil
}

// String describes the client without the key.
func (c Client) String() string {
	return "genace.Client{base: " + c.baseString() + ", key: [redacted]}"
}

// GoString is String, so %#v cannot print the key either.
func (c Client) GoString() string { return c.String() }

// Format makes every fmt verb use String: fmt prints unexported fields
// raw, which would otherwise expose the key.
func (c Client) Format(f fmt.State, verb rune) { _, _ = f.Write([]byte(c.String())) }

// LogValue logs the endpoint only.
func (c Client) LogValue() slog.Value { return slog.StringValue(c.String()) }

func (c Client) baseString() string {
	if c.base == nil {
		return "<nil>"
	}
	return c.base.Scheme + "://" + c.base.Host + c.base.Path
}

// Outcome classifies a POST /api/v1/jobs exactly. Because Genace has no
// idempotency, the outcome, not the error, decides what the caller may do
// next.
//
// The job id is read first: an answer that names a valid job id yields it
// whatever else in the body breaks the contract, since only a job that
// exists gets an id. The status decides only when no job is named.
type Outcome string

const (
	// OutcomeAccepted: a 2xx (202 by contract) whose body names a job id.
	// The job exists and credits are reserved; persist JobID before
	// anything else. Job is the decoded body, or nil when the rest of the
	// body drifted from the contract (Drift says how): GET the job for its
	// state. Never POST again for this operation.
	OutcomeAccepted Outcome = "accepted"
	// OutcomeSubmissionFailed: a non-2xx whose envelope carries
	// error.job_id (a 5xx by contract; on any other status it is also
	// Drift). A job record exists (state failed, submission_failure true)
	// and credits may be reserved; persist JobID and GET it like any job:
	// the GETs advance its refund. Never POST again without
	// reconciliation.
	OutcomeSubmissionFailed Outcome = "submission_failed"
	// OutcomeRejected: a 4xx other than 401, 403, 408 and 429 naming no
	// job (400, 402, 404, 409, 422, ...), or StatusCode 0 when the request
	// was refused locally before sending. Nothing was created or charged;
	// resubmitting the same request will be rejected again until it or the
	// account changes.
	OutcomeRejected Outcome = "rejected"
	// OutcomeRateLimited: HTTP 429 naming no job. Nothing was created; the
	// caller may POST again after RetryAfter.
	OutcomeRateLimited Outcome = "rate_limited"
	// OutcomeUnauthorized: HTTP 401 or 403 naming no job: Genace refused
	// our credentials, which is a configuration error of ours, not the
	// request's. Nothing was created (the contract says so of both); the
	// caller may POST the same request again once the key is fixed.
	OutcomeUnauthorized Outcome = "unauthorized"
	// OutcomeUnknown: the request may or may not have created a job (5xx
	// without job id, 408, 1xx/3xx, timeout, reset, unreadable body after
	// sending, a 2xx that names no job id, an answer that names a job only
	// by an id outside message.ValidJobID: see UnusableJobID). The caller
	// must NOT POST again; it must reconcile (find the job by operation id
	// out of band, or have an operator decide). RequestSent false proves
	// no connection was obtained, hence no job.
	OutcomeUnknown Outcome = "unknown"
)

// SubmitRequest is one job creation. OperationID is the caller's own id
// for the logical operation; it is sent as metadata.operation_id so a job
// found during reconciliation can be tied back to the operation.
type SubmitRequest struct {
	OperationID string
	Model       string
	Input       json.RawMessage // must be a JSON object
}

// SubmitResult is the classified outcome of one POST. Exactly the fields
// the outcome promises are filled.
type SubmitResult struct {
	Outcome Outcome
	// Job is the decoded body of an OutcomeAccepted; nil if it drifted.
	Job *Job
	// JobID is set for OutcomeAccepted and OutcomeSubmissionFailed, always,
	// and satisfies message.ValidJobID.
	JobID string
	// Drift is set when the answer named JobID but otherwise broke the
	// contract: an unknown state, missing or mistyped fields, trailing
	// junk, a body cut off after the id, a job id on a status that should
	// create nothing. The job exists all the same. Its text names fields
	// and reasons, never body content.
	Drift error
	// UnusableJobID, on an OutcomeUnknown, is evidence that the answer
	// named a job by an id outside message.ValidJobID, or by conflicting
	// ids: quoted, capped, a URL query cut off. A job probably exists; the
	// evidence is for an operator's reconciliation, never a handle to GET.
	UnusableJobID string
	StatusCode    int           // HTTP status if a status line arrived, else 0
	ErrorCode     string        // Genace error.code when an envelope was readable
	RetryAfter    time.Duration // OutcomeRateLimited
	// RequestSent is false only when no connection to Genace was ever
	// obtained, which proves the POST never left this process.
	RequestSent bool
	Err         error // nil only for OutcomeAccepted
}

// LogValue logs the classification without job outputs or secrets.
func (r SubmitResult) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("outcome", string(r.Outcome)),
		slog.String("job_id", r.JobID),
		slog.Int("status", r.StatusCode),
		slog.String("error_code", r.ErrorCode),
		slog.Bool("request_sent", r.RequestSent),
	}
	if r.RetryAfter > 0 {
		attrs = append(attrs, slog.Duration("retry_after", r.RetryAfter))
	}
	if r.Drift != nil {
		attrs = append(attrs, slog.String("drift", r.Drift.Error()))
	}
	if r.UnusableJobID != "" {
		attrs = append(attrs, slog.String("unusable_job_id", r.UnusableJobID))
	}
	if r.Job != nil {
		attrs = append(attrs, slog.Any("job", r.Job))
	}
	if r.Err != nil {
		attrs = append(attrs, slog.String("err", r.Err.Error()))
	}
	return slog.GroupValue(attrs...)
}

// envelope is Genace's error body.
type envelope struct {
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		JobID   string `json:"job_id"`
	} `json:"error"`
}

// strictEnvelope reports how an error body departs from the contract: not
// one JSON object, an error member that is missing or mistyped, no code.
// Unknown fields are additive and fine.
func strictEnvelope(data []byte) error {
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return fmt.Errorf("envelope json: %w", stripJSONErr(err))
	}
	if env.Error == nil || env.Error.Code == "" {
		return errors.New("envelope: missing error.code")
	}
	return nil
}

// Submit POSTs one job, exactly once, and classifies the result. It never
// retries: a retry after an unknown outcome could create and charge a
// second job. timeout bounds the whole call.
func (c *Client) Submit(ctx context.Context, req SubmitRequest, timeout time.Duration) SubmitResult {
	res := c.submit(ctx, req, timeout)
	if res.Err != nil {
		res.Err = fmt.Errorf("genace submit %s: %w", req.OperationID, res.Err)
	}
	return res
}

func (c *Client) submit(ctx context.Context, req SubmitRequest, timeout time.Duration) SubmitResult {
	reject := func(msg string) SubmitResult {
		return SubmitResult{Outcome: OutcomeRejected, Err: fmt.Errorf("%w: %s", ErrInvalidArgument, msg)}
	}
	switch {
	case req.OperationID == "":
		return reject("empty operation id")
	case req.Model == "":
		return reject("empty model")
	case timeout <= 0:
		return reject("timeout must be positive")
	case !isJSONObject(req.Input):
		return reject("input must be a JSON object")
	}
	body, err := json.Marshal(struct {
		Model    string            `json:"model"`
		Input    json.RawMessage   `json:"input"`
		Metadata map[string]string `json:"metadata"`
	}{req.Model, req.Input, map[string]string{"operation_id": req.OperationID}})
	if err != nil {
		return reject("encode body")
	}

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var gotConn atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { gotConn.Store(true) },
	})
	hreq, err := c.newRequest(ctx, http.MethodPost, c.jobsURL(""), body)
	if err != nil {
		return reject("build request")
	}
	resp, err := c.api.Do(hreq)
	if err != nil {
		return SubmitResult{Outcome: OutcomeUnknown, RequestSent: gotConn.Load(), Err: c.transportErr(opSubmit, err, "")}
	}
	defer resp.Body.Close()
	return c.classify(resp)
}

// classify reads and classifies the answer to a POST that was sent. The
// job id comes first (see Outcome); only an answer naming no job is
// classified by its status, as the contract's table says.
func (c *Client) classify(resp *http.Response) SubmitResult {
	code := resp.StatusCode
	res := SubmitResult{StatusCode: code, RequestSent: true}
	// Even a body that breaks off may name the job before it does.
	data, readErr := readBody(resp.Body)
	if readErr != nil {
		readErr = c.transportErr(opSubmit, readErr, "")
	}
	ok := code >= 200 && code < 300
	var n named
	if ok {
		n = namedIn(data, "id")
	} else {
		n = namedIn(data, "error", "job_id")
	}
	var ae *APIError
	if !ok {
		ae = c.apiError(opSubmit, resp, data)
		res.ErrorCode = ae.Code
	}
	drift := func(reason error) *DecodeError { return &DecodeError{Op: opSubmit, StatusCode: code, err: reason} }

	switch {
	case n.id != "" && ok:
		res.Outcome, res.JobID = OutcomeAccepted, n.id
		if readErr != nil {
			res.Drift = drift(fmt.Errorf("body broke off after the job id: %w", readErr))
			return res
		}
		j, err := decodeJob(data)
		if err != nil {
			res.Drift = drift(err)
			return res
		}
		if j.ID != n.id { // unreachable while both read keys alike; never trust a Job naming another id
			res.Drift = drift(errors.New("job: decoded id differs from the id read first"))
			return res
		}
		res.Job = j
		return res
	case n.id != "":
		ae.JobID = n.id
		res.Outcome, res.JobID, res.Err = OutcomeSubmissionFailed, n.id, ae
		switch {
		case readErr != nil:
			res.Drift = drift(fmt.Errorf("envelope broke off after error.job_id: %w", readErr))
		case code < 500 || code > 599:
			res.Drift = drift(fmt.Errorf("error.job_id on HTTP %d, which the contract says creates nothing", code))
		default:
			if err := strictEnvelope(data); err != nil {
				res.Drift = drift(err)
			}
		}
		return res
	case n.evidence != "":
		res.Outcome, res.UnusableJobID = OutcomeUnknown, n.evidence
		res.Err = drift(errors.New("the answer names a job only by an id outside the job id definition"))
		return res
	}

	switch {
	case ok && readErr != nil:
		res.Outcome, res.Err = OutcomeUnknown, readErr
	case ok:
		err := errors.New("job: missing id")
		if _, derr := decodeJob(data); derr != nil {
			err = derr
		}
		res.Outcome, res.Err = OutcomeUnknown, drift(err)
	case code == http.StatusTooManyRequests:
		res.Outcome, res.RetryAfter, res.Err = OutcomeRateLimited, ae.RetryAfter, ae
	case refusesKey(opSubmit, code):
		// Our key, not the request: the contract says a 401 or 403 created
		// nothing, so the same request may go again once the key is fixed.
		res.Outcome, res.Err = OutcomeUnauthorized, ae
	case code == http.StatusRequestTimeout:
		// Not among the contract's "nothing created" answers: a proxy or
		// the server may send it after the request was acted on.
		res.Outcome, res.Err = OutcomeUnknown, ae
	case code >= 400 && code < 500:
		// The status line alone proves rejection; an unreadable body only
		// loses the error code.
		res.Outcome, res.Err = OutcomeRejected, ae
	default:
		// A 5xx without job id, or 1xx/3xx, which the contract does not
		// know: the server may have acted.
		res.Outcome, res.Err = OutcomeUnknown, ae
	}
	return res
}

// Get reads a job. wait in [0, 30s] long-polls (?wait=N, whole seconds,
// rounded down; 0 answers at once). timeout bounds the whole request and
// must exceed wait, or the call would time out before Genace answers.
// Errors are wrapped as "genace get <id>: ..." and classified by
// Retryable; errors.Is works for ErrNotFound, ErrRateLimited and
// ErrUnauthorized.
func (c *Client) Get(ctx context.Context, jobID string, wait, timeout time.Duration) (*Job, error) {
	j, err := c.get(ctx, jobID, wait, timeout)
	if err != nil {
		return nil, fmt.Errorf("genace get %s: %w", jobID, err)
	}
	return j, nil
}

func (c *Client) get(ctx context.Context, jobID string, wait, timeout time.Duration) (*Job, error) {
	switch {
	case !validID(jobID):
		return nil, fmt.Errorf("%w: invalid job id", ErrInvalidArgument)
	case wait < 0 || wait > MaxWait:
		return nil, fmt.Errorf("%w: wait must be within 0..%s", ErrInvalidArgument, MaxWait)
	case timeout <= wait:
		return nil, fmt.Errorf("%w: timeout %s must exceed wait %s", ErrInvalidArgument, timeout, wait)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := c.jobsURL(jobID)
	if secs := int64(wait / time.Second); secs > 0 {
		u += "?wait=" + strconv.FormatInt(secs, 10)
	}
	req, err := c.newRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: build request", ErrInvalidArgument)
	}
	resp, err := c.api.Do(req)
	if err != nil {
		return nil, c.transportErr(opGet, err, "")
	}
	defer resp.Body.Close()
	data, readErr := readBody(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, c.apiError(opGet, resp, data)
	}
	if readErr != nil {
		return nil, c.transportErr(opGet, readErr, "")
	}
	j, err := decodeJob(data)
	if err != nil {
		return nil, &DecodeError{Op: opGet, StatusCode: resp.StatusCode, err: err}
	}
	if j.ID != jobID {
		return nil, &DecodeError{Op: opGet, StatusCode: resp.StatusCode, err: errors.New("job id in body does not match request")}
	}
	return j, nil
}

// Download GETs a signed output URL and returns the body as a stream (it
// is never buffered whole) plus its length (-1 if unknown). The request
// carries no Authorization header: the signature is the credential, and
// the API key must not travel to a storage host. timeout bounds the call
// including reading the body; closing the body releases it. A 403 or 410
// is an *APIError matching ErrURLExpired: GET the job again for fresh
// URLs. Errors never contain the URL or its query.
func (c *Client) Download(ctx context.Context, u SignedURL, timeout time.Duration) (io.ReadCloser, int64, error) {
	rc, n, err := c.download(ctx, u, timeout)
	if err != nil {
		return nil, 0, fmt.Errorf("genace download: %w", err)
	}
	return rc, n, nil
}

func (c *Client) download(ctx context.Context, u SignedURL, timeout time.Duration) (io.ReadCloser, int64, error) {
	raw := u.Reveal()
	if err := validOutputURL(raw); err != nil {
		return nil, 0, fmt.Errorf("%w: signed URL: %v", ErrInvalidArgument, err)
	}
	if timeout <= 0 {
		return nil, 0, fmt.Errorf("%w: timeout must be positive", ErrInvalidArgument)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		cancel()
		return nil, 0, fmt.Errorf("%w: build request", ErrInvalidArgument)
	}
	req.Header.Set("Accept", "*/*")
	resp, err := c.dl.Do(req)
	if err != nil {
		cancel()
		return nil, 0, c.transportErr(opDownload, err, raw)
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := readBody(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, 0, c.apiError(opDownload, resp, data)
	}
	return &downloadBody{rc: resp.Body, cancel: cancel, c: c, raw: raw}, resp.ContentLength, nil
}

// downloadBody ties the per-call timeout to the body's lifetime and
// scrubs read errors, which can come from the transport with request
// details.
type downloadBody struct {
	rc     io.ReadCloser
	cancel context.CancelFunc
	c      *Client
	raw    string
}

// Read passes data through and scrubs any transport error.
func (b *downloadBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF {
		err = b.c.transportErr(opDownload, err, b.raw)
	}
	return n, err
}

// Close releases the connection and the per-call timeout.
func (b *downloadBody) Close() error {
	err := b.rc.Close()
	b.cancel()
	if err != nil {
		return b.c.transportErr(opDownload, err, b.raw)
	}
	return nil
}

// newRequest sets the headers every API request carries.
func (c *Client) newRequest(ctx context.Context, method, u string, body []byte) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		// No replay: without GetBody neither the HTTP/2 transport (after
		// REFUSED_STREAM, PROTOCOL_ERROR or GOAWAY) nor the HTTP/1
		// transport nor a redirect can rewind and re-send the body once
		// any of it was written. ContentLength stays as NewRequest set it.
		req.GetBody = nil
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", string(c.auth))
	req.Header.Set("Accept", "application/json")
	return req, nil
}

// jobsURL is base/api/v1/jobs[/id], with the id path-escaped.
func (c *Client) jobsURL(jobID string) string {
	u := *c.base
	u.Path += "/api/v1/jobs"
	if jobID != "" {
		u.RawPath = u.EscapedPath() + "/" + url.PathEscape(jobID)
		u.Path += "/" + jobID
	}
	return u.String()
}

// readBody reads at most MaxBodyBytes; a longer body is an error rather
// than a silent truncation that might still decode. On error it still
// returns what was read (at most MaxBodyBytes), which may name a job.
func readBody(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxBodyBytes+1))
	if err != nil {
		return data, err
	}
	if len(data) > MaxBodyBytes {
		return data[:MaxBodyBytes], fmt.Errorf("%w: body exceeds %d bytes", ErrBodyTooLarge, MaxBodyBytes)
	}
	return data, nil
}

// apiError builds an *APIError from a non-success answer; an unreadable or
// non-JSON envelope only loses the code, and a mistyped field elsewhere
// in it loses nothing else.
func (c *Client) apiError(op string, resp *http.Response, data []byte) *APIError {
	ae := &APIError{Op: op, StatusCode: resp.StatusCode}
	var env envelope
	_ = json.Unmarshal(data, &env) // fills what it can before any type error
	if env.Error != nil {
		ae.Code = truncate(env.Error.Code, 64)
	}
	ae.JobID = namedIn(data, "error", "job_id").id
	if resp.StatusCode == http.StatusTooManyRequests {
		ae.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"))
	}
	return ae
}

// maxRetryAfter bounds a server's hint so a bogus header cannot park a
// worker for days.
const maxRetryAfter = time.Hour

// parseRetryAfter reads delay-seconds; missing or malformed means 1s, the
// smallest delay that still backs off.
func parseRetryAfter(v string) time.Duration {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return time.Second
	}
	d := time.Duration(n) * time.Second
	if n > int64(maxRetryAfter/time.Second) {
		d = maxRetryAfter
	}
	return d
}

// transportErr converts a net/http error into a *TransportError whose
// message holds no URL: *url.Error is unwrapped (it prints the URL with
// its query), and the key and the signed URL are scrubbed from whatever
// text remains, defensively.
func (c *Client) transportErr(op string, err error, rawURL string) error {
	var te *TransportError
	if errors.As(err, &te) {
		return err
	}
	inner := err
	var ue *url.Error
	if errors.As(err, &ue) {
		inner = ue.Err
	}
	out := &TransportError{Op: op, err: inner}
	switch {
	case errors.Is(err, context.Canceled):
		out.Canceled = true
	case errors.Is(err, context.DeadlineExceeded):
		out.Timeout = true
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			out.Timeout = true
		}
	}
	msg := "<nil>"
	if inner != nil {
		msg = inner.Error()
	}
	msg = c.scrub(msg, rawURL)
	if out.Timeout && !strings.Contains(msg, "timeout") && !strings.Contains(msg, "deadline") {
		msg = "timeout: " + msg
	}
	out.msg = msg
	if inner != nil && c.scrub(inner.Error(), rawURL) != inner.Error() {
		// The cause itself mentions a secret: do not expose it via Unwrap.
		out.err = errors.New(msg)
	}
	return out
}

// scrub removes the key, the signed URL and its query from s.
func (c *Client) scrub(s, rawURL string) string {
	if key := strings.TrimPrefix(string(c.auth), "Bearer "); key != "" {
		s = strings.ReplaceAll(s, key, "[redacted]")
	}
	if rawURL != "" {
		s = strings.ReplaceAll(s, rawURL, redactedURL)
		if u, err := url.Parse(rawURL); err == nil && u.RawQuery != "" {
			s = strings.ReplaceAll(s, u.RawQuery, "[redacted]")
		}
	}
	return s
}

func isJSONObject(b json.RawMessage) bool {
	t := bytes.TrimSpace(b)
	return len(t) > 0 && t[0] == '{' && json.Valid(t)
}
