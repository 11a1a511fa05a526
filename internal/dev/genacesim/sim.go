// Package genacesim is an in-process Genace simulator: the whole contract
// of shared/genace-api.md served over real HTTP, with time taken from an
// injectable clock and every fault scriptable per request, plus ground
// truth (what was really created and charged) for tests to check the
// client's classification against.
//
// Behaviour worth knowing when writing tests:
//
//   - Job states are computed lazily from the clock: queued until
//     created+QueueFor, running until +RunFor, then succeeded, or (model
//     Outcome "fail") failed with charged=price and refund_state pending
//     for RefundSettleAfter, then settled with refunded=charged. reserved
//     stays at the price taken on acceptance.
//   - A known submission failure (FaultServerErrorWithJobID) is failed at
//     creation with reserved=charged=price and refund pending. Its refund
//     advances ONLY through API GETs of that job: the first GET evaluated
//     at or after failure+RefundSettleAfter moves it to settled
//     (refunded=charged, updated_at = that GET's time). Earlier GETs,
//     faulted GET answers, Jobs() and other reads do not advance it. A
//     long poll on such a job wakes at failure+RefundSettleAfter, which
//     counts as such a GET.
//   - Signed output URLs: a bad signature answers 403 forbidden; an
//     expired (by the simulator clock) but correctly signed URL answers
//     410 Gone with code url_expired.
//   - Long polls wake when state or refund_state changes (by time or by
//     reconciliation), when wait passes, when the client goes away, or on
//     Close.
package genacesim

import (
	"cmp"
	"crypto/subtle"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
)

// Outcome is how a model's renders end.
type Outcome string

// Render outcomes.
const (
	// OutcomeSucceed renders outputs and charges the price.
	OutcomeSucceed Outcome = "succeed"
	// OutcomeFail fails the render, charges the price and refunds it
	// automatically (pending, then settled after RefundSettleAfter).
	OutcomeFail Outcome = "fail"
)

// ModelConfig is how one model behaves.
type ModelConfig struct {
	Price       int64         // credits reserved on accept, charged at the end
	QueueFor    time.Duration // time spent queued (0: running immediately)
	RunFor      time.Duration // time spent running (0: finishes immediately)
	Outcome     Outcome       // "" means OutcomeSucceed
	OutputCount int           // outputs of a successful render; 0 means 1
}

// DefaultModelConfig is used for unknown models when Config.DefaultModel
// is the zero value.
var DefaultModelConfig = ModelConfig{Price: 10, QueueFor: 2 * time.Second, RunFor: 10 * time.Second, Outcome: OutcomeSucceed, OutputCount: 1}

// Config tunes the simulator. Zero values pick the documented defaults.
type Config struct {
	// APIKey is the bearer token every /api and /admin request must carry;
	// "" disables the check.
	APIKey string
	// DefaultModel applies to models absent from Models; the zero value
	// means DefaultModelConfig.
	DefaultModel ModelConfig
	// Models configures named models.
	Models map[string]ModelConfig
	// RefundSettleAfter is how long a refund stays pending (default 2s).
	RefundSettleAfter time.Duration
	// SignedURLTTL is the lifetime of output URLs (default 15m).
	SignedURLTTL time.Duration
	// Seed makes job ids, output images and URL signatures deterministic.
	Seed int64
	// MaxWait is the longest accepted long poll (default 30s); a larger
	// wait answers 400 invalid_request.
	MaxWait time.Duration
	// RateLimitPerSecond caps API requests (POST and GET) per clock
	// second; excess requests get 429 with Retry-After. 0 disables it.
	RateLimitPerSecond int
}

// Simulator is an http.Handler implementing the Genace API. It is safe
// for concurrent use.
type Simulator struct {
	cfg    Config
	clk    clock.Clock
	mux    *http.ServeMux
	signer signer

	mu          sync.Mutex
	rng         *rand.Rand
	jobs        map[string]*job
	order       []*job
	byOp        map[string][]string
	postCount   map[string]int
	getCount    map[string]int
	fileCount   map[string]int
	totalPosts  int
	totalGets   int
	fileGets    int
	postScripts map[string][]Fault
	getScripts  map[string][]Fault
	fileScripts map[string][]Fault
	faultFunc   FaultFunc
	onChange    func()
	notify      chan struct{} // closed and replaced on reconciliation
	rlSecond    int64
	rlCount     int

	done      chan struct{}
	closeOnce sync.Once
}

var _ http.Handler = (*Simulator)(nil)

// New builds a simulator on clk (use clock.NewManual in tests to drive
// time). It panics on an invalid Config (unknown Outcome, negative
// durations), since that is a bug in the test.
func New(cfg Config, clk clock.Clock) *Simulator {
	clk = cmp.Or[clock.Clock](clk, clock.Real{})
	if cfg.DefaultModel == (ModelConfig{}) {
		cfg.DefaultModel = DefaultModelConfig
	}
	cfg.DefaultModel = normalizeModel("default", cfg.DefaultModel)
	models := make(map[string]ModelConfig, len(cfg.Models))
	for name, mc := range cfg.Models {
		models[name] = normalizeModel(name, mc)
	}
	cfg.Models = models
	if cfg.RefundSettleAfter <= 0 {
		cfg.RefundSettleAfter = 2 * time.Second
	}
	if cfg.SignedURLTTL <= 0 {
		cfg.SignedURLTTL = 15 * time.Minute
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 30 * time.Second
	}
	s := &Simulator{
		cfg:         cfg,
		clk:         clk,
		signer:      newSigner(cfg.Seed),
		rng:         rand.New(rand.NewPCG(uint64(cfg.Seed), 0x67656e616365)),
		jobs:        map[string]*job{},
		byOp:        map[string][]string{},
		postCount:   map[string]int{},
		getCount:    map[string]int{},
		fileCount:   map[string]int{},
		postScripts: map[string][]Fault{},
		getScripts:  map[string][]Fault{},
		fileScripts: map[string][]Fault{},
		notify:      make(chan struct{}),
		done:        make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/jobs", s.handlePost)
	mux.HandleFunc("GET /api/v1/jobs/{id}", s.handleGet)
	mux.HandleFunc("GET /files/{job}/{index}", s.handleFile)
	mux.HandleFunc("POST /admin/reconcile-jobs", s.handleReconcile)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint", "", 0)
	})
	s.mux = mux
	return s
}

func normalizeModel(name string, mc ModelConfig) ModelConfig {
	if mc.Outcome == "" {
		mc.Outcome = OutcomeSucceed
	}
	if mc.Outcome != OutcomeSucceed && mc.Outcome != OutcomeFail {
		panic(fmt.Sprintf("genacesim: model %q: unknown outcome %q", name, mc.Outcome))
	}
	if mc.OutputCount <= 0 {
		mc.OutputCount = 1
	}
	if mc.QueueFor < 0 || mc.RunFor < 0 || mc.Price < 0 {
		panic(fmt.Sprintf("genacesim: model %q: negative duration or price", name))
	}
	return mc
}

func (s *Simulator) model(name string) ModelConfig {
	if mc, ok := s.cfg.Models[name]; ok {
		return mc
	}
	return s.cfg.DefaultModel
}

// ServeHTTP serves the API, the signed file URLs and the admin endpoint.
func (s *Simulator) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Start serves the simulator on addr, which must be a loopback address
// like "127.0.0.1:0". stop releases held long polls, closes the listener
// and every open connection, and returns once no request is in flight.
func (s *Simulator) Start(addr string) (baseURL string, stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil, fmt.Errorf("genacesim: bad address: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", nil, errors.New("genacesim: refusing to listen on a non-loopback address")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("genacesim: listen: %w", err)
	}
	// stop waits for the requests in flight: a handler left running
	// would call OnChange and the logger after its caller's run ended.
	var (
		mu      sync.Mutex
		stopped bool
		active  sync.WaitGroup
	)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if stopped {
			mu.Unlock()
			http.Error(w, "genacesim: stopped", http.StatusServiceUnavailable)
			return
		}
		active.Add(1)
		mu.Unlock()
		defer active.Done()
		s.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			mu.Lock()
			stopped = true
			mu.Unlock()
			s.Close()
			_ = srv.Close()
			active.Wait()
		})
	}
	return "http://" + ln.Addr().String(), stop, nil
}

// Close releases every held long poll and delayed response (they answer
// at once), so an httptest.Server.Close that waits for handlers does not
// hang on a manual clock. The simulator keeps serving afterwards, without
// waiting.
func (s *Simulator) Close() {
	s.closeOnce.Do(func() { close(s.done) })
}

// JobTruth is the simulator's ground truth about one job, for asserting
// what the client could not see.
type JobTruth struct {
	ID                string
	OperationID       string
	Model             string
	State             string // at the current clock time
	Credits           Credits
	SubmissionFailure bool
	Reconciled        bool
	CreatedAt         time.Time
	Metadata          map[string]string
	// DuplicateOf names the job whose POST Genace's gateway ran a second
	// time to create this one (see Duplicate); "" for a job a client's
	// POST created.
	DuplicateOf string
	// Outputs describe the outputs the job has rendered (served once it
	// succeeds): what a copy must match.
	Outputs []OutputTruth
}

// OutputTruth is one output of a job as Genace serves it.
type OutputTruth struct {
	SizeBytes int64
	SHA256    string
}

// Jobs lists every job ever created, in creation order, with its state at
// the current clock time. It has no side effects (it does not advance
// submission-failure refunds).
func (s *Simulator) Jobs() []JobTruth {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	out := make([]JobTruth, 0, len(s.order))
	for _, j := range s.order {
		out = append(out, s.truth(j, now))
	}
	return out
}

// Job returns the ground truth for one job.
func (s *Simulator) Job(id string) (JobTruth, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return JobTruth{}, false
	}
	return s.truth(j, s.clk.Now()), true
}

func (s *Simulator) truth(j *job, now time.Time) JobTruth {
	v := j.view(now, s.cfg.RefundSettleAfter)
	md := make(map[string]string, len(j.metadata))
	maps.Copy(md, j.metadata)
	outs := make([]OutputTruth, len(j.outputs))
	for i, p := range j.outputs {
		outs[i] = OutputTruth{SizeBytes: int64(len(p)), SHA256: j.sums[i]}
	}
	return JobTruth{
		ID: j.id, OperationID: j.opID, Model: j.model, State: v.state, Credits: v.credits,
		SubmissionFailure: j.subFail, Reconciled: j.reconciled != nil, CreatedAt: j.created, Metadata: md,
		DuplicateOf: j.duplicateOf, Outputs: outs,
	}
}

// Duplicate is Genace's gateway running the POST that created jobID a
// second time (it retried the request towards a backend that had acted
// on it already): a second job for the same operation, model and
// metadata, created now and charged like the first, whose answer went
// nowhere. It returns the new job's id, or false for an unknown job.
func (s *Simulator) Duplicate(jobID string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[jobID]
	if !ok {
		return "", false
	}
	d := s.newJobLocked(j.opID, j.model, maps.Clone(j.metadata), false, "")
	d.duplicateOf = jobID
	return d.id, true
}

// JobsForOperation lists the ids of jobs created for an operation id, in
// creation order. More than one means the operation was charged twice.
func (s *Simulator) JobsForOperation(opID string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.byOp[opID]...)
}

// PostCount is how many POST /api/v1/jobs requests carried this
// metadata.operation_id ("" counts those without one), whatever their
// outcome, including unauthorized and malformed ones.
func (s *Simulator) PostCount(opID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.postCount[opID]
}

// TotalPosts counts every POST /api/v1/jobs request.
func (s *Simulator) TotalPosts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.totalPosts
}

// GetCount is how many GET /api/v1/jobs/{id} requests named jobID,
// including unknown ids and faulted requests. Note net/http may replay an
// idempotent GET on its own after a dropped connection; each replay
// counts.
func (s *Simulator) GetCount(jobID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.getCount[jobID]
}

// TotalGets counts every GET /api/v1/jobs/{id} request.
func (s *Simulator) TotalGets() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.totalGets
}

// FileGets counts every GET of a signed output URL, valid or not.
func (s *Simulator) FileGets() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fileGets
}

// Reconcile is the Go form of POST /admin/reconcile-jobs with fail=true:
// each known, non-terminal job becomes failed with error code
// "reconciled", charged=price, refund_state none, and never refunded. It
// returns the ids it changed and wakes long polls on them.
func (s *Simulator) Reconcile(jobIDs ...string) []string {
	s.mu.Lock()
	now := s.clk.Now()
	done := []string{}
	for _, id := range jobIDs {
		j, ok := s.jobs[id]
		if !ok || j.reconciled != nil {
			continue
		}
		switch j.view(now, s.cfg.RefundSettleAfter).state {
		case StateQueued, StateRunning:
			j.reconciled = tp(now)
			done = append(done, id)
		}
	}
	if len(done) > 0 {
		close(s.notify)
		s.notify = make(chan struct{})
	}
	onChange := s.onChange
	s.mu.Unlock()
	if onChange != nil && len(done) > 0 {
		onChange()
	}
	return done
}

// OnChange installs (or, with nil, removes) f, called after a POST
// creates a job and before it is answered, and after a reconciliation,
// without the simulator's lock held: a local run saves the simulator
// there, so that what Genace created outlives the run's process (a job
// whose POST was answered is on disk, as a real Genace would keep it).
func (s *Simulator) OnChange(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onChange = f
}

// idAlphabet is Crockford-style base32: unambiguous, URL-safe.
const idAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"

// newJobLocked creates and stores a job at now. s.mu must be held.
func (s *Simulator) newJobLocked(opID, model string, metadata map[string]string, subFail bool, id string) *job {
	if _, dup := s.jobs[id]; dup {
		id = "" // a scripted id already taken: Genace would never reuse one
	}
	for id == "" {
		b := make([]byte, 0, 24)
		b = append(b, "job_"...)
		for i := 0; i < 20; i++ {
			b = append(b, idAlphabet[s.rng.IntN(len(idAlphabet))])
		}
		id = string(b)
		if _, dup := s.jobs[id]; dup {
			id = ""
		}
	}
	j := &job{id: id, opID: opID, model: model, mc: s.model(model), metadata: metadata, created: s.clk.Now(), subFail: subFail}
	s.addLocked(j)
	return j
}

// addLocked renders j's outputs (from the seed and its id) and stores it.
// s.mu must be held.
func (s *Simulator) addLocked(j *job) {
	if !j.subFail {
		for i := range j.mc.OutputCount {
			p := renderPNG(s.cfg.Seed, j.id, i)
			j.outputs = append(j.outputs, p)
			j.sums = append(j.sums, sha256Hex(p))
		}
	}
	s.jobs[j.id] = j
	s.order = append(s.order, j)
	s.byOp[j.opID] = append(s.byOp[j.opID], j.id)
}

// rateLimited applies RateLimitPerSecond with a fixed window per clock
// second. It returns the Retry-After to send, or 0.
func (s *Simulator) rateLimited() time.Duration {
	if s.cfg.RateLimitPerSecond <= 0 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	sec := now.Unix()
	if sec != s.rlSecond {
		s.rlSecond, s.rlCount = sec, 0
	}
	s.rlCount++
	if s.rlCount <= s.cfg.RateLimitPerSecond {
		return 0
	}
	return time.Unix(sec+1, 0).Sub(now)
}

// authorized checks the bearer token in constant time.
func (s *Simulator) authorized(r *http.Request) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	got := r.Header.Get("Authorization")
	want := "Bearer " + s.cfg.APIKey
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
