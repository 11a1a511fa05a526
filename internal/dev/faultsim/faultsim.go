// Package faultsim is genjobs' deterministic fault-injection simulation.
// It runs the real handlers (submit, observe, deliver, triage, sweep) on
// the embedded queue through the local event source mappings, and the
// application creating, changing and cancelling its operations through
// the real intake.Service (app.go), on the embedded bbolt store, against the Genace simulator over loopback HTTP/2
// over TLS (through Go's own transport and a frame relay, see relay.go),
// with outputs copied into a localpack.Dir, all on ONE virtual clock. It
// injects, with seeded probabilities, the faults a queue-driven Lambda
// system meets at each of its boundaries (Fault), and checks the design
// invariants against the simulator's ground truth and the store, naming
// each violation's operation and the command that replays the run.
//
// # Time and concurrency
//
// One clock.Manual drives the broker, the invocation deadlines, the
// handlers, the sweep and the simulator, and one goroutine drives
// everything: a step polls each mapping once (PollOnce invokes the
// handler synchronously) in an order drawn from the seed; when nothing is
// visible, the clock jumps to the next event. Handlers take no virtual
// time, so thousands of minute-long renders run in seconds.
//
// Nothing may wait on the virtual clock inside a handler, since only the
// blocked driver could advance it: observe uses LongPoll 0, the simulator
// adds no delays, a GET timeout is the client's error returned at once,
// an expired URL is Genace's clock running ahead for one download. Faults
// that need two workers on one message run the second one synchronously
// inside the first one's call: an interleaving chosen by the seed.
//
// With Concurrency 1 and every jitter drawn from the seed, a run is a
// function of its Config; the one tie to the wall clock is the Genace
// client's per-request timeout (5–20 s of wall time).
//
// # What is checked
//
// A recorder right above the store checks every write against the two
// before it (CheckWrite, invariant c) and each message's first write
// against the revision the message names (CheckFirstWrite, g); a wire tap
// on the simulator's side records every job id Genace's answers name;
// each POST is held to its authority (h) as it leaves, and as it reaches
// Genace to the spec the application has in effect (CheckPost, k, l);
// each 409 to a change or cancel to the claims written (CheckRefusal, m).
// After the run CheckFinal holds each operation to Genace's truth, the
// artifact store and the sweep's re-arms (a, b, d, e, f, g),
// checkLiveness to i, and CheckCreates and CheckPostsPerSpec to the
// application's creates and authorized specs (j, k), and CheckEvents
// and checkEvents to the events the handlers' and the sweep's sink
// accepted (n, events.go).
package faultsim

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/deliver"
	"github.com/genjobs/genjobs/internal/intake"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/replay"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/worker"
)

// Records is the store the handlers and the sweep are given, with the
// fault wrappers and the write recorder under it; Config.WrapRecords
// receives and returns it. It is the whole store.Store, so a planted bug
// wraps whatever the handlers come to use of it.
type Records = store.Store

// Config describes one simulation run.
type Config struct {
	// Seed determines everything: the workload, every fault roll, the
	// polling order and the simulator's job ids.
	Seed uint64
	// Operations is how many operations the workload creates (default 1000).
	Operations int
	// Faults are the fault probabilities; nil means DefaultFaults, an
	// empty map none.
	Faults Faults
	// Interval is the virtual time over which the operations are created
	// and dispatched (default: 20 ms per operation, at least 5 minutes).
	Interval time.Duration
	// Trace lists operations whose full history the run reports. Runs of
	// at most TraceAllBelow operations trace every operation.
	Trace []string
	// Progress, if set, receives a status line every few wall seconds.
	Progress io.Writer
	// Store, if set, is an empty store (a fresh DynamoDB Local table, say)
	// used instead of a fresh bbolt file, so the deployed store is inside
	// the checks. The run does not close it.
	Store store.Store
	// The Wrap* hooks are for tests that plant a bug to prove the checks
	// find it; never set them otherwise. WrapStore wraps the store under
	// the write recorder (a store that ignores the revision condition).
	WrapStore func(store.Store) store.Store
	// WrapGenace wraps the Genace client under the fault wrappers (a
	// client that retries a POST).
	WrapGenace func(Genace) Genace
	// WrapRecords wraps the store the handlers and the sweep see, above
	// the recorder and the fault wrappers: what it does reaches the
	// recorder as the handler's own write.
	WrapRecords func(Records) Records
	// WrapQueue wraps the queue the follow-ups are sent to.
	WrapQueue func(schedule.QueueSender) schedule.QueueSender
	// WrapIntake wraps the store the application's intake.Service
	// writes through.
	WrapIntake func(intake.Store) intake.Store
	// WrapOperator wraps the store the operator's replays use, under the
	// application's writes that race them.
	WrapOperator func(replay.Store) replay.Store
	// WrapExtender wraps what the handlers renew their leases with.
	WrapExtender func(worker.Extender) worker.Extender
	// WrapTransport wraps the HTTP transport under the Genace client.
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// UnrecordedDispatch makes the application send the dispatch without
	// recording it as the record's next action: the old contract, under
	// which a dispatch made stale by any write strands the operation. By
	// default it is recorded, so the sweep re-arms a lost or stale one.
	UnrecordedDispatch bool
	// SweepLimit is the sweep's Limit (default 1000, more than a run
	// leaves overdue at once); a small one lets records the sweep passes
	// over without moving them starve it.
	SweepLimit int
	// WrapArtifacts wraps the artifact store deliver sees, above the
	// fault wrapper.
	WrapArtifacts func(deliver.Artifacts) deliver.Artifacts
	// Renders, if set, replaces the seeded models: render i takes
	// Renders[i] (queued 2 s, then running) and succeeds with one output.
	// Operations defaults to len(Renders).
	Renders []time.Duration
	// Scale makes the run count the load on each service (Result.Scale).
	Scale bool
	// WrapContext wraps each invocation's context (a handler that
	// detaches from its deadline); the checks hold the handler to the
	// deadline Lambda kills it at, whatever its context says.
	WrapContext func(context.Context) context.Context
}

// TraceAllBelow is the largest run that keeps every operation's history;
// larger ones keep only Config.Trace's, to stay small in memory.
const TraceAllBelow = 5000

// Invariant names what a violation breaks (design invariants 1–6).
type Invariant string

// The invariants checked after every run.
const (
	// InvPosts (design 1): at most one job created per operation, and no
	// POST beyond the first except after a 429 (which created nothing),
	// unless an operator decided so (an audit entry).
	InvPosts Invariant = "a:at-most-one-post"
	// InvJobID (design 2): every job id Genace handed back is on the
	// record or in a review; a job whose id never came back leaves its
	// operation in review.
	InvJobID Invariant = "b:job-id-kept"
	// InvWrites (design 3): every write was conditioned on the revision it
	// replaced, moved along a legal transition, never touched a terminal
	// record and never replaced a job id.
	InvWrites Invariant = "c:no-stale-overwrite"
	// InvSettled (design 4): every operation ends terminal or waiting for
	// review; none is lost or stuck without one.
	InvSettled Invariant = "d:terminal-or-review"
	// InvDelivery (design 5): a delivered operation's outputs are all in
	// the artifact store with Genace's checksums, each stored once; a
	// succeeded render never ends otherwise terminal.
	InvDelivery Invariant = "e:delivered-once"
	// InvRefund (design 6): a failed operation is settled only when Genace
	// shows the refund settled or nothing charged; unsettled ones wait for
	// review.
	InvRefund Invariant = "f:refund-settled"
	// InvChain (design 4): the chain neither forks (a message's handler
	// acts only on the revision it names, or its own earlier progress)
	// nor lives on the sweep (SweepBound).
	InvChain Invariant = "g:one-chain"
	// InvAuthority (design 7): a POST leaves only while its message stays
	// in flight under the worker's receipt handle, by the queue's truth,
	// for the POST's timeout and the time to persist its outcome.
	InvAuthority Invariant = "h:post-authority"
)

// Violation is one broken invariant.
type Violation struct {
	Invariant   Invariant `json:"invariant"`
	OperationID string    `json:"operation_id"`
	Detail      string    `json:"detail"`
	// History is the operation's trace (messages, Genace calls, writes,
	// faults, final record and simulator truth), when it was traced.
	History []string `json:"history,omitempty"`
}

// String is the one-line form: invariant, operation, what is wrong.
func (v Violation) String() string {
	return fmt.Sprintf("[%s] %s: %s", v.Invariant, v.OperationID, v.Detail)
}

// Result is what a run did and found.
type Result struct {
	Seed       uint64 `json:"seed"`
	Operations int    `json:"operations"`
	Faults     string `json:"faults"`
	// UnrecordedDispatch is Config.UnrecordedDispatch, for the replay command.
	UnrecordedDispatch bool          `json:"unrecorded_dispatch,omitempty"`
	Virtual            time.Duration `json:"virtual_elapsed"`
	Wall               time.Duration `json:"wall_elapsed"`
	// Invocations and Records count handler invocations and the records
	// (messages) handed to them, per function.
	Invocations map[string]int64 `json:"invocations"`
	Records     map[string]int64 `json:"records"`
	// Actions is every record handled plus every sweep run: the number of
	// times a function acted.
	Actions int64 `json:"actions"`
	// Writes counts successful record writes.
	Writes int64 `json:"writes"`
	// Injected counts each fault as really injected.
	Injected map[Fault]int64         `json:"faults_injected"`
	Phases   map[operation.Phase]int `json:"phases"`
	Reviews  int                     `json:"open_reviews"`
	// ReviewsOfTerminal counts open reviews of operations that ended
	// terminal anyway: operator noise.
	ReviewsOfTerminal int `json:"open_reviews_of_terminal"`
	// SecondJobReviews counts the open reviews of terminal operations that
	// must stay open: they name a second job Genace created (SecondJobReview).
	SecondJobReviews int `json:"second_job_reviews,omitempty"`
	// UnknownSubmissions counts the submissions whose outcome was
	// genuinely unknown: a POST whose answer never reached its handler or
	// was unknown by the contract (answerKnown), and a claim whose worker
	// died before its POST. Each may rightly leave an operation uncertain;
	// nothing else should.
	UnknownSubmissions int `json:"unknown_submissions"`
	// MadeUncertain counts the times automation made an operation
	// uncertain, and LeftUncertain those that no later evidence resolved
	// (also after an operator's reconciliation raced it): each needs an
	// operator, whether or not the run's operator got to it.
	MadeUncertain int `json:"made_uncertain"`
	LeftUncertain int `json:"left_uncertain"`
	// UncertainBeyondUnknown names the operations left uncertain more
	// often than they had unknown submissions.
	UncertainBeyondUnknown []string `json:"uncertain_beyond_unknown,omitempty"`
	// Sweeps counts sweep runs; SweepRearmed and SweepClaimsExpired what
	// the safety net did: chains re-armed, stale claims parked.
	Sweeps             int `json:"sweeps"`
	SweepRearmed       int `json:"sweep_rearmed"`
	SweepClaimsExpired int `json:"sweep_claims_expired"`
	// Genace's side: POST requests, jobs created, GETs, downloads.
	Posts     int `json:"posts"`
	Jobs      int `json:"jobs"`
	Gets      int `json:"gets"`
	Downloads int `json:"downloads"`
	// Reuploads counts Puts of an output another worker had stored
	// meanwhile: duplicate work, not a duplicate object.
	Reuploads int `json:"reuploads"`
	// Paths counts the decisions the handlers logged, by function,
	// message and reason: which code paths the run reached.
	Paths map[string]int `json:"paths"`
	// LivenessBound is InvLiveness's bound for an operation no fault
	// ended the chain of; LivenessMax the longest any operation took from
	// its render's end to settle (or to the run's end), LivenessMaxOp
	// which, and LivenessMaxBound its own bound; LivenessRatio is the
	// largest latency / own bound (at most 1 when the bound is met).
	// StaleDeletes counts acknowledgements that found the message taken
	// by another worker.
	LivenessBound    time.Duration `json:"liveness_bound"`
	LivenessMax      time.Duration `json:"liveness_max"`
	LivenessMaxOp    string        `json:"liveness_max_operation,omitempty"`
	LivenessMaxBound time.Duration `json:"liveness_max_operation_bound,omitempty"`
	LivenessRatio    float64       `json:"liveness_ratio"`
	StaleDeletes     int64         `json:"stale_deletes"`
	// Events counts the completion events the sink accepted and refused.
	Events     EventCounts `json:"events"`
	Violations []Violation `json:"violations"`
	// Scale is the load the run put on each service (Config.Scale).
	Scale *Scale `json:"scale,omitempty"`
	// Histories are the traces of the operations Config.Trace named.
	Histories map[string][]string `json:"histories,omitempty"`
}

// Replay is the command that runs the same simulation again.
func (r *Result) Replay() string {
	cmd := fmt.Sprintf("genjobs soak --seed %d --operations %d --faults %s", r.Seed, r.Operations, r.Faults)
	if r.UnrecordedDispatch {
		cmd += " --unrecorded-dispatch"
	}
	return cmd
}

// ReplayTest is the go test command line that runs the same simulation
// as TestSimulation.
func (r *Result) ReplayTest() string {
	cmd := fmt.Sprintf("go test ./internal/dev/faultsim -run 'TestSimulation$' -faultsim.seed=%d -faultsim.ops=%d -faultsim.faults=%s", r.Seed, r.Operations, r.Faults)
	if r.UnrecordedDispatch {
		cmd += " -faultsim.unrecorded-dispatch"
	}
	return cmd
}

// WriteSummary prints the figures and the violations.
func (r *Result) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "faultsim seed %d: %d operations, %s virtual in %s wall\n", r.Seed, r.Operations, r.Virtual.Round(time.Second), r.Wall.Round(time.Millisecond))
	fmt.Fprintf(w, "actions %d (invocations: %s; records: %s), %d record writes, %d stale deletes\n",
		r.Actions, counts(r.Invocations), counts(r.Records), r.Writes, r.StaleDeletes)
	fmt.Fprintf(w, "sweeps %d: %d chains re-armed, %d stale claims parked\n", r.Sweeps, r.SweepRearmed, r.SweepClaimsExpired)
	fmt.Fprintf(w, "Genace: %d POSTs, %d jobs, %d GETs, %d downloads; %d outputs uploaded again after another worker stored them\n", r.Posts, r.Jobs, r.Gets, r.Downloads, r.Reuploads)
	var phases []string
	for _, p := range operation.Phases {
		if n := r.Phases[p]; n > 0 {
			phases = append(phases, fmt.Sprintf("%s %d", p, n))
		}
	}
	fmt.Fprintf(w, "phases: %s; open reviews %d (%d of them on operations that ended terminal, %d more about a second job Genace created)\n", strings.Join(phases, ", "), r.Reviews, r.ReviewsOfTerminal, r.SecondJobReviews)
	fmt.Fprintf(w, "operators asked: %d operations left uncertain (of %d made uncertain) per %d submissions of genuinely unknown outcome = %.2f (at most %.2f); %d open reviews on terminal operations (at most %d)\n",
		r.LeftUncertain, r.MadeUncertain, r.UnknownSubmissions, r.UncertainPerUnknown(), float64(MaxUncertainPerUnknown), r.ReviewsOfTerminal, MaxReviewsOfTerminal)
	fmt.Fprintf(w, "liveness: the longest from a render's end to terminal or waiting for an operator was %s (%s, whose bound was %s); bound %s plus %s per chain a fault ended; largest latency / own bound %.2f (at most 1.00)\n",
		r.LivenessMax.Round(time.Second), cmp.Or(r.LivenessMaxOp, "none"), r.LivenessMaxBound.Round(time.Second), r.LivenessBound, Rearm(simHeld), r.LivenessRatio)
	if n := len(r.UncertainBeyondUnknown); n > 0 {
		shown := r.UncertainBeyondUnknown[:min(n, 20)]
		more := ""
		if n > len(shown) {
			more = fmt.Sprintf(" and %d more", n-len(shown))
		}
		fmt.Fprintf(w, "left uncertain beyond their unknown submissions: %s%s\n", strings.Join(shown, ", "), more)
	}
	fmt.Fprintf(w, "events: %d sent (%d duplicates, %d of events sent before or refused), %d sends refused, %d marks lost\n",
		r.Events.Sent, r.Events.Duplicates, r.Events.Resent, r.Events.Refused, r.Events.MarksLost)
	fmt.Fprintln(w, "faults injected:")
	var total int64
	for _, k := range append(append([]Fault{}, Kinds...), RateLimited) {
		if n := r.Injected[k]; n > 0 {
			fmt.Fprintf(w, "  %-24s %d\n", k, n)
			total += n
		}
	}
	fmt.Fprintf(w, "  %-24s %d\n", "total", total)
	for _, t := range r.Thresholds() {
		fmt.Fprintf(w, "threshold exceeded: %s\n", t)
	}
	fmt.Fprintf(w, "violations: %d\n", len(r.Violations))
	for i, v := range r.Violations {
		if i == 50 {
			fmt.Fprintf(w, "  ... and %d more\n", len(r.Violations)-i)
			break
		}
		fmt.Fprintf(w, "  %s\n", v)
		for _, h := range v.History {
			fmt.Fprintf(w, "      %s\n", h)
		}
	}
	for _, op := range slices.Sorted(maps.Keys(r.Histories)) {
		fmt.Fprintf(w, "history of %s:\n", op)
		for _, h := range r.Histories[op] {
			fmt.Fprintf(w, "      %s\n", h)
		}
	}
	if len(r.Violations) > 0 {
		fmt.Fprintf(w, "replay: %s\n", r.Replay())
		fmt.Fprintf(w, "   or: %s\n", r.ReplayTest())
		if len(r.Violations[0].History) == 0 {
			fmt.Fprintf(w, "trace one: %s --trace %s\n", r.Replay(), r.Violations[0].OperationID)
		}
	}
}

func counts(m map[string]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// Run runs one simulation and checks the invariants. The error is for a
// run that could not be carried out (setup failed, the driver got stuck);
// broken invariants are Result.Violations.
func Run(cfg Config) (*Result, error) { return RunContext(context.Background(), cfg) }

// RunContext is Run, stopped early (with ctx's error) when ctx ends.
func RunContext(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Operations <= 0 {
		cfg.Operations = cmp.Or(len(cfg.Renders), 1000)
	}
	if len(cfg.Renders) > 0 && len(cfg.Renders) < cfg.Operations {
		return nil, fmt.Errorf("faultsim: %d render times for %d operations", len(cfg.Renders), cfg.Operations)
	}
	if cfg.Faults == nil {
		cfg.Faults = DefaultFaults()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = max(5*time.Minute, time.Duration(cfg.Operations)*20*time.Millisecond)
	}
	if cfg.SweepLimit <= 0 {
		cfg.SweepLimit = 1000
	}
	w, err := newWorld(cfg)
	if err != nil {
		return nil, err
	}
	defer w.close()
	if err := w.drive(ctx); err != nil {
		return nil, err
	}
	return w.result()
}
