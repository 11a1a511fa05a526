package faultsim

import (
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Fault names one kind of injected fault. Each kind has a probability in
// Faults (the knob) and a count in Result.Faults (how often it was really
// injected: a roll that hits but finds nothing to act on is not counted).
type Fault string

// The faults, one per boundary of a queue-driven Lambda system.
const (
	// DupSend sends a follow-up twice (SQS at-least-once, a sender retry);
	// the copy arrives up to 3 s later.
	DupSend Fault = "dup_send"
	// DupReceive hands a received message to a second worker before the
	// first starts on it, so both work on the same message.
	DupReceive Fault = "dup_receive"
	// VisibilityExpiry pauses a worker inside its Genace call, after the
	// answer and before the handler sees it, while a second worker takes
	// its message and handles it to the end.
	VisibilityExpiry Fault = "visibility_expiry"
	// CrashAfterWrite kills the worker right after a successful store
	// write: nothing of its invocation is acknowledged.
	CrashAfterWrite Fault = "crash_after_write"
	// CrashBeforeSend kills the worker just before it sends a follow-up.
	CrashBeforeSend Fault = "crash_before_send"
	// CrashAfterPost kills the worker after Genace answered its POST and
	// before the handler saw the answer: the job's id dies with it.
	CrashAfterPost Fault = "crash_after_post"
	// LeaseRenewalFailure fails ChangeMessageVisibility.
	LeaseRenewalFailure Fault = "lease_renewal_failure"
	// PostAcceptThenDrop: Genace creates the job, then drops the
	// connection without answering.
	PostAcceptThenDrop Fault = "post_accept_then_drop"
	// Post502JobID: a known submission failure, 502 with error.job_id.
	Post502JobID Fault = "post_502_job_id"
	// Post5xxNoJob: 503 without a job id; nothing created.
	Post5xxNoJob Fault = "post_5xx_no_job"
	// Post5xxJobCreated: 500 without a job id although a job was created.
	Post5xxJobCreated Fault = "post_5xx_job_created"
	// PostReject: a definite 400 rejection; nothing created.
	PostReject Fault = "post_reject"
	// RateLimitStorm is 10–40 s of virtual time in which 80% of POSTs and
	// 30% of GETs get 429 with Retry-After 1–5 s; its rate is per virtual
	// minute. Each 429 counts as RateLimited.
	RateLimitStorm Fault = "rate_limit_storm"
	// RateLimited counts the storms' 429s; it has no knob of its own.
	RateLimited Fault = "rate_limited_429"
	// GetTimeout: a GET reaches Genace but the caller gets the client's
	// timeout error.
	GetTimeout Fault = "get_timeout"
	// Get5xx: a job GET answered 500/502/503.
	Get5xx Fault = "get_5xx"
	// Download5xx: a signed-URL download answered 502.
	Download5xx Fault = "download_5xx"
	// URLExpired: the download reaches Genace after the signed URL's
	// lifetime, as if the worker had paused before the copy.
	URLExpired Fault = "url_expired"
	// ArtifactPutFailure: the artifact store fails mid-stream.
	ArtifactPutFailure Fault = "artifact_put_failure"
	// StoreConflict: the application raises the budget right before a
	// handler's conditional update, which therefore conflicts; or right
	// after a handler's write ended the operation, which the store's
	// terminal guard must refuse.
	StoreConflict Fault = "store_conflict"
	// ReconcileFail: Genace's operators fail the running job (charged,
	// never refunded).
	ReconcileFail Fault = "reconcile_fail"
	// UserChangeSpec: the user changes a prepared request (re-authorized,
	// dispatched again).
	UserChangeSpec Fault = "user_change_spec"
	// UserSupersede: the user replaces an accepted request.
	UserSupersede Fault = "user_supersede"
	// CrashAfterClaim kills the submit worker after its claim write,
	// before the POST; its message stays hidden as the deployed queue
	// hides it, so the sweep parks the stale claim first.
	CrashAfterClaim Fault = "crash_after_claim"
	// H2Reset: Genace reads the whole POST, creates the job and resets the
	// HTTP/2 stream (REFUSED_STREAM or PROTOCOL_ERROR), which Go's
	// transport may answer by sending the request again.
	H2Reset Fault = "post_h2_stream_reset"
	// BodyDrift: Genace's 202 or 5xx names the job id where the contract
	// puts it but otherwise drifts from the contract.
	BodyDrift Fault = "post_body_drift"
	// LostAck: the store applies a conditional write and its answer is
	// lost (see recorder.write).
	LostAck Fault = "store_lost_ack"
	// ClaimDuplicate: a second dispatch reaches another worker, which
	// handles it to the end while the first holds the submission claim.
	ClaimDuplicate Fault = "dispatch_dup_during_claim"
	// ReceiveGap: time passes between the mapping's receive and the
	// handler (a batching window, a cold start, a throttled invoke), so
	// the batch's visibility has run down, or out.
	ReceiveGap Fault = "receive_gap"
	// StaleDelete: a handled message's visibility ran out before its
	// acknowledgement, and another worker handles it afterwards; the
	// stale delete leaves it queued, as SQS's does.
	StaleDelete Fault = "stale_delete"
	// OperatorRace: an operator plans and replays an operation at a
	// random moment: while a handler is inside its Genace call, or with
	// the application writing between the replay's read and its write.
	OperatorRace Fault = "operator_race"
	// Post408: Genace creates the job and answers 408 without its id: an
	// unknown outcome, by the contract.
	Post408 Fault = "post_408_after_create"
	// UnusableJobID: Genace's 202 names the job by an id outside the job
	// id definition (message.ValidJobID).
	UnusableJobID Fault = "post_unusable_job_id"
	// SecondJobID: Genace's gateway runs one POST twice, and the answer
	// reaches its worker late, after an operator reconciled the
	// operation with the other job (see secondJob).
	SecondJobID Fault = "genace_second_job"
	// ForeignObject: another writer puts an object of the output's size
	// but other content under its key, before the delivery's Stat or
	// between its Stat and its Put.
	ForeignObject Fault = "artifact_foreign_object"
	// UnauthorizedChange: the user changes a prepared request and no
	// re-authorization follows: the recorded dispatch fails its
	// precondition from then on.
	UnauthorizedChange Fault = "user_change_unauthorized"
	// InvocationTimeUsed: a handler reaches its batch with only 1 s to a
	// minute of its timeout left; invariant h holds each POST to that
	// deadline (no virtual time passes inside a handler).
	InvocationTimeUsed Fault = "invocation_time_used"

	// The intake faults: the application creates, changes and cancels
	// its operations through intake.Service (app.go), and meets these.

	// IntakeCreateRace: two creates of the same request interleave, the
	// second run inside the first's store Create, before or after it
	// applies.
	IntakeCreateRace Fault = "intake_create_race"
	// IntakeAnswerLost: a create's answer is lost, and the caller sends
	// the same request again, 0–3 s later, up to 10 times in all.
	IntakeAnswerLost Fault = "intake_create_answer_lost"
	// IntakeChangeRace: the application changes the input (If-Match the
	// revision it read, reading again after a 412) before the submission
	// claim, inside the claim's write before or after it applies, or
	// 1–60 s later, mostly after it.
	IntakeChangeRace Fault = "intake_change_race"
	// IntakeCancel: the application cancels the operation right after
	// creating it, or 1–60 s later, mostly after the claim.
	IntakeCancel Fault = "intake_cancel"

	// The completion events' faults: the sink every handler and the
	// sweep publish to (events.go) meets these; invariant n holds every
	// owed event to being sent within EventBound.

	// EventSendFail: the event bus refuses a send (nothing arrives).
	EventSendFail Fault = "event_send_fail"
	// EventMarkLost: the send arrives and marking it sent fails, so the
	// event is sent again (consumers deduplicate on its id).
	EventMarkLost Fault = "event_mark_lost"

	// The persistent faults each strike one operation (drawn with the
	// workload) to the end of the run, counted once per operation.
	// Automation must park such an operation with a review within
	// LivenessBound.

	// PersistentGet5xx: every GET of the operation's job answers 500.
	PersistentGet5xx Fault = "get_5xx_persistent"
	// UndecodableBody: every GET of the job answers 200 with a body the
	// client cannot decode (an unlisted state, or one in three over
	// genace.MaxBodyBytes).
	UndecodableBody Fault = "get_body_undecodable"
	// CopyNeverVerifies: every download of the job's outputs has the
	// right size and the wrong sha256.
	CopyNeverVerifies Fault = "copy_sha256_mismatch"
	// ArtifactStoreDown: every Put under the operation's keys fails.
	ArtifactStoreDown Fault = "artifact_store_persistent"
)

// PersistentKinds are the faults that strike one operation for the
// rest of the run, in the order the workload draws them.
var PersistentKinds = []Fault{PersistentGet5xx, UndecodableBody, CopyNeverVerifies, ArtifactStoreDown}

// persistentRates are the persistent faults' rates, per operation: a
// thousand operations meet each a few times.
var persistentRates = map[Fault]float64{
	PersistentGet5xx: 0.003, UndecodableBody: 0.003, CopyNeverVerifies: 0.003, ArtifactStoreDown: 0.003,
}

// PersistentInDefault says whether DefaultFaults and "all" include the
// persistent faults (see TestPersistentFaultsAreReported).
const PersistentInDefault = true

// rates is every fault's default rate, the persistent ones included.
func rates() map[Fault]float64 {
	all := maps.Clone(defaultRates)
	maps.Copy(all, persistentRates)
	return all
}

// Kinds lists every fault with a knob, in report order.
var Kinds = []Fault{
	DupSend, DupReceive, VisibilityExpiry, CrashAfterWrite, CrashBeforeSend, CrashAfterPost, LeaseRenewalFailure,
	PostAcceptThenDrop, Post502JobID, Post5xxNoJob, Post5xxJobCreated, PostReject, RateLimitStorm,
	GetTimeout, Get5xx, Download5xx, URLExpired, ArtifactPutFailure, StoreConflict,
	ReconcileFail, UserChangeSpec, UserSupersede,
	CrashAfterClaim, H2Reset, BodyDrift, LostAck, ClaimDuplicate, ReceiveGap, StaleDelete, OperatorRace,
	Post408, UnusableJobID, SecondJobID, ForeignObject, UnauthorizedChange, InvocationTimeUsed,
	IntakeCreateRace, IntakeAnswerLost, IntakeChangeRace, IntakeCancel,
	EventSendFail, EventMarkLost,
	PersistentGet5xx, UndecodableBody, CopyNeverVerifies, ArtifactStoreDown,
}

// defaultRates are DefaultFaults' probabilities per opportunity: a
// thousand operations meet every fault many times, and most finish.
var defaultRates = map[Fault]float64{
	DupSend: 0.03, DupReceive: 0.01, VisibilityExpiry: 0.01,
	CrashAfterWrite: 0.005, CrashBeforeSend: 0.005, CrashAfterPost: 0.005, LeaseRenewalFailure: 0.05,
	PostAcceptThenDrop: 0.01, Post502JobID: 0.02, Post5xxNoJob: 0.01, Post5xxJobCreated: 0.005, PostReject: 0.005,
	RateLimitStorm: 0.1,
	GetTimeout:     0.02, Get5xx: 0.03, Download5xx: 0.02, URLExpired: 0.02, ArtifactPutFailure: 0.02,
	StoreConflict: 0.02,
	ReconcileFail: 0.01, UserChangeSpec: 0.01, UserSupersede: 0.01,
	CrashAfterClaim: 0.005, H2Reset: 0.01, BodyDrift: 0.01, LostAck: 0.01, ClaimDuplicate: 0.01, ReceiveGap: 0.05, StaleDelete: 0.01, OperatorRace: 0.01,
	Post408: 0.005, UnusableJobID: 0.005, SecondJobID: 0.02, ForeignObject: 0.005, UnauthorizedChange: 0.005, InvocationTimeUsed: 0.02,
	IntakeCreateRace: 0.02, IntakeAnswerLost: 0.02, IntakeChangeRace: 0.03, IntakeCancel: 0.01,
	EventSendFail: 0.05, EventMarkLost: 0.02,
}

// Faults maps each fault to its probability per opportunity (0..1).
// Missing faults are off.
type Faults map[Fault]float64

// DefaultFaults turns every fault on at its default rate (the persistent
// ones only if PersistentInDefault).
func DefaultFaults() Faults {
	f := Faults(maps.Clone(defaultRates))
	if PersistentInDefault {
		maps.Copy(f, persistentRates)
	}
	return f
}

// ParseFaults reads a fault selection: "all" (DefaultFaults), "none",
// "persistent" (the persistent faults), or a comma list of fault names,
// each at its default rate or with its own as name=rate; "all" may be
// followed by overrides ("all,dup_send=0.2,get_5xx=0", "all,persistent").
func ParseFaults(s string) (Faults, error) {
	s = strings.TrimSpace(s)
	f := Faults{}
	if s == "" || s == "none" {
		return f, nil
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		switch part {
		case "all":
			maps.Copy(f, DefaultFaults())
			continue
		case "persistent":
			maps.Copy(f, persistentRates)
			continue
		}
		name, rate, hasRate := strings.Cut(part, "=")
		k := Fault(name)
		def, known := rates()[k]
		if !known {
			return nil, fmt.Errorf("unknown fault %q (known: all, none, persistent, %s)", name, strings.Join(faultNames(), ", "))
		}
		p := def
		if hasRate {
			v, err := strconv.ParseFloat(rate, 64)
			if err != nil || v < 0 || v > 1 {
				return nil, fmt.Errorf("fault %s: rate %q is not a probability in 0..1", name, rate)
			}
			p = v
		}
		f[k] = p
	}
	return f, nil
}

// String is the selection in ParseFaults' syntax, sorted, so a replay
// command reproduces it exactly.
func (f Faults) String() string {
	if len(f) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(f))
	for _, k := range Kinds {
		if p, ok := f[k]; ok && p > 0 {
			parts = append(parts, fmt.Sprintf("%s=%s", k, strconv.FormatFloat(p, 'g', -1, 64)))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

func faultNames() []string {
	out := make([]string, len(Kinds))
	for i, k := range Kinds {
		out[i] = string(k)
	}
	slices.Sort(out)
	return out
}

// injector rolls the dice. Each fault has its own PCG stream from the
// seed and its name, so switching one off leaves the others' rolls. The
// mutex is for the race detector, which cannot see the strict turns a
// loopback socket gives the driver and the simulator's handlers.
type injector struct {
	mu     sync.Mutex
	rates  Faults
	rngs   map[Fault]*rand.Rand
	counts map[Fault]int64
	seed   uint64
}

func newInjector(seed uint64, rates Faults) *injector {
	return &injector{rates: rates, rngs: map[Fault]*rand.Rand{}, counts: map[Fault]int64{}, seed: seed}
}

// stream returns the fault's own generator; mu must be held.
func (in *injector) stream(f Fault) *rand.Rand {
	r, ok := in.rngs[f]
	if !ok {
		h := fnv.New64a()
		h.Write([]byte(f))
		r = rand.New(rand.NewPCG(in.seed, h.Sum64()))
		in.rngs[f] = r
	}
	return r
}

// roll reports whether fault f strikes at this opportunity, without
// counting it: the caller counts it with note once it really acted.
func (in *injector) roll(f Fault) bool {
	p := in.rates[f]
	if p <= 0 {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.stream(f).Float64() < p
}

// hit is roll plus note, for faults that always act when they strike.
func (in *injector) hit(f Fault) bool {
	if !in.roll(f) {
		return false
	}
	in.note(f)
	return true
}

// note counts one injection of f.
func (in *injector) note(f Fault) {
	in.mu.Lock()
	in.counts[f]++
	in.mu.Unlock()
}

// intn draws from f's stream, for the shape of a fault (a delay, a status).
func (in *injector) intn(f Fault, n int) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.stream(f).IntN(n)
}

func (in *injector) snapshot() map[Fault]int64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return maps.Clone(in.counts)
}
