package intake

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/client"
	"github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/message"
)

// Needs is what the intake function reads of its environment: the table,
// the dispatch queue it sends each create's and change's dispatch to, the
// model catalog, the input limit, and the retention of the records it
// cancels and the audit entries it writes.
var Needs = config.Spec{
	Needs:     []config.Need{config.NeedTable, config.NeedCatalog, config.NeedInputLimit, config.NeedRetention},
	FollowUps: config.AtOnce(message.ActionSubmitGeneration),
}

type callerKey struct{}

// WithCaller is ctx carrying the caller's identity, which CallerIdentity
// reads: FunctionURL puts the IAM principal there, a local server its own.
func WithCaller(ctx context.Context, caller string) context.Context {
	return context.WithValue(ctx, callerKey{}, caller)
}

// CallerIdentity is the Identity of a request FunctionURL (or WithCaller)
// identified.
func CallerIdentity(r *http.Request) (string, error) {
	if c, _ := r.Context().Value(callerKey{}).(string); c != "" {
		return c, nil
	}
	return "", errors.New("no IAM principal on the request: the function URL's AuthType must be AWS_IAM")
}

// FunctionURL adapts h to a Lambda function URL: each request becomes an
// *http.Request carrying the caller's IAM principal (requestContext.
// authorizer.iam: its user ARN, else its caller id) for CallerIdentity,
// and h's answer becomes the response. It never returns an error: Lambda
// would answer that 502 with nothing of ours in it.
func FunctionURL(h http.Handler) func(context.Context, events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
	return func(ctx context.Context, ev events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
		r, err := request(ctx, ev)
		if err != nil {
			return refusal(err), nil
		}
		w := &response{header: http.Header{}}
		h.ServeHTTP(w, r)
		return w.event(), nil
	}
}

// request is ev as the handler reads it. Lambda joins a repeated header's
// values with commas, as HTTP allows for every header the API reads.
func request(ctx context.Context, ev events.LambdaFunctionURLRequest) (*http.Request, error) {
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		var err error
		if body, err = base64.StdEncoding.DecodeString(ev.Body); err != nil {
			return nil, errors.New("the body is not valid base64")
		}
	}
	target := ev.RawPath
	if ev.RawQueryString != "" {
		target += "?" + ev.RawQueryString
	}
	u, err := url.ParseRequestURI(target)
	if err != nil || ev.RequestContext.HTTP.Method == "" {
		return nil, errors.New("not an HTTP request")
	}
	if iam := ev.RequestContext.Authorizer; iam != nil && iam.IAM != nil {
		caller := iam.IAM.UserARN
		if caller == "" {
			caller = iam.IAM.CallerID
		}
		ctx = WithCaller(ctx, caller)
	}
	r, err := http.NewRequestWithContext(ctx, ev.RequestContext.HTTP.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, errors.New("not an HTTP request")
	}
	r.Host, r.RemoteAddr, r.RequestURI = ev.RequestContext.DomainName, ev.RequestContext.HTTP.SourceIP, target
	for k, v := range ev.Headers {
		r.Header.Set(k, v)
	}
	return r, nil
}

// refusal answers a request that could not be read, as the handler's
// refusals are written.
func refusal(err error) events.LambdaFunctionURLResponse {
	b, _ := json.Marshal(map[string]*Error{"error": bad(http.StatusBadRequest, client.CodeMalformedJSON, "", "%v", err)})
	return events.LambdaFunctionURLResponse{StatusCode: http.StatusBadRequest, Body: string(b) + "\n",
		Headers: map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store"}}
}

// response records the handler's answer.
type response struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *response) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

func (w *response) event() events.LambdaFunctionURLResponse {
	w.WriteHeader(http.StatusOK)
	out := events.LambdaFunctionURLResponse{StatusCode: w.status, Headers: map[string]string{}}
	for k, vs := range w.header {
		out.Headers[k] = strings.Join(vs, ", ")
	}
	if b := w.body.Bytes(); utf8.Valid(b) {
		out.Body = string(b)
	} else {
		out.Body, out.IsBase64Encoded = base64.StdEncoding.EncodeToString(b), true
	}
	return out
}
