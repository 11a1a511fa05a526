package faultsim

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/genace"
)

// wire sits in front of the Genace simulator, on the server's side of the
// connection, and records which job id each POST's answer names and
// whether it left at all: Genace's truth about the ids it handed out
// (Final.HandedOut), whatever the client made of them. It also makes the
// answers BodyDrift picks drift, and tells the relay which answers to
// reset (H2Reset).
type wire struct {
	w    *world
	next http.Handler

	mu    sync.Mutex
	posts map[string][]wirePost // per operation, in arrival order
	drift map[string]int        // the next POST's drift per operation (variant+1)
	reset map[string][]uint32   // reset codes for answers the relay replaces by a reset, per operation
	// resetting marks the POST in progress whose answer will be reset.
	resetting map[string]bool
	lastJob   string // the last job id an answer named
}

// wirePost is one POST as Genace answered it.
type wirePost struct {
	status int
	jobID  string // the id the answer names ("" none)
	// lost: the answer never reached the client (the connection was
	// dropped or the stream reset).
	lost bool
	spec int64 // the record's spec revision at the POST
}

func newWire(w *world, next http.Handler) *wire {
	return &wire{w: w, next: next, posts: map[string][]wirePost{}, drift: map[string]int{}, reset: map[string][]uint32{}, resetting: map[string]bool{}}
}

// count returns how many POSTs of op arrived so far.
func (x *wire) count(op string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.posts[op])
}

// since returns the POSTs of op from the n-th on.
func (x *wire) since(op string, n int) []wirePost {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]wirePost(nil), x.posts[op][n:]...)
}

// perSpec counts op's POSTs not answered 429, per spec revision.
func (x *wire) perSpec(op string) map[int64]int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := map[int64]int{}
	for _, p := range x.posts[op] {
		if p.status != http.StatusTooManyRequests {
			n[p.spec]++
		}
	}
	return n
}

// driftNext makes the answer to op's next POST drift (variant of
// driftVariants).
func (x *wire) driftNext(op string, variant int) {
	x.mu.Lock()
	x.drift[op] = variant + 1
	x.mu.Unlock()
}

// resetNext makes the relay reset the answer to op's POST in progress.
func (x *wire) resetNext(op string, code uint32) {
	x.mu.Lock()
	x.reset[op] = append(x.reset[op], code)
	x.resetting[op] = true
	x.mu.Unlock()
}

// takeReset consumes the order to reset the answer to a POST of op.
func (x *wire) takeReset(op string) (uint32, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	q := x.reset[op]
	if len(q) == 0 {
		return 0, false
	}
	if len(q) == 1 {
		delete(x.reset, op)
	} else {
		x.reset[op] = q[1:]
	}
	return q[0], true
}

// ServeHTTP passes everything but POST /api/v1/jobs straight through.
func (x *wire) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && x.persistent(rw, r) {
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/api/v1/jobs" {
		x.next.ServeHTTP(rw, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	op := genacesim.OperationID(body)
	cw := &captureWriter{ResponseWriter: rw}
	post := wirePost{lost: true, spec: x.w.checkPost(op, body)}
	defer func() {
		// Recorded on every way out, a panic (an aborted answer) included.
		x.mu.Lock()
		x.posts[op] = append(x.posts[op], post)
		delete(x.drift, op)
		delete(x.resetting, op)
		x.mu.Unlock()
	}()
	x.next.ServeHTTP(cw, r)
	// The fault function ran inside: its orders for this POST are in.
	x.mu.Lock()
	drift, reset := x.drift[op], x.resetting[op]
	x.mu.Unlock()
	if cw.hijacked {
		return // the connection was dropped: no answer
	}
	out := cw.body.Bytes()
	if drift > 0 {
		out = driftBody(out, drift-1)
		x.w.tracef(op, "FAULT %s: Genace's %d answer drifts from the contract (%s)", BodyDrift, cw.status, driftNames[drift-1])
	}
	post.status, post.jobID = cw.status, namedJob(cw.status, out)
	if post.jobID != "" {
		x.mu.Lock()
		x.lastJob = post.jobID
		x.mu.Unlock()
	}
	rw.Header().Set("Content-Length", strconv.Itoa(len(out)))
	rw.WriteHeader(cw.status)
	_, _ = rw.Write(out)
	post.lost = reset
}

// captureWriter holds a POST's answer back until the wire has seen it.
type captureWriter struct {
	http.ResponseWriter
	status   int
	body     bytes.Buffer
	hijacked bool
}

// WriteHeader keeps the status.
func (c *captureWriter) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
}

// Write keeps the body.
func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.body.Write(b)
}

// Hijack drops the connection, as the simulator's AcceptThenDrop does
// over HTTP/1.1 (over HTTP/2 it aborts the stream with a panic instead).
func (c *captureWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(c.ResponseWriter).Hijack()
	if err == nil {
		c.hijacked = true
	}
	return conn, brw, err
}

// namedJob is the job id an answer names, read leniently: a 2xx body's
// id, a 5xx envelope's error.job_id, whatever else it holds.
func namedJob(status int, body []byte) string {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	switch {
	case status >= 200 && status < 300:
		id, _ := m["id"].(string)
		return id
	case status >= 500:
		e, _ := m["error"].(map[string]any)
		id, _ := e["job_id"].(string)
		return id
	}
	return ""
}

// driftNames name the ways an answer drifts from the contract: the first
// five a 202's job object, the rest a 5xx envelope; each still names the
// job in its contractual place.
var driftNames = []string{
	"unknown state", "no credits object", "extra fields", "unknown refund_state", "progress of the wrong type",
	"error.code a number", "extra envelope fields", "unknown error.code, no message",
}

// driftKinds202 is how many drift variants apply to a 202.
const driftKinds202 = 5

// driftBody rewrites an answer as variant v of driftNames; a body that is
// not a JSON object stays as it is.
func driftBody(body []byte, v int) []byte {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	obj := func(k string) map[string]any {
		o, _ := m[k].(map[string]any)
		if o == nil {
			o = map[string]any{}
			m[k] = o
		}
		return o
	}
	switch v {
	case 0:
		m["state"] = "paused"
	case 1:
		delete(m, "credits")
	case 2:
		m["priority"] = "high"
		m["links"] = map[string]any{"self": "/api/v1/jobs/" + asString(m["id"])}
		obj("credits")["currency"] = "credits"
	case 3:
		obj("credits")["refund_state"] = "clawback"
	case 4:
		m["progress"] = "0%"
	case 5:
		obj("error")["code"] = 502
	case 6:
		obj("error")["retryable"] = true
		m["request_id"] = "req-faultsim"
	case 7:
		e := obj("error")
		delete(e, "message")
		e["code"] = "upstream_melted"
	}
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}

func asString(v any) string {
	s, _ := v.(string)
	return s
}

// persistent serves a GET that a persistent fault strikes, and reports
// whether it did: a job's 200 that never decodes (UndecodableBody), an
// output whose bytes never match their sha256 (CopyNeverVerifies).
func (x *wire) persistent(rw http.ResponseWriter, r *http.Request) bool {
	var job string
	var want Fault
	switch parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/"); {
	case len(parts) == 4 && parts[0] == "api" && parts[2] == "jobs":
		job, want = parts[3], UndecodableBody
	case len(parts) == 3 && parts[0] == "files":
		job, want = parts[1], CopyNeverVerifies
	default:
		return false
	}
	op := x.w.opOfJob(job)
	if x.w.persistentOf(op) != want {
		return false
	}
	cw := &captureWriter{ResponseWriter: rw}
	x.next.ServeHTTP(cw, r)
	out := cw.body.Bytes()
	if cw.status == http.StatusOK {
		if want == UndecodableBody {
			out = undecodable(out, x.w.opIndex(op)%3 == 0)
			x.w.struck(op, want, "Genace's 200 for job "+job+" no longer decodes, nor will it")
		} else if len(out) > 0 {
			out = append([]byte(nil), out...)
			out[len(out)/2] ^= 0xff
			x.w.struck(op, want, "the output of job "+job+" arrives with other bytes than its sha256 names, as it always will")
		}
	}
	for k, v := range cw.Header() {
		rw.Header()[k] = v
	}
	rw.Header().Set("Content-Length", strconv.Itoa(len(out)))
	rw.WriteHeader(cmp.Or(cw.status, http.StatusOK))
	_, _ = rw.Write(out)
	return true
}

// undecodable makes a job's body one the client can never decode: its
// state a value the contract does not list, or, if oversize, padded past
// genace.MaxBodyBytes.
func undecodable(body []byte, oversize bool) []byte {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	if oversize {
		m["padding"] = strings.Repeat("x", genace.MaxBodyBytes)
	} else {
		m["state"] = "archived"
	}
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}
