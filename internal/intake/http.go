package intake

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"path"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/genjobs/genjobs/client"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
)

// OpenAPI is the API's OpenAPI 3.1 document, served at GET
// /v1/openapi.yaml; a test holds it to the handler.
//
//go:embed openapi.yaml
var OpenAPI []byte

// Identity tells who sends a request: the Lambda adapter reads the
// function URL's IAM principal (requestContext.authorizer.iam). An error
// or an empty identity is a 403. The identity goes into the audit entry
// of each change and cancel.
type Identity func(*http.Request) (string, error)

// callerShape is what an identity may look like: an IAM ARN or user id
// (letters, digits and + = , . @ _ : / -), at most 256 bytes. Anything
// else is refused rather than written into the audit trail.
func callerShape(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("+=,.@_:/-", c)) {
			return false
		}
	}
	return true
}

// route is one pattern the handler serves.
type route struct {
	pattern string
	serve   func(h *handler, w http.ResponseWriter, r *http.Request, caller string)
	// public routes need no identity: the document describes the API and
	// holds nothing of an operation.
	public bool
}

var routes = []route{
	{pattern: "POST /v1/operations", serve: (*handler).create},
	{pattern: "GET /v1/operations/{id}", serve: (*handler).status},
	{pattern: "PUT /v1/operations/{id}", serve: (*handler).change},
	{pattern: "POST /v1/operations/{id}/cancel", serve: (*handler).cancel},
	{pattern: "GET /v1/openapi.yaml", serve: (*handler).openapi, public: true},
}

// Routes lists the patterns ("METHOD /path") the handler serves.
func Routes() []string {
	out := make([]string, len(routes))
	for i, rt := range routes {
		out[i] = rt.pattern
	}
	return out
}

type handler struct {
	svc      *Service
	identity Identity
	mux      *http.ServeMux
}

// Handler maps the Service onto HTTP: the routes of Routes, every answer
// JSON (the document aside) with an {"error": {...}} body when refused,
// 404 for an unknown path and 405 (with Allow) for a known path's other
// methods.
func (s *Service) Handler(identity Identity) http.Handler {
	h := &handler{svc: s, identity: identity, mux: http.NewServeMux()}
	allow := map[string][]string{}
	var paths []string
	for _, rt := range routes {
		method, p, _ := strings.Cut(rt.pattern, " ")
		if _, seen := allow[p]; !seen {
			paths = append(paths, p)
		}
		allow[p] = append(allow[p], method)
		h.mux.HandleFunc(rt.pattern, func(w http.ResponseWriter, r *http.Request) {
			caller := ""
			if !rt.public {
				var ok bool
				if caller, ok = h.caller(w, r); !ok {
					return
				}
			}
			rt.serve(h, w, r, caller)
		})
	}
	for _, p := range paths {
		methods := strings.Join(allow[p], ", ")
		h.mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", methods)
			h.fail(w, r, bad(http.StatusMethodNotAllowed, client.CodeMethodNotAllowed, "", "%s is not allowed here; allowed: %s", r.Method, methods))
		})
	}
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, bad(http.StatusNotFound, client.CodeNotFound, "", "no such route"))
	})
	return h
}

// ServeHTTP refuses a path that is not in clean form before the mux would
// answer it with a redirect: an API client follows no redirects.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Path; p == "" || path.Clean(p) != p {
		h.fail(w, r, bad(http.StatusNotFound, client.CodeNotFound, "", "no such route"))
		return
	}
	h.mux.ServeHTTP(w, r)
}

func (h *handler) caller(w http.ResponseWriter, r *http.Request) (string, bool) {
	id, err := h.identity(r)
	if err != nil || !callerShape(id) {
		if err != nil {
			h.svc.log.WarnContext(r.Context(), "intake: caller not identified", "error", err.Error())
		}
		h.fail(w, r, bad(http.StatusForbidden, client.CodeForbidden, "", "the caller could not be identified"))
		return "", false
	}
	return id, true
}

func (h *handler) create(w http.ResponseWriter, r *http.Request, _ string) {
	req, err := h.decode(w, r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	res, err := h.svc.Create(r.Context(), req)
	h.answer(w, r, res, err)
}

func (h *handler) status(w http.ResponseWriter, r *http.Request, _ string) {
	st, err := h.svc.Status(r.Context(), r.PathValue("id"))
	h.answer(w, r, Result{Status: st}, err)
}

func (h *handler) change(w http.ResponseWriter, r *http.Request, caller string) {
	id := r.PathValue("id")
	req, err := h.decode(w, r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	rev, err := ifMatch(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	res, err := h.svc.Change(r.Context(), id, req, rev, caller)
	h.answer(w, r, res, err)
}

func (h *handler) cancel(w http.ResponseWriter, r *http.Request, caller string) {
	// A cancel carries nothing but its precondition: a body is refused, not
	// ignored, since it would mean the caller expects it to say something.
	if b, err := io.ReadAll(io.LimitReader(r.Body, 1)); err != nil || len(b) > 0 {
		h.fail(w, r, bad(http.StatusBadRequest, client.CodeMalformedJSON, "", "a cancel has no body"))
		return
	}
	rev, err := ifMatch(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	res, err := h.svc.Cancel(r.Context(), r.PathValue("id"), rev, caller)
	h.answer(w, r, res, err)
}

func (h *handler) openapi(w http.ResponseWriter, _ *http.Request, _ string) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(OpenAPI)
}

// ifMatch reads the revision a change is conditioned on: one strong
// entity tag "N", as the status's ETag gives it. "*" and weak tags are
// refused: a change must name the revision its caller saw.
func ifMatch(r *http.Request) (int64, error) {
	vs := r.Header.Values("If-Match")
	if len(vs) == 0 {
		return 0, bad(http.StatusPreconditionRequired, client.CodePreconditionRequired, "If-Match",
			`a change or cancel must name the revision it was decided on: If-Match: "N", N the status's revision (its ETag)`)
	}
	v := strings.TrimSpace(vs[0])
	n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(v, `"`), `"`), 10, 64)
	if len(vs) > 1 || len(v) < 3 || v[0] != '"' || v[len(v)-1] != '"' || err != nil || n < 1 {
		return 0, bad(http.StatusBadRequest, client.CodeInvalidPrecondition, "If-Match", `want one revision as an entity tag: If-Match: "N"`)
	}
	return n, nil
}

// requestFields are CreateRequest's JSON names, each required.
var requestFields = func() []string {
	var out []string
	for f := range reflect.TypeFor[CreateRequest]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		out = append(out, name)
	}
	return out
}()

// decode reads a request body strictly: JSON only, one object, within the
// body limit, valid UTF-8, no unknown or missing field, every value of
// its field's type. The refusal names the field where there is one; it
// never quotes the body.
func (h *handler) decode(w http.ResponseWriter, r *http.Request) (CreateRequest, error) {
	var req CreateRequest
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return req, bad(http.StatusUnsupportedMediaType, client.CodeUnsupportedMedia, "", "send the body as Content-Type: application/json")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.svc.limits.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return req, bad(http.StatusRequestEntityTooLarge, client.CodeBodyTooLarge, "", "the body is over the %d-byte limit", h.svc.limits.MaxBodyBytes)
	case err != nil:
		return req, bad(http.StatusBadRequest, client.CodeMalformedJSON, "", "the body could not be read")
	case !utf8.Valid(body):
		return req, bad(http.StatusBadRequest, client.CodeMalformedJSON, "", "the body is not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, jsonProblem(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, bad(http.StatusBadRequest, client.CodeMalformedJSON, "", "data after the JSON object")
	}
	// A second pass sees which fields were there: a missing number is
	// not a 0, a missing id not an empty one.
	var present map[string]json.RawMessage
	if err := json.Unmarshal(body, &present); err != nil {
		return req, bad(http.StatusBadRequest, client.CodeMalformedJSON, "", "the body is not a JSON object")
	}
	for _, f := range requestFields {
		if v, ok := present[f]; !ok || string(v) == "null" {
			return req, bad(http.StatusBadRequest, client.CodeMissingField, f, "required")
		}
	}
	return req, nil
}

// jsonProblem turns a decoding error into the refusal that names what it
// can. An unknown field's name is echoed only when it is short and plain.
func jsonProblem(err error) *Error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return bad(http.StatusBadRequest, client.CodeInvalidField, typeErr.Field, "wrong type: got JSON %s, want %s", typeErr.Value, jsonKind(typeErr.Type))
	case errors.As(err, &typeErr):
		return bad(http.StatusBadRequest, client.CodeMalformedJSON, "", "the body must be a JSON object")
	case errors.As(err, &syntaxErr):
		return bad(http.StatusBadRequest, client.CodeMalformedJSON, "", "invalid JSON at byte %d", syntaxErr.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return bad(http.StatusBadRequest, client.CodeMalformedJSON, "", "empty or truncated body")
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if f, err := strconv.Unquote(name); err == nil && f != "" && operation.SafeCategory(f, "") == f {
			return bad(http.StatusBadRequest, client.CodeUnknownField, f, "not a field of this request")
		}
		return bad(http.StatusBadRequest, client.CodeUnknownField, "", "a field that is not one of this request's")
	}
	return bad(http.StatusBadRequest, client.CodeMalformedJSON, "", "the body is not a request")
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int64:
		return "a whole number"
	}
	return "an object"
}

// answer writes a Service result: the status (201 when created, else
// 200) with its revision as the ETag, or the refusal.
func (h *handler) answer(w http.ResponseWriter, r *http.Request, res Result, err error) {
	if err != nil {
		h.fail(w, r, err)
		return
	}
	code := http.StatusOK
	if res.Created {
		code = http.StatusCreated
	}
	w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(res.Status.Revision, 10)))
	h.write(w, r, code, res.Status, "", res.Status.OperationID)
}

// fail writes a refusal. Anything but an *Error is ours (a store that
// failed): logged, and answered 500 with nothing of it in the body.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var e *Error
	if !errors.As(err, &e) {
		h.svc.log.ErrorContext(r.Context(), "intake: request failed", "route", r.Pattern, "error", err.Error())
		e = bad(http.StatusInternalServerError, client.CodeInternal, "", "internal error; retry later")
	}
	h.write(w, r, e.Status, struct {
		Error *Error `json:"error"`
	}{e}, e.Code, r.PathValue("id"))
}

func (h *handler) write(w http.ResponseWriter, r *http.Request, code int, v any, errCode, operationID string) {
	b, err := json.Marshal(v)
	if err != nil { // a Status or an Error always encodes
		code, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
	if !message.ValidOperationID(operationID) {
		operationID = "" // a path's garbage is not logged
	}
	h.svc.log.InfoContext(r.Context(), "intake: answered", "method", r.Method, "route", r.Pattern, "status", code,
		"code", errCode, "operation_id", operationID)
}
