package operation

import (
	"encoding/json"
	"regexp"
	"slices"
	"time"
)

// Record is one application operation. Every write bumps Revision and is
// conditioned on the revision the writer read, so only the current
// revision ever writes.
type Record struct {
	OperationID  string `json:"operation_id" dynamodbav:"operation_id"`
	Revision     int64  `json:"revision" dynamodbav:"revision"`
	SpecRevision int64  `json:"spec_revision" dynamodbav:"spec_revision"`
	Phase        Phase  `json:"phase" dynamodbav:"phase"`
	UserID       string `json:"user_id" dynamodbav:"user_id"`
	Model        string `json:"model" dynamodbav:"model"`
	// Input is the restricted request (prompt, size, ...). It lives only
	// here: never in a message, log line, review record or audit entry.
	Input json.RawMessage `json:"input,omitempty" dynamodbav:"input,omitempty"`
	// InputRef optionally points at restricted data held elsewhere.
	InputRef string `json:"input_ref,omitempty" dynamodbav:"input_ref,omitempty"`
	// RequestSHA256 is the hex sha256 of the canonical create request the
	// intake API made this record from (internal/intake): the idempotency
	// key's fingerprint, so the same operation_id sent again with the same
	// request is the same operation and with another is a conflict. It is
	// the original request's and stays so when the request is changed:
	// a create retried after a change is still the create that happened.
	// Empty for a record made another way (genjobs local's workloads).
	RequestSHA256 string `json:"request_sha256,omitempty" dynamodbav:"request_sha256,omitempty"`
	// Authorized is the application's grant for the spec revision named by
	// AuthorizedSpecRevision; a changed spec needs a new grant.
	Authorized             bool  `json:"authorized" dynamodbav:"authorized"`
	AuthorizedSpecRevision int64 `json:"authorized_spec_revision" dynamodbav:"authorized_spec_revision"`
	BudgetCredits          int64 `json:"budget_credits" dynamodbav:"budget_credits"`
	EstimatedCredits       int64 `json:"estimated_credits" dynamodbav:"estimated_credits"`

	RemoteJobID string       `json:"remote_job_id,omitempty" dynamodbav:"remote_job_id,omitempty"`
	Claim       *Claim       `json:"submission_claim,omitempty" dynamodbav:"submission_claim,omitempty"`
	Remote      *Snapshot    `json:"remote,omitempty" dynamodbav:"remote,omitempty"`
	Settlement  Settlement   `json:"settlement,omitempty" dynamodbav:"settlement,omitempty"`
	Posts       int          `json:"posts" dynamodbav:"posts"`
	Deliveries  []Delivery   `json:"deliveries,omitempty" dynamodbav:"deliveries,omitempty"`
	Schedule    *NextAction  `json:"next_action,omitempty" dynamodbav:"next_action,omitempty"`
	Counters    Counters     `json:"counters" dynamodbav:"counters"`
	Timestamps  Timestamps   `json:"timestamps" dynamodbav:"timestamps"`
	LastError   string       `json:"last_error_category,omitempty" dynamodbav:"last_error_category,omitempty"`
	Parked      *ParkedState `json:"parked,omitempty" dynamodbav:"parked,omitempty"`
	// Event is the completion event this record owes or has had sent
	// (OwedEvent decides it on every write; internal/notify sends it).
	Event *EventState `json:"event,omitempty" dynamodbav:"event,omitempty"`

	// LastAppliedMessageID is the queue message whose action produced this
	// revision, so a redelivery after a crash between write and send can
	// recognise its own write and re-emit the follow-up.
	LastAppliedMessageID string `json:"last_applied_message_id,omitempty" dynamodbav:"last_applied_message_id,omitempty"`
	// Writer names who wrote this revision: one worker's receive of a
	// message, one sweep run. The store sets it from the writer's context
	// (store.WithWriter); it is empty for a writer that named none. Unlike
	// LastAppliedMessageID it differs between two workers that received
	// the same message, so a write found standing with this writer is
	// this writer's own, whose answer was lost.
	Writer string `json:"writer,omitempty" dynamodbav:"writer,omitempty"`
}

// Claim records who claimed submission and when.
type Claim struct {
	Owner     string    `json:"owner" dynamodbav:"owner"`
	MessageID string    `json:"message_id,omitempty" dynamodbav:"message_id,omitempty"`
	At        time.Time `json:"at" dynamodbav:"at"`
}

// Snapshot is the last remote job state, without signed URLs or error
// text (which may echo the prompt): only what is safe to keep and show.
type Snapshot struct {
	State             RemoteState        `json:"state" dynamodbav:"state"`
	SubmissionFailure bool               `json:"submission_failure,omitempty" dynamodbav:"submission_failure,omitempty"`
	Progress          float64            `json:"progress" dynamodbav:"progress"`
	ErrorCode         string             `json:"error_code,omitempty" dynamodbav:"error_code,omitempty"`
	Credits           Credits            `json:"credits" dynamodbav:"credits"`
	Outputs           []OutputDescriptor `json:"outputs,omitempty" dynamodbav:"outputs,omitempty"`
	CreatedAt         time.Time          `json:"created_at" dynamodbav:"created_at"`
	UpdatedAt         time.Time          `json:"updated_at" dynamodbav:"updated_at"`
	StartedAt         *time.Time         `json:"started_at,omitempty" dynamodbav:"started_at,omitempty"`
	FinishedAt        *time.Time         `json:"finished_at,omitempty" dynamodbav:"finished_at,omitempty"`
	ObservedAt        time.Time          `json:"observed_at" dynamodbav:"observed_at"`
}

// Credits mirrors Genace's credits object.
type Credits struct {
	Reserved    int64       `json:"reserved" dynamodbav:"reserved"`
	Charged     int64       `json:"charged" dynamodbav:"charged"`
	Refunded    int64       `json:"refunded" dynamodbav:"refunded"`
	RefundState RefundState `json:"refund_state" dynamodbav:"refund_state"`
}

// OutputDescriptor describes one remote output, without its signed URL.
type OutputDescriptor struct {
	ContentType string `json:"content_type" dynamodbav:"content_type"`
	SizeBytes   int64  `json:"size_bytes" dynamodbav:"size_bytes"`
	SHA256      string `json:"sha256" dynamodbav:"sha256"`
}

// Delivery is one output copied into our storage.
type Delivery struct {
	Index     int       `json:"index" dynamodbav:"index"`
	Key       string    `json:"key" dynamodbav:"key"`
	SizeBytes int64     `json:"size_bytes" dynamodbav:"size_bytes"`
	SHA256    string    `json:"sha256" dynamodbav:"sha256"`
	StoredAt  time.Time `json:"stored_at" dynamodbav:"stored_at"`
}

// NextAction is the follow-up this record expects, so the sweep can re-arm
// a chain whose message was lost.
type NextAction struct {
	Action string    `json:"action" dynamodbav:"action"`
	Due    time.Time `json:"due" dynamodbav:"due"`
}

// Counters are per-operation tallies used by budgets and metrics.
type Counters struct {
	Observations int `json:"observations" dynamodbav:"observations"`
	RateLimited  int `json:"rate_limited" dynamodbav:"rate_limited"`
	// Unauthorized counts POSTs Genace refused for our credentials (401 or
	// 403), each of which created nothing.
	Unauthorized int `json:"unauthorized,omitempty" dynamodbav:"unauthorized,omitempty"`
	// WindowObservations counts observations since acceptance or the last
	// resume; the polling budget applies to it.
	WindowObservations int `json:"window_observations" dynamodbav:"window_observations"`
	// ReadFailures counts consecutive failed GETs of the job; a successful
	// read resets it.
	ReadFailures int `json:"read_failures" dynamodbav:"read_failures"`
}

// Timestamps are the record's lifecycle times.
type Timestamps struct {
	Created      time.Time  `json:"created" dynamodbav:"created"`
	Updated      time.Time  `json:"updated" dynamodbav:"updated"`
	Accepted     *time.Time `json:"accepted,omitempty" dynamodbav:"accepted,omitempty"`
	RemoteFailed *time.Time `json:"remote_failed,omitempty" dynamodbav:"remote_failed,omitempty"`
}

// ParkedState marks an operation that automation stopped driving and left
// for an operator, with the reason.
type ParkedState struct {
	Reason string    `json:"reason" dynamodbav:"reason"`
	At     time.Time `json:"at" dynamodbav:"at"`
}

// Clone returns a deep copy, so transitions never alias their input.
func (r Record) Clone() Record {
	c := r
	c.Input = slices.Clone(r.Input)
	if r.Claim != nil {
		v := *r.Claim
		c.Claim = &v
	}
	if r.Remote != nil {
		v := *r.Remote
		v.Outputs = slices.Clone(r.Remote.Outputs)
		v.StartedAt = cloneTime(r.Remote.StartedAt)
		v.FinishedAt = cloneTime(r.Remote.FinishedAt)
		c.Remote = &v
	}
	c.Deliveries = slices.Clone(r.Deliveries)
	if r.Schedule != nil {
		v := *r.Schedule
		c.Schedule = &v
	}
	if r.Parked != nil {
		v := *r.Parked
		c.Parked = &v
	}
	if r.Event != nil {
		v := *r.Event
		c.Event = &v
	}
	c.Timestamps.Accepted = cloneTime(r.Timestamps.Accepted)
	c.Timestamps.RemoteFailed = cloneTime(r.Timestamps.RemoteFailed)
	return c
}

// UTC returns a deep copy with every time in UTC and without a monotonic
// reading: the form a record is persisted and compared in, whatever zone
// the clock that made its times runs in.
func (r Record) UTC() Record {
	c := r.Clone()
	if c.Claim != nil {
		c.Claim.At = c.Claim.At.UTC()
	}
	if s := c.Remote; s != nil {
		s.CreatedAt, s.UpdatedAt, s.ObservedAt = s.CreatedAt.UTC(), s.UpdatedAt.UTC(), s.ObservedAt.UTC()
		s.StartedAt, s.FinishedAt = utcTime(s.StartedAt), utcTime(s.FinishedAt)
	}
	for i := range c.Deliveries {
		c.Deliveries[i].StoredAt = c.Deliveries[i].StoredAt.UTC()
	}
	if c.Schedule != nil {
		c.Schedule.Due = c.Schedule.Due.UTC()
	}
	if c.Parked != nil {
		c.Parked.At = c.Parked.At.UTC()
	}
	if c.Event != nil {
		c.Event.Due = c.Event.Due.UTC()
	}
	t := &c.Timestamps
	t.Created, t.Updated = t.Created.UTC(), t.Updated.UTC()
	t.Accepted, t.RemoteFailed = utcTime(t.Accepted), utcTime(t.RemoteFailed)
	return c
}

func utcTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := t.UTC()
	return &v
}

func cloneTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := *t
	return &v
}

// Terminal reports whether automation will never write this record again.
func (r *Record) Terminal() bool {
	switch r.Phase {
	case PhaseDelivered, PhaseRejected, PhaseSuperseded:
		return true
	case PhaseFailed:
		return r.Settlement == SettlementSettled
	}
	return false
}

// Active reports whether automation still drives this operation: it is
// neither terminal nor parked for an operator. The sweep reads only these.
func (r *Record) Active() bool {
	if r.Terminal() {
		return false
	}
	switch r.Phase {
	case PhaseUncertain, PhaseStalled:
		return false
	}
	return r.Parked == nil
}

// Delivered reports whether output i is stored.
func (r *Record) Delivered(i int) (Delivery, bool) {
	for _, d := range r.Deliveries {
		if d.Index == i {
			return d, true
		}
	}
	return Delivery{}, false
}

// SweepDue says whether the record belongs in the sweep's sparse index and
// when it falls due: an active record with a scheduled next action (due
// then), or a submission claim (due from when it was taken; the sweep
// applies the submit timeout).
func (r *Record) SweepDue() (time.Time, bool) {
	if !r.Active() {
		return time.Time{}, false
	}
	if r.Phase == PhaseSubmitting && r.Claim != nil {
		return r.Claim.At, true
	}
	if r.Schedule != nil {
		return r.Schedule.Due, true
	}
	return time.Time{}, false
}

// categoryShape is the shape of a category that may be shown outside: a
// short token, never text that could echo a prompt or carry a URL.
var categoryShape = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)

// SafeCategory is code when it has a category's shape (or is empty), else
// def: what a status view or an event may say of an error.
func SafeCategory(code, def string) string {
	if code == "" || categoryShape.MatchString(code) {
		return code
	}
	return def
}
