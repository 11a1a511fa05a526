package genacesim

import (
	"cmp"
	"fmt"
	"time"
)

// FaultKind names one scripted misbehaviour. Each kind models a real
// failure mode whose effect on the client's classification matters
// because Genace has no idempotency.
type FaultKind string

const (
	// FaultNone answers normally.
	FaultNone FaultKind = ""
	// FaultAcceptThenDrop: for POST, creates the job (credits reserved),
	// then closes the connection without a response (the outcome is
	// unknown to the client). GET and file requests are just dropped.
	FaultAcceptThenDrop FaultKind = "accept_then_drop"
	// FaultDelayResponse: waits Delay on the simulator's clock (or until
	// the client goes away), then answers normally; a POST creates its job
	// first, so a client timeout fires after the job exists.
	FaultDelayResponse FaultKind = "delay_response"
	// FaultServerErrorWithJobID: for POST, creates a known submission
	// failure (state failed, submission_failure true, credits reserved and
	// charged, refund pending) and answers Status (default 502) with
	// error.job_id. For GET/file it behaves like FaultServerErrorNoJob.
	FaultServerErrorWithJobID FaultKind = "server_error_with_job_id"
	// FaultServerErrorNoJob answers Status (default 503) with no job id and
	// creates nothing.
	FaultServerErrorNoJob FaultKind = "server_error_no_job"
	// FaultServerErrorJobCreated: for POST, creates a normal job but
	// answers Status (default 500) with no job id, so the client cannot
	// know it exists. For GET/file it behaves like FaultServerErrorNoJob.
	FaultServerErrorJobCreated FaultKind = "server_error_job_created"
	// FaultRateLimited answers 429 with Retry-After (whole seconds,
	// rounded up, default 1) and creates nothing.
	FaultRateLimited FaultKind = "rate_limited"
	// FaultGarbageBody answers 202 (POST) or 200 (GET/file) with an
	// unparseable body. For POST the job IS created first.
	FaultGarbageBody FaultKind = "garbage_body"
	// FaultReject answers Status (default 400) with error code Code
	// (default derived from the status, e.g. 402 insufficient_credits) and
	// creates nothing: scripted 400/402/403/409/422 rejections.
	FaultReject FaultKind = "reject"
	// FaultTimeoutAfterCreate: for POST, creates the job, then answers 408
	// without a job id, as a proxy that gave up after Genace acted does
	// (the contract does not list 408 among the answers that create
	// nothing). GET and file requests get 408 and change nothing.
	FaultTimeoutAfterCreate FaultKind = "timeout_after_create"
)

// BodyDrift is how an answer that names a job departs from the contract
// while still naming it: the drift a client must survive without losing
// the job id. It applies to a POST's 202 job object or its
// FaultServerErrorWithJobID envelope, and to a GET's 200 job object.
type BodyDrift string

const (
	// DriftNone sends the contract's body.
	DriftNone BodyDrift = ""
	// DriftUnknownState: the job's state is "paused", not in the enum.
	DriftUnknownState BodyDrift = "unknown_state"
	// DriftMissingCredits: the job object has no credits.
	DriftMissingCredits BodyDrift = "missing_credits"
	// DriftWrongType: the job's credits is a string; an envelope's
	// error.code is a number and error.message an object.
	DriftWrongType BodyDrift = "wrong_type"
	// DriftBadOutputs: the job's outputs is an object, not a list.
	DriftBadOutputs BodyDrift = "bad_outputs"
	// DriftTrailingJunk: bytes follow the JSON object.
	DriftTrailingJunk BodyDrift = "trailing_junk"
	// DriftTruncated: the body breaks off right after the job id, although
	// Content-Length promised all of it; the connection is then dropped.
	DriftTruncated BodyDrift = "truncated"
)

// BodyDrifts lists every drift, for tables and random injection.
var BodyDrifts = []BodyDrift{DriftUnknownState, DriftMissingCredits, DriftWrongType, DriftBadOutputs, DriftTrailingJunk, DriftTruncated}

// BendsEnvelope reports whether d changes an error envelope; the others
// concern job objects only, and leave an envelope as the contract has it.
func (d BodyDrift) BendsEnvelope() bool {
	return d == DriftWrongType || d == DriftTrailingJunk || d == DriftTruncated
}

// Fault is one scripted misbehaviour for one request. Build it with the
// constructors; the fields are exported so a FaultFunc can compose them.
type Fault struct {
	Kind       FaultKind
	Status     int           // HTTP status for server-error and reject kinds; 0 = kind default
	Code       string        // error.code for FaultReject; "" = derived from Status
	Delay      time.Duration // FaultDelayResponse, on the simulator clock
	RetryAfter time.Duration // FaultRateLimited
	// Drift bends the body of an answer that names a job (see BodyDrift).
	Drift BodyDrift
	// JobID, for a POST that creates a job, is the id Genace gives it
	// instead of a generated one: ids a client might not expect.
	JobID string
}

// WithDrift returns f answering with a drifted body.
func (f Fault) WithDrift(d BodyDrift) Fault { f.Drift = d; return f }

// WithJobID returns f creating its job (if any) under id.
func (f Fault) WithJobID(id string) Fault { f.JobID = id; return f }

// Drifted answers normally (202 for a POST, 200 for a GET) with body
// drift d.
func Drifted(d BodyDrift) Fault { return Fault{Drift: d} }

// String is for logs and test failure messages.
func (f Fault) String() string {
	s := f.kindString()
	if f.Drift != DriftNone {
		s += "+drift(" + string(f.Drift) + ")"
	}
	if f.JobID != "" {
		s += fmt.Sprintf("+id(%q)", f.JobID)
	}
	return s
}

func (f Fault) kindString() string {
	switch f.Kind {
	case FaultNone:
		return "none"
	case FaultDelayResponse:
		return fmt.Sprintf("%s(%s)", f.Kind, f.Delay)
	case FaultRateLimited:
		return fmt.Sprintf("%s(%s)", f.Kind, f.RetryAfter)
	case FaultServerErrorWithJobID, FaultServerErrorNoJob, FaultServerErrorJobCreated, FaultReject, FaultTimeoutAfterCreate:
		return fmt.Sprintf("%s(%d)", f.Kind, f.status())
	}
	return string(f.Kind)
}

// NoFault answers normally; useful in a script to let one request through.
func NoFault() Fault { return Fault{} }

// AcceptThenDrop creates the job (for POST) and closes the connection
// without answering.
func AcceptThenDrop() Fault { return Fault{Kind: FaultAcceptThenDrop} }

// DelayResponse creates the job (for POST) and answers only after d on the
// simulator clock.
func DelayResponse(d time.Duration) Fault { return Fault{Kind: FaultDelayResponse, Delay: d} }

// Status5xx answers status (500..599; 0 means 502 with a job id, 503
// without). withJobID creates a known submission failure and reports its
// id; without, nothing is created (see ServerErrorJobCreated for the
// created-but-unreported case).
func Status5xx(status int, withJobID bool) Fault {
	if status != 0 && (status < 500 || status > 599) {
		panic(fmt.Sprintf("genacesim: Status5xx status %d is not 5xx", status))
	}
	if withJobID {
		return Fault{Kind: FaultServerErrorWithJobID, Status: status}
	}
	return Fault{Kind: FaultServerErrorNoJob, Status: status}
}

// ServerErrorNoJob answers a 5xx without job id and creates nothing.
func ServerErrorNoJob(status int) Fault { return Status5xx(status, false) }

// ServerErrorJobCreated creates a normal job but answers a 5xx without its
// id.
func ServerErrorJobCreated(status int) Fault {
	f := Status5xx(status, false)
	f.Kind = FaultServerErrorJobCreated
	return f
}

// SubmissionFailed is Status5xx(status, true).
func SubmissionFailed(status int) Fault { return Status5xx(status, true) }

// RateLimited answers 429 with Retry-After d (rounded up to seconds).
func RateLimited(retryAfter time.Duration) Fault {
	return Fault{Kind: FaultRateLimited, RetryAfter: retryAfter}
}

// GarbageBody answers success with an unparseable body (creating the job
// for POST).
func GarbageBody() Fault { return Fault{Kind: FaultGarbageBody} }

// TimeoutAfterCreate creates the job (for POST) and answers 408 Request
// Timeout without its id.
func TimeoutAfterCreate() Fault { return Fault{Kind: FaultTimeoutAfterCreate} }

// Reject answers a 4xx error envelope and creates nothing. code "" derives
// the contract's code from status.
func Reject(status int, code string) Fault {
	if status < 400 || status > 499 || status == 429 {
		panic(fmt.Sprintf("genacesim: Reject status %d is not a non-429 4xx", status))
	}
	return Fault{Kind: FaultReject, Status: status, Code: code}
}

// kindStatus is the HTTP status each kind answers with by default.
var kindStatus = map[FaultKind]int{
	FaultServerErrorWithJobID: 502, FaultServerErrorNoJob: 503, FaultServerErrorJobCreated: 500,
	FaultReject: 400, FaultRateLimited: 429, FaultTimeoutAfterCreate: 408,
}

// status returns the HTTP status the fault answers with.
func (f Fault) status() int { return cmp.Or(f.Status, kindStatus[f.Kind]) }

// statusCodes are the contract's error codes by status.
var statusCodes = map[int]string{
	400: "invalid_request", 422: "invalid_request", 401: "unauthorized", 402: "insufficient_credits", 403: "forbidden",
	404: "not_found", 408: "request_timeout", 429: "rate_limited",
	502: "upstream_unavailable", 503: "upstream_unavailable", 504: "upstream_unavailable",
}

// codeFor is the contract's error code for a status.
func codeFor(status int) string {
	if c, ok := statusCodes[status]; ok {
		return c
	}
	if status >= 500 {
		return "internal"
	}
	return "invalid_request"
}

// RequestKind says which endpoint a request hit, for FaultFunc.
type RequestKind string

// The request kinds a fault can target.
const (
	KindPost RequestKind = "post" // POST /api/v1/jobs
	KindGet  RequestKind = "get"  // GET /api/v1/jobs/{id}
	KindFile RequestKind = "file" // GET /files/{job}/{index}
)

// RequestInfo describes a request to a FaultFunc.
type RequestInfo struct {
	Method      string
	Kind        RequestKind
	OperationID string // POST: metadata.operation_id ("" if absent)
	JobID       string // GET and file requests
	// Attempt is 1 for the first request of this kind for this operation
	// (POST) or job (GET, file), 2 for the second, and so on.
	Attempt int
}

// FaultFunc picks a fault for requests that no script covers; use it for
// seeded random injection.
type FaultFunc func(RequestInfo) Fault

// ScriptPOST queues faults for POSTs whose metadata.operation_id equals
// operationID ("" matches any POST). Faults are consumed in order, one
// per request; a request with a specific queue uses it before the ""
// queue. Only authorized, well-formed POSTs consume faults.
func (s *Simulator) ScriptPOST(operationID string, faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.postScripts[operationID] = append(s.postScripts[operationID], faults...)
}

// ScriptGET queues faults for GETs of jobID ("" matches any), like
// ScriptPOST. Only authorized GETs with a valid wait consume faults.
func (s *Simulator) ScriptGET(jobID string, faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.getScripts[jobID] = append(s.getScripts[jobID], faults...)
}

// ScriptFile queues faults for signed-URL downloads of jobID's outputs
// ("" matches any), like ScriptPOST.
func (s *Simulator) ScriptFile(jobID string, faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fileScripts[jobID] = append(s.fileScripts[jobID], faults...)
}

// SetFaultFunc installs (or, with nil, removes) the fallback fault picker.
// It is called without the simulator's lock held, so it may call the
// simulator's methods.
func (s *Simulator) SetFaultFunc(f FaultFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faultFunc = f
}

// pickFault pops the next scripted fault for key, else asks the FaultFunc.
func (s *Simulator) pickFault(scripts map[string][]Fault, key string, info RequestInfo) Fault {
	s.mu.Lock()
	for _, k := range []string{key, ""} {
		if q := scripts[k]; len(q) > 0 {
			f := q[0]
			if len(q) == 1 {
				delete(scripts, k)
			} else {
				scripts[k] = q[1:]
			}
			s.mu.Unlock()
			return f
		}
		if key == "" {
			break
		}
	}
	ff := s.faultFunc
	s.mu.Unlock()
	if ff == nil {
		return Fault{}
	}
	return ff(info)
}
