package intake_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/intake"
)

// urlEvent is a function URL request as Lambda sends it: lowercase
// headers, the caller's IAM principal when iam is set.
func urlEvent(method, rawPath, query, body string, iam *events.LambdaFunctionURLRequestContextAuthorizerIAMDescription, headers ...string) events.LambdaFunctionURLRequest {
	ev := events.LambdaFunctionURLRequest{Version: "2.0", RawPath: rawPath, RawQueryString: query, Body: body, Headers: map[string]string{}}
	ev.RequestContext.DomainName = "abc.lambda-url.eu-west-1.on.aws"
	ev.RequestContext.HTTP = events.LambdaFunctionURLRequestContextHTTPDescription{Method: method, Path: rawPath, SourceIP: "198.51.100.7"}
	if iam != nil {
		ev.RequestContext.Authorizer = &events.LambdaFunctionURLRequestContextAuthorizerDescription{IAM: iam}
	}
	for i := 0; i+1 < len(headers); i += 2 {
		ev.Headers[headers[i]] = headers[i+1]
	}
	return ev
}

var principal = &events.LambdaFunctionURLRequestContextAuthorizerIAMDescription{UserARN: caller, CallerID: "AROAEXAMPLE:render-service", AccountID: "123456789012"}

// TestFunctionURLRequest: what the handler sees of each event.
func TestFunctionURLRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                   string
		ev                     events.LambdaFunctionURLRequest
		method, uri, body, who string
		header                 map[string]string
	}{
		{"a create", urlEvent("POST", "/v1/operations", "", `{"a":1}`, principal, "content-type", "application/json"),
			"POST", "/v1/operations", `{"a":1}`, caller, map[string]string{"Content-Type": "application/json"}},
		{"a base64 body", func() events.LambdaFunctionURLRequest {
			ev := urlEvent("PUT", "/v1/operations/op-1", "", base64.StdEncoding.EncodeToString([]byte("\x00{}")), principal, "if-match", `"3"`)
			ev.IsBase64Encoded = true
			return ev
		}(), "PUT", "/v1/operations/op-1", "\x00{}", caller, map[string]string{"If-Match": `"3"`}},
		{"a query and an escaped path", urlEvent("GET", "/v1/operations/op%2D1", "a=1&b=two", "", principal),
			"GET", "/v1/operations/op%2D1?a=1&b=two", "", caller, nil},
		{"the caller id without a user ARN", urlEvent("GET", "/v1/operations/op-1", "", "",
			&events.LambdaFunctionURLRequestContextAuthorizerIAMDescription{CallerID: "AIDAEXAMPLE"}), "GET", "/v1/operations/op-1", "", "AIDAEXAMPLE", nil},
		{"no principal", urlEvent("GET", "/v1/operations/op-1", "", "", nil), "GET", "/v1/operations/op-1", "", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var seen *http.Request
			var body []byte
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen, body = r, must(io.ReadAll(r.Body))
				w.Header().Add("X-Two", "a")
				w.Header().Add("X-Two", "b")
				w.WriteHeader(http.StatusTeapot)
				_, _ = w.Write([]byte{0xff, 0x00})
			})
			resp, err := intake.FunctionURL(h)(context.Background(), tc.ev)
			if err != nil || seen == nil {
				t.Fatalf("%v; handler called: %v", err, seen != nil)
			}
			who, _ := intake.CallerIdentity(seen)
			if seen.Method != tc.method || seen.URL.RequestURI() != tc.uri || string(body) != tc.body || who != tc.who ||
				seen.Host != "abc.lambda-url.eu-west-1.on.aws" || seen.RemoteAddr != "198.51.100.7" {
				t.Errorf("request %s %s body %q caller %q host %s from %s; want %s %s %q %q", seen.Method, seen.URL.RequestURI(), body, who,
					seen.Host, seen.RemoteAddr, tc.method, tc.uri, tc.body, tc.who)
			}
			for k, v := range tc.header {
				if seen.Header.Get(k) != v {
					t.Errorf("header %s %q, want %q", k, seen.Header.Get(k), v)
				}
			}
			// A body that is not UTF-8 goes back base64-encoded, as Lambda needs.
			if resp.StatusCode != http.StatusTeapot || resp.Headers["X-Two"] != "a, b" || !resp.IsBase64Encoded || resp.Body != "/wA=" {
				t.Errorf("response %+v", resp)
			}
		})
	}
}

// TestFunctionURLOnTheService: the adapter in front of the real service
// and store: a create answered 201 and dispatched once, a change under
// If-Match audited as the IAM principal, a request without one refused
// 403, an unreadable event 400, all as JSON.
func TestFunctionURLOnTheService(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	svc, err := intake.New(intake.Deps{Store: e.st, Sender: e.out, Clock: e.clk, Catalog: catalog, Log: slog.New(slog.NewJSONHandler(e.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	fn := intake.FunctionURL(svc.Handler(intake.CallerIdentity))
	jsonType := []string{"content-type", "application/json"}
	badBase64 := urlEvent("POST", "/v1/operations", "", "not base64!", principal, jsonType...)
	badBase64.IsBase64Encoded = true
	for _, tc := range []struct {
		name   string
		ev     events.LambdaFunctionURLRequest
		status int
		code   string
		etag   string
	}{
		{"create", urlEvent("POST", "/v1/operations", "", body("op-1"), principal, jsonType...), 201, "", `"1"`},
		{"the create retried", urlEvent("POST", "/v1/operations", "", body("op-1"), principal, jsonType...), 200, "", `"1"`},
		{"a change without If-Match", urlEvent("PUT", "/v1/operations/op-1", "", body("op-1", func(m map[string]any) { m["budget_credits"] = 60 }), principal, jsonType...), 428, "precondition_required", ""},
		{"a change", urlEvent("PUT", "/v1/operations/op-1", "", body("op-1", func(m map[string]any) { m["budget_credits"] = 60 }), principal,
			"content-type", "application/json", "if-match", `"1"`), 200, "", `"2"`},
		{"status with a query", urlEvent("GET", "/v1/operations/op-1", "verbose=1", "", principal), 200, "", `"2"`},
		{"no principal", urlEvent("GET", "/v1/operations/op-1", "", "", nil), 403, "forbidden", ""},
		{"a body that is not base64", badBase64, 400, "malformed_json", ""},
	} {
		resp, err := fn(context.Background(), tc.ev)
		var answer struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err != nil || resp.StatusCode != tc.status || resp.Headers["Content-Type"] != "application/json" || resp.IsBase64Encoded ||
			decode(resp.Body, &answer) != nil || answer.Error.Code != tc.code || resp.Headers["Etag"] != tc.etag {
			t.Errorf("%s: %v %d %v %s; want %d %q ETag %s", tc.name, err, resp.StatusCode, resp.Headers, resp.Body, tc.status, tc.code, tc.etag)
		}
		if tc.code == "forbidden" && !strings.Contains(answer.Error.Message, "could not be identified") {
			t.Errorf("%s: %q does not say why", tc.name, answer.Error.Message)
		}
	}
	if sent := e.out.Take(); len(sent) != 2 || sent[0].Env.ExpectedRevision != 1 || sent[1].Env.ExpectedRevision != 2 {
		t.Errorf("sent %+v, want the create's dispatch and the change's", sent)
	}
	if entries := audit(t, e.st, "op-1"); len(entries) != 1 || entries[0].Operator != caller {
		t.Errorf("audit %+v, want the change by %s", entries, caller)
	}
}

func decode(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
