package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"
)

// Client calls one deployment's intake API. It is safe for concurrent use.
type Client struct {
	base     *url.URL
	http     *http.Client
	creds    aws.CredentialsProvider
	region   string
	signer   *v4.Signer
	attempts int
	backoff  [2]time.Duration // first, cap
}

// Option configures New.
type Option func(*Client)

// WithHTTPClient sends the requests through hc (default
// http.DefaultClient). Redirects are never followed whatever hc says: the
// API answers none, and a signed request must not be replayed elsewhere.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.http = hc
		}
	}
}

// WithCredentials signs with p instead of the default credential chain.
func WithCredentials(p aws.CredentialsProvider) Option { return func(c *Client) { c.creds = p } }

// WithRegion names the region to sign for. Without it, a function URL's
// host names it (…lambda-url.REGION.on.aws), else the default chain
// (AWS_REGION, the shared config).
func WithRegion(region string) Option { return func(c *Client) { c.region = region } }

// WithRetry sets how often a request is sent at most (default 5) and the
// backoff between attempts: first, doubling up to limit, with jitter
// (default 200ms up to 5s).
func WithRetry(attempts int, first, limit time.Duration) Option {
	return func(c *Client) { c.attempts, c.backoff = max(attempts, 1), [2]time.Duration{first, max(first, limit)} }
}

var functionURLHost = regexp.MustCompile(`\.lambda-url\.([a-z0-9-]+)\.on\.aws$`)

// New returns a client of the API at endpoint, an http or https URL (the
// function URL, optionally with a base path). Unless WithCredentials and a
// region are given, it loads the standard AWS configuration
// (config.LoadDefaultConfig: environment, shared files, SSO, the
// container or instance role).
func New(endpoint string, opts ...Option) (*Client, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("genjobs client: endpoint %q: want an http(s) URL with a host and no query, like https://ID.lambda-url.REGION.on.aws", endpoint)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c := &Client{base: u, http: http.DefaultClient, signer: v4.NewSigner(), attempts: 5, backoff: [2]time.Duration{200 * time.Millisecond, 5 * time.Second}}
	for _, o := range opts {
		o(c)
	}
	if m := functionURLHost.FindStringSubmatch(u.Hostname()); c.region == "" && m != nil {
		c.region = m[1]
	}
	if c.creds == nil || c.region == "" {
		var lo []func(*config.LoadOptions) error
		if c.region != "" {
			lo = append(lo, config.WithRegion(c.region))
		}
		cfg, err := config.LoadDefaultConfig(context.Background(), lo...)
		if err != nil {
			return nil, fmt.Errorf("genjobs client: load the AWS configuration: %w", err)
		}
		if c.creds == nil {
			c.creds = cfg.Credentials
		}
		c.region = cfg.Region
	}
	if c.region == "" {
		return nil, errors.New("genjobs client: no region to sign for: set AWS_REGION or use WithRegion")
	}
	if c.creds == nil {
		return nil, errors.New("genjobs client: no AWS credentials")
	}
	if _, cached := c.creds.(*aws.CredentialsCache); !cached {
		c.creds = aws.NewCredentialsCache(c.creds)
	}
	hc := *c.http
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.http = &hc
	return c, nil
}

// Create creates the operation req names, and reports whether the answer
// was 201 Created; an operation that already exists with this very request
// is answered as it stands (created false). A create is retried on a
// transport error, 429 and 5xx: that is safe because req.OperationID is
// the idempotency key, so an attempt whose answer was lost and the retry
// that follows are one operation and one render. (Then created is false
// though this call made it.) Another request under an existing id is
// ErrConflict.
func (c *Client) Create(ctx context.Context, req CreateRequest) (st Status, created bool, err error) {
	code, st, err := c.do(ctx, http.MethodPost, "/v1/operations", 0, req)
	return st, code == http.StatusCreated, err
}

// Get reads the operation's status.
func (c *Client) Get(ctx context.Context, id string) (Status, error) {
	_, st, err := c.do(ctx, http.MethodGet, "/v1/operations/"+url.PathEscape(id), 0, nil)
	return st, err
}

// Change replaces the request of an operation not yet claimed for
// submission, conditioned on ifMatch, the Status.Revision the decision was
// made on (ErrPreconditionFailed with Error.CurrentRevision when the
// operation has moved; ErrConflict with Error.Phase once it is past
// changing). Retrying it is safe: the API answers a change already in
// effect with the status, writing nothing.
func (c *Client) Change(ctx context.Context, id string, ifMatch int64, req CreateRequest) (Status, error) {
	_, st, err := c.do(ctx, http.MethodPut, "/v1/operations/"+url.PathEscape(id), ifMatch, req)
	return st, err
}

// Cancel supersedes an operation not yet claimed for submission, with
// nothing charged, conditioned on ifMatch as Change is. After the claim
// Genace has no cancel: ErrConflict, and the job stays tracked until its
// credits settle. Retrying it is safe: a superseded operation is answered
// with its status.
func (c *Client) Cancel(ctx context.Context, id string, ifMatch int64) (Status, error) {
	_, st, err := c.do(ctx, http.MethodPost, "/v1/operations/"+url.PathEscape(id)+"/cancel", ifMatch, nil)
	return st, err
}

// WaitOptions paces Wait: the first interval between reads, doubling up
// to MaxInterval (defaults 1s and 15s).
type WaitOptions struct {
	Interval, MaxInterval time.Duration
}

// Wait reads the operation's status until it is terminal (Status.Terminal:
// delivered, failed, rejected or superseded) or parked, and returns it.
// Parked means an operator review is open (Status.OperatorReview):
// automation has stopped and waits for a person, who may move it on
// later; wait again to follow it. When ctx ends first, Wait returns the
// last status read with ctx's error.
func (c *Client) Wait(ctx context.Context, id string, o WaitOptions) (Status, error) {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.MaxInterval < o.Interval {
		o.MaxInterval = max(o.Interval, 15*time.Second)
	}
	var last Status
	for wait := o.Interval; ; wait = min(2*wait, o.MaxInterval) {
		st, err := c.Get(ctx, id)
		if err != nil {
			// A read cut short answers nothing: the last status seen
			// still stands.
			return last, err
		}
		if last = st; st.Terminal || st.OperatorReview != nil {
			return st, nil
		}
		if err := sleep(ctx, wait); err != nil {
			return st, fmt.Errorf("genjobs client: wait for %s: %w", id, err)
		}
	}
}

// do sends one call, retrying transport errors, 429 and 5xx with capped
// backoff (every call of this API is safe to repeat, see each method).
func (c *Client) do(ctx context.Context, method, path string, ifMatch int64, body any) (int, Status, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return 0, Status{}, fmt.Errorf("%w: the request does not encode as JSON", ErrBadRequest)
		}
	}
	what := method + " " + path
	wait := c.backoff[0]
	for attempt := 1; ; attempt++ {
		code, st, retryAfter, err := c.once(ctx, method, path, ifMatch, payload)
		var apiErr *Error
		retry := err != nil && ctx.Err() == nil && (!errors.As(err, &apiErr) || apiErr.Status == http.StatusTooManyRequests || apiErr.Status >= 500)
		if !retry || attempt >= c.attempts {
			if err != nil && apiErr == nil {
				err = fmt.Errorf("genjobs client: %s: %w", what, err)
			}
			return code, st, err
		}
		if err := sleep(ctx, max(retryAfter, wait/2+rand.N(wait/2+1))); err != nil {
			return 0, Status{}, fmt.Errorf("genjobs client: %s: %w", what, err)
		}
		wait = min(2*wait, c.backoff[1])
	}
}

// once sends one signed attempt and reads its answer: the status, or the
// API's *Error (with what Retry-After asked, capped).
func (c *Client) once(ctx context.Context, method, path string, ifMatch int64, payload []byte) (int, Status, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, bytes.NewReader(payload))
	if err != nil {
		return 0, Status{}, 0, err
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if ifMatch != 0 {
		req.Header.Set("If-Match", strconv.Quote(strconv.FormatInt(ifMatch, 10)))
	}
	req.Header.Set("Accept", "application/json")
	sum := sha256.Sum256(payload)
	hash := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", hash)
	creds, err := c.creds.Retrieve(ctx)
	if err != nil {
		return 0, Status{}, 0, fmt.Errorf("retrieve AWS credentials: %w", err)
	}
	if err := c.signer.SignHTTP(ctx, creds, req, hash, "lambda", c.region, time.Now()); err != nil {
		return 0, Status{}, 0, fmt.Errorf("sign: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, Status{}, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, Status{}, 0, err
	}
	if resp.StatusCode/100 == 2 {
		var st Status
		if err := json.Unmarshal(b, &st); err != nil {
			return resp.StatusCode, st, 0, fmt.Errorf("the answer (%d) is not a status", resp.StatusCode)
		}
		return resp.StatusCode, st, 0, nil
	}
	var eb struct {
		Error *Error `json:"error"`
	}
	if json.Unmarshal(b, &eb) != nil || eb.Error == nil || eb.Error.Code == "" {
		// Not the API's answer (a proxy's, or the function URL's own 403
		// for a bad signature): its body is not quoted.
		eb.Error = &Error{Message: "HTTP " + resp.Status + ", not an answer of the intake API"}
	}
	eb.Error.Status = resp.StatusCode
	secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return resp.StatusCode, Status{}, min(time.Duration(secs)*time.Second, c.backoff[1]), eb.Error
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
