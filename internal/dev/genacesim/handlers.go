package genacesim

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"
)

// maxRequestBody caps POST bodies, like a real API gateway would.
const maxRequestBody = 1 << 20

// garbage is what FaultGarbageBody sends: it starts like JSON so a lenient
// decoder would be tempted, then breaks.
var garbage = []byte("{\"id\": \"job_\x00\xff<html>502 Bad Gateway")

// wireJob is the job object of the contract.
type wireJob struct {
	ID                string            `json:"id"`
	Model             string            `json:"model"`
	State             string            `json:"state"`
	SubmissionFailure bool              `json:"submission_failure"`
	CreatedAt         time.Time         `json:"created_at"`
	UpdatedAt         time.Time         `json:"updated_at"`
	StartedAt         *time.Time        `json:"started_at"`
	FinishedAt        *time.Time        `json:"finished_at"`
	Progress          float64           `json:"progress"`
	Outputs           []wireOutput      `json:"outputs"`
	Error             *wireJobError     `json:"error"`
	Credits           Credits           `json:"credits"`
	Metadata          map[string]string `json:"metadata"`
}

type wireOutput struct {
	URL         string `json:"url"`
	ContentType string `json:"content_type"`
	SizeBytes   int64  `json:"size_bytes"`
	SHA256      string `json:"sha256"`
}

type wireJobError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type wireEnvelope struct {
	Error wireEnvelopeError `json:"error"`
}

type wireEnvelopeError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	JobID   string `json:"job_id,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeError writes the contract's error envelope; retryAfter > 0 adds
// Retry-After in whole seconds, rounded up.
func writeError(w http.ResponseWriter, status int, code, msg, jobID string, retryAfter time.Duration) {
	if retryAfter > 0 || status == http.StatusTooManyRequests {
		secs := int64(math.Ceil(retryAfter.Seconds()))
		if secs < 1 {
			secs = 1
		}
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	writeJSON(w, status, wireEnvelope{Error: wireEnvelopeError{Code: code, Message: msg, JobID: jobID}})
}

// baseURL is where this request reached us, for absolute signed URLs.
func baseURL(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// toWire renders a job view; succeeded jobs get freshly signed URLs.
func (s *Simulator) toWire(r *http.Request, j *job, v view, now time.Time) wireJob {
	md := j.metadata
	if md == nil {
		md = map[string]string{}
	}
	wj := wireJob{
		ID: j.id, Model: j.model, State: v.state, SubmissionFailure: j.subFail,
		CreatedAt: j.created, UpdatedAt: v.updated, StartedAt: v.started, FinishedAt: v.finished,
		Progress: v.progress, Credits: v.credits, Metadata: md,
	}
	if v.errCode != "" {
		wj.Error = &wireJobError{Code: v.errCode, Message: v.errMsg}
	}
	if v.hasOutputs {
		base := baseURL(r)
		for i, p := range j.outputs {
			wj.Outputs = append(wj.Outputs, wireOutput{
				URL:         base + s.signer.signedPath(j.id, i, now, s.cfg.SignedURLTTL),
				ContentType: "image/png",
				SizeBytes:   int64(len(p)),
				SHA256:      j.sums[i],
			})
		}
	}
	return wj
}

// snapshot returns the wire form of j at the current clock time.
func (s *Simulator) snapshot(r *http.Request, j *job) wireJob {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	return s.toWire(r, j, j.view(now, s.cfg.RefundSettleAfter), now)
}

// drop closes the connection without a response: the client sees EOF or a
// reset. Hijacking is preferred; ErrAbortHandler is the fallback (HTTP/2,
// recorders), which net/http also turns into an aborted response.
func drop(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close()
		return
	}
	panic(http.ErrAbortHandler)
}

// sleep waits d on the simulator clock; false if the client went away.
func (s *Simulator) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	select {
	case <-s.clk.After(d):
		return true
	case <-s.done:
		return true
	case <-ctx.Done():
		return false
	}
}

// createRequest is the POST body.
type createRequest struct {
	Model    string            `json:"model"`
	Input    json.RawMessage   `json:"input"`
	Metadata map[string]string `json:"metadata"`
}

// OperationID extracts a POST body's metadata.operation_id best-effort,
// for counting and fault matching even when the body is otherwise invalid.
func OperationID(body []byte) string {
	var probe struct {
		Metadata map[string]any `json:"metadata"`
	}
	if json.Unmarshal(body, &probe) != nil {
		return ""
	}
	id, _ := probe.Metadata["operation_id"].(string)
	return id
}

func parseCreate(body []byte) (createRequest, string) {
	var req createRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return req, "body must be a JSON object with model, input and string metadata"
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, "trailing data after body"
	}
	if req.Model == "" {
		return req, "model is required"
	}
	in := bytes.TrimSpace(req.Input)
	if len(in) == 0 || in[0] != '{' {
		return req, "input must be an object"
	}
	return req, ""
}

// count notes one more request, in all and for key, and returns key's
// count: the request's attempt number.
func (s *Simulator) count(total *int, per map[string]int, key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	*total++
	per[key]++
	return per[key]
}

func (s *Simulator) handlePost(w http.ResponseWriter, r *http.Request) {
	body, readErr := io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
	opID := OperationID(body)
	attempt := s.count(&s.totalPosts, s.postCount, opID)

	if !s.authorized(r) {
		writeError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong API key", "", 0)
		return
	}
	if readErr != nil || len(body) > maxRequestBody {
		writeError(w, http.StatusBadRequest, "invalid_request", "unreadable or oversized body", "", 0)
		return
	}
	req, bad := parseCreate(body)
	if bad != "" {
		writeError(w, http.StatusBadRequest, "invalid_request", bad, "", 0)
		return
	}
	f := s.pickFault(s.postScripts, opID, RequestInfo{Method: r.Method, Kind: KindPost, OperationID: opID, Attempt: attempt})
	switch f.Kind { // faults that create nothing
	case FaultRateLimited, FaultReject, FaultServerErrorNoJob:
		writeFault(w, f, 0, "upstream unavailable")
		return
	}
	if s.limited(w, f) {
		return
	}

	s.mu.Lock()
	j := s.newJobLocked(opID, req.Model, req.Metadata, f.Kind == FaultServerErrorWithJobID, f.JobID)
	onChange := s.onChange
	s.mu.Unlock()
	if onChange != nil {
		onChange()
	}

	switch {
	case f.Kind == FaultServerErrorWithJobID:
		writeDrifted(w, f.status(), wireEnvelope{Error: wireEnvelopeError{Code: "submission_failed", Message: "the job could not be submitted", JobID: j.id}}, f.Drift)
	case f.Kind == FaultDelayResponse && !s.sleep(r.Context(), f.Delay):
		// the client gave up; the job exists regardless
	case !writeFault(w, f, http.StatusAccepted, "internal error"):
		writeDrifted(w, http.StatusAccepted, s.snapshot(r, j), f.Drift)
	}
}

// limited answers 429 when a request without a fault exceeds
// RateLimitPerSecond.
func (s *Simulator) limited(w http.ResponseWriter, f Fault) bool {
	if f.Kind != FaultNone {
		return false
	}
	ra := s.rateLimited()
	if ra > 0 {
		writeError(w, http.StatusTooManyRequests, "rate_limited", "too many requests", "", ra)
	}
	return ra > 0
}

// writeFault answers a request according to f, with okStatus for a
// garbage body and serverMsg for a server error; false (nothing written)
// for FaultNone and FaultDelayResponse, which answer normally.
func writeFault(w http.ResponseWriter, f Fault, okStatus int, serverMsg string) bool {
	switch f.Kind {
	case FaultAcceptThenDrop:
		drop(w)
	case FaultRateLimited:
		writeError(w, http.StatusTooManyRequests, "rate_limited", "too many requests", "", f.RetryAfter)
	case FaultReject:
		writeError(w, f.status(), cmp.Or(f.Code, codeFor(f.status())), "rejected by scripted fault", "", 0)
	case FaultServerErrorNoJob, FaultServerErrorWithJobID, FaultServerErrorJobCreated:
		writeError(w, f.status(), codeFor(f.status()), serverMsg, "", 0)
	case FaultTimeoutAfterCreate:
		writeError(w, f.status(), codeFor(f.status()), "request timed out", "", 0)
	case FaultGarbageBody:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(okStatus)
		_, _ = w.Write(garbage)
	default:
		return false
	}
	return true
}

// writeDrifted writes v (a job object or an error envelope) bent by d.
func writeDrifted(w http.ResponseWriter, status int, v any, d BodyDrift) {
	if d == DriftNone {
		writeJSON(w, status, v)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode", http.StatusInternalServerError)
		return
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		http.Error(w, "encode", http.StatusInternalServerError)
		return
	}
	env, isEnvelope := m["error"].(map[string]any)
	switch d {
	case DriftUnknownState:
		m["state"] = "paused"
	case DriftMissingCredits:
		delete(m, "credits")
	case DriftWrongType:
		if isEnvelope {
			env["code"], env["message"] = 500, map[string]any{"text": "oops"}
		} else {
			m["credits"] = "12"
		}
	case DriftBadOutputs:
		m["outputs"] = map[string]any{"url": "not a list"}
	}
	if b, err = json.Marshal(m); err != nil {
		http.Error(w, "encode", http.StatusInternalServerError)
		return
	}
	full := len(b)
	switch d {
	case DriftTrailingJunk:
		b = append(b, " <html>oops</html>"...)
		full = len(b)
	case DriftTruncated:
		// Cut right after the job's id (keys marshal sorted, so only
		// created_at, credits, error and finished_at precede it), or after
		// an envelope's job_id.
		key := []byte(`"id":`)
		if isEnvelope {
			key = []byte(`"job_id":`)
		}
		if i := bytes.Index(b, key); i >= 0 {
			if end := bytes.IndexByte(b[i+len(key)+1:], '"'); end >= 0 {
				b = b[:i+len(key)+1+end+1]
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(full))
	w.WriteHeader(status)
	_, _ = w.Write(b)
	if len(b) < full {
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler) // the promised rest never comes
	}
}

// applyReadFault answers a GET or file request according to f; it
// returns true if the request was fully answered. FaultDelayResponse
// waits and returns false so normal handling follows.
func (s *Simulator) applyReadFault(w http.ResponseWriter, r *http.Request, f Fault) bool {
	if f.Kind == FaultDelayResponse {
		return !s.sleep(r.Context(), f.Delay)
	}
	return writeFault(w, f, http.StatusOK, "transient server error")
}

func (s *Simulator) handleGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	attempt := s.count(&s.totalGets, s.getCount, id)

	if !s.authorized(r) {
		writeError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong API key", "", 0)
		return
	}
	var wait time.Duration
	if q := r.URL.Query(); q.Has("wait") {
		n, err := strconv.Atoi(q.Get("wait"))
		if err != nil || n < 0 || time.Duration(n)*time.Second > s.cfg.MaxWait {
			writeError(w, http.StatusBadRequest, "invalid_request", "wait must be whole seconds within 0..max wait", "", 0)
			return
		}
		wait = time.Duration(n) * time.Second
	}
	f := s.pickFault(s.getScripts, id, RequestInfo{Method: r.Method, Kind: KindGet, JobID: id, Attempt: attempt})
	if s.applyReadFault(w, r, f) || s.limited(w, f) {
		return
	}
	wj, ok := s.poll(r, id, wait)
	if !ok {
		if r.Context().Err() == nil {
			writeError(w, http.StatusNotFound, "not_found", "no such job", "", 0)
		}
		return
	}
	writeDrifted(w, http.StatusOK, wj, f.Drift)
}

// poll implements GET with long polling. It observes the job (advancing a
// submission failure's refund), then, if wait > 0, sleeps on the clock
// until the next scheduled transition or the wait deadline, whichever is
// first, waking early on reconciliation, on Close, or when the client
// goes away; it answers as soon as state or refund_state differs from the
// start, or at the deadline. ok is false for an unknown job or a client
// that left.
func (s *Simulator) poll(r *http.Request, id string, wait time.Duration) (wireJob, bool) {
	s.mu.Lock()
	j, ok := s.jobs[id]
	if !ok {
		s.mu.Unlock()
		return wireJob{}, false
	}
	now := s.clk.Now()
	deadline := now.Add(wait)
	j.observe(now, s.cfg.RefundSettleAfter)
	v := j.view(now, s.cfg.RefundSettleAfter)
	start := v.key()
	for {
		if !now.Before(deadline) || v.key() != start {
			wj := s.toWire(r, j, v, now)
			s.mu.Unlock()
			return wj, true
		}
		d := deadline.Sub(now)
		if !v.next.IsZero() && v.next.Sub(now) < d {
			d = v.next.Sub(now)
		}
		notify := s.notify
		s.mu.Unlock()

		select {
		case <-s.clk.After(d):
		case <-notify:
		case <-s.done:
			deadline = time.Time{} // answer now
		case <-r.Context().Done():
			return wireJob{}, false
		}

		s.mu.Lock()
		now = s.clk.Now()
		if deadline.IsZero() {
			deadline = now
		}
		j.observe(now, s.cfg.RefundSettleAfter)
		v = j.view(now, s.cfg.RefundSettleAfter)
	}
}

func (s *Simulator) handleFile(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("job")
	attempt := s.count(&s.fileGets, s.fileCount, id)

	f := s.pickFault(s.fileScripts, id, RequestInfo{Method: r.Method, Kind: KindFile, JobID: id, Attempt: attempt})
	if s.applyReadFault(w, r, f) {
		return
	}
	idx, err := strconv.Atoi(r.PathValue("index"))
	q := r.URL.Query()
	exp, expErr := strconv.ParseInt(q.Get("expires"), 10, 64)
	if err != nil || idx < 0 || expErr != nil || !s.signer.valid(id, idx, exp, q.Get("sig")) {
		writeError(w, http.StatusForbidden, "forbidden", "bad signature", "", 0)
		return
	}
	s.mu.Lock()
	now := s.clk.Now()
	j, ok := s.jobs[id]
	var body []byte
	if ok && idx < len(j.outputs) && j.view(now, s.cfg.RefundSettleAfter).hasOutputs {
		body = j.outputs[idx]
	}
	s.mu.Unlock()
	if !now.Before(time.Unix(exp, 0)) {
		writeError(w, http.StatusGone, "url_expired", "signed URL expired", "", 0)
		return
	}
	if body == nil {
		writeError(w, http.StatusNotFound, "not_found", "no such output", "", 0)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

func (s *Simulator) handleReconcile(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r) {
		writeError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong API key", "", 0)
		return
	}
	var req struct {
		JobIDs []string `json:"job_ids"`
		Fail   bool     `json:"fail"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, maxRequestBody)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "body must be {\"job_ids\": [...], \"fail\": true}", "", 0)
		return
	}
	if !req.Fail {
		writeError(w, http.StatusBadRequest, "invalid_request", "only fail=true is supported", "", 0)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]string{"reconciled": s.Reconcile(req.JobIDs...)})
}
