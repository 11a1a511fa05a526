// Package invoke runs one genjobs function the way `sam local invoke
// FUNCTION -e EVENT` does: its bootstrap under the Lambda Runtime
// Interface Emulator (internal/dev/emulator), invoked once with a sample
// event, against the template's resources on this machine (Stack) with
// the environment read back from SAM's --env-vars file. It seeds the
// operations the event names (Samples) and reports the answer, the log
// and what changed. It backs `make invoke` and `make sam-env`
// (PrepareSAMLocal), and internal/dev/lambdatest's stacks.
package invoke

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/dev/emulator"
	"github.com/genjobs/genjobs/internal/dev/samlocal"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

// Spec is how the template deploys one function.
type Spec struct {
	Name      string    // the folder under functions/ (samlocal.Function.Dir)
	LogicalID string    // the template's resource, as `sam local invoke` names it
	Kind      EventKind // the event source that invokes it
	Consumes  []string  // the kinds of the queues its SQS events read
	// Timeout and MemoryMB are the template's (Globals merged).
	Timeout  time.Duration
	MemoryMB int
}

// Functions are the template's functions, in its order.
func Functions(t *samlocal.Template) []Spec {
	out := make([]Spec, 0, len(t.Functions))
	for _, f := range t.Functions {
		s := Spec{Name: f.Dir(), LogicalID: f.LogicalID, Kind: KindOther, Timeout: f.Timeout, MemoryMB: f.MemoryMB}
		for _, e := range f.Events {
			switch e.Type {
			case "SQS":
				s.Kind = KindSQS
				if arn, ok := e.Properties["Queue"].(map[string]any)["Fn::GetAtt"].([]any); ok && len(arn) == 2 {
					id, _ := arn[0].(string)
					s.Consumes = append(s.Consumes, samlocal.Slug(id, "AWS::SQS::Queue"))
				}
			case "Schedule", "ScheduleV2":
				s.Kind = KindScheduled
			}
		}
		out = append(out, s)
	}
	return out
}

// FunctionNames lists the template's functions' names.
func FunctionNames(t *samlocal.Template) []string {
	var names []string
	for _, f := range t.Functions {
		names = append(names, f.Dir())
	}
	return names
}

// Lookup returns the template's function called name.
func Lookup(t *samlocal.Template, name string) (Spec, bool) {
	for _, f := range Functions(t) {
		if f.Name == name {
			return f, true
		}
	}
	return Spec{}, false
}

// Options are one invocation's inputs.
type Options struct {
	Root      string             // the module root (modroot.Find)
	Template  *samlocal.Template // the module's template (LoadTemplate)
	Function  string             // a name from FunctionNames
	EventPath string             // the event file
	Endpoints Endpoints          // the local services
	Progress  io.Writer          // one line per step; nil discards them
	// Timeout, if set, replaces the template's: observe, holding nothing,
	// ends after one empty 20 s receive of its feed unless its deadline
	// is within the feed's margin (2 min).
	Timeout time.Duration
}

// Session is one prepared invocation.
type Session struct {
	spec    Spec
	opts    Options
	event   *Event
	payload []byte
	stack   *Stack
	emu     *emulator.Emulator
	watch   []string
	seeded  map[string]operation.Record
	notes   []string
	dir     string // holds files; removed on Close
	files   SAMFiles
}

// Prepare checks the function and the event, stands up the stack, seeds
// the operations the event names, builds the bootstrap and starts it
// under the emulator. Close undoes it, also after an error.
func Prepare(ctx context.Context, opts Options) (*Session, error) {
	spec, ok := Lookup(opts.Template, opts.Function)
	if !ok {
		return nil, fmt.Errorf("unknown function %q: want one of %s", opts.Function, strings.Join(FunctionNames(opts.Template), ", "))
	}
	spec.Timeout = cmp.Or(opts.Timeout, spec.Timeout)
	ev, err := ReadEvent(opts.EventPath)
	if err != nil {
		return nil, err
	}
	if err := CheckPairing(spec, ev); err != nil {
		return nil, err
	}
	if err := opts.Endpoints.Check(); err != nil {
		return nil, err
	}
	if _, err := emulator.Installed(opts.Root); err != nil {
		return nil, err
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	s := &Session{spec: spec, opts: opts, event: ev}
	for _, w := range ev.Warnings {
		s.progress("warning: %s: %s", ev.Path, w)
	}
	for _, w := range queueWarnings(spec, ev) {
		s.progress("warning: %s: %s", ev.Path, w)
	}

	// The build runs while the stack comes up.
	type built struct {
		path string
		err  error
	}
	buildDone := make(chan built, 1)
	go func() {
		p, err := emulator.Build(ctx, opts.Root, spec.Name)
		buildDone <- built{p, err}
	}()
	fail := func(err error) (*Session, error) {
		<-buildDone
		s.Close()
		return nil, err
	}

	if s.stack, err = NewStack(ctx, StackConfig{Template: opts.Template, Endpoints: opts.Endpoints}); err != nil {
		return fail(err)
	}
	s.progress("table %s in DynamoDB Local at %s; queues %s-*, buckets %s and the Genace key's secret in moto at %s",
		s.stack.Table, opts.Endpoints.DynamoDB, s.stack.Prefix, strings.Join(s.stack.Buckets, ", "), opts.Endpoints.SQS)
	s.progress("Genace simulator at %s", s.stack.SimURL)
	if s.dir, err = os.MkdirTemp("", s.stack.Prefix+"-"); err != nil {
		return fail(err)
	}
	if s.files, err = s.stack.WriteSAMFiles(s.dir); err != nil {
		return fail(err)
	}
	env, err := s.stack.Env(s.files, spec.LogicalID)
	if err != nil {
		return fail(err)
	}
	s.progress("environment of %s from %s: %s (sam local invoke --env-vars)", spec.LogicalID, samlocal.TemplateFile, s.files.EnvVars)

	ids := ev.OperationIDs()
	if spec.Name == "sweep" {
		ids = append(ids, SweepSamples...)
	}
	if s.seeded, err = Seed(ctx, s.stack, ids, time.Now().UTC()); err != nil {
		return fail(err)
	}
	for _, id := range ids {
		if rec, ok := s.seeded[id]; ok {
			s.progress("seeded %s: %s (%s)", id, stateOf(&rec), Samples[id].State)
		} else {
			s.progress("not seeded: %s is not a sample operation, so the function finds no record", id)
		}
		if !slices.Contains(s.watch, id) {
			s.watch = append(s.watch, id)
		}
	}
	if s.payload, s.notes, err = Rewrite(ev, s.seeded); err != nil {
		return fail(err)
	}
	for _, n := range s.notes {
		s.progress("event: %s", n)
	}

	b := <-buildDone
	if b.err != nil {
		s.Close()
		return nil, b.err
	}
	s.progress("built %s", relative(opts.Root, b.path))
	s.emu, err = emulator.Start(ctx, emulator.Config{
		Root: opts.Root, Function: spec.Name, Bootstrap: b.path, Env: env,
		Timeout: spec.Timeout, MemoryMB: spec.MemoryMB, Region: opts.Endpoints.Region,
	})
	if err != nil {
		s.Close()
		return nil, err
	}
	s.progress("emulator for %s at %s", spec.Name, s.emu.URL())
	return s, nil
}

// CheckPairing refuses an event no event source of the function could
// deliver: an SQS function needs an SQS batch, the sweep a scheduled
// event (any other JSON object passes, as with `sam local invoke`).
func CheckPairing(f Spec, ev *Event) error {
	switch {
	case f.Kind == KindSQS && ev.Kind != KindSQS:
		return fmt.Errorf("%s consumes SQS batches, but %s is not an SQS event (no Records)", f.Name, ev.Path)
	case f.Kind == KindScheduled && ev.Kind == KindSQS:
		return fmt.Errorf("%s runs on a schedule, but %s is an SQS event; use a scheduled event such as events/sweep.json", f.Name, ev.Path)
	}
	return nil
}

// queueWarnings notes records from a queue the function does not consume
// in the template (the function still runs them, as Lambda would).
func queueWarnings(f Spec, ev *Event) []string {
	var out []string
	for _, r := range ev.Records {
		if !slices.ContainsFunc(f.Consumes, func(kind string) bool { return ofKind(r.EventSourceARN, kind) }) {
			name := r.EventSourceARN[strings.LastIndexByte(r.EventSourceARN, ':')+1:]
			out = append(out, fmt.Sprintf("record %s comes from %s, which %s does not consume", r.MessageId, name, f.Name))
		}
	}
	return out
}

func (s *Session) progress(format string, args ...any) {
	fmt.Fprintf(s.opts.Progress, "invoke: "+format+"\n", args...)
}

// Close stops the emulator and removes the stack. It is safe to call more
// than once and on a half-prepared session.
func (s *Session) Close() {
	if s.emu != nil {
		s.emu.Stop()
	}
	if s.stack != nil {
		s.stack.Close()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// state is what Invoke compares before and after.
type state struct {
	ops       map[string]*OperationState
	reviews   map[string]review.Record
	posts     int
	gets      int
	fileGets  int
	artifacts []Object
}

func (s *Session) snapshot(ctx context.Context) (state, error) {
	st := state{ops: map[string]*OperationState{}, reviews: map[string]review.Record{}}
	for _, id := range s.watch {
		rec, err := s.stack.Store.Get(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			st.ops[id] = nil
		case err != nil:
			return st, err
		default:
			st.ops[id] = stateOf(&rec)
		}
	}
	open, err := s.stack.Store.OpenReviews(ctx)
	if err != nil {
		return st, err
	}
	for _, r := range open {
		st.reviews[r.ID] = r
	}
	st.posts, st.gets, st.fileGets = s.stack.Sim.TotalPosts(), s.stack.Sim.TotalGets(), s.stack.Sim.FileGets()
	st.artifacts, err = s.stack.Artifacts(ctx)
	return st, err
}

// Invoke sends the event once and reports what happened. err is set only
// when the report itself could not be made; a failed invocation is a
// Result whose Err is set.
func (s *Session) Invoke(ctx context.Context) (*Result, error) {
	before, err := s.snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the state before: %w", err)
	}
	ictx, cancel := context.WithTimeout(ctx, s.spec.Timeout+30*time.Second)
	defer cancel()
	// The records go through their queues first, for receipt handles the
	// function can renew; afterwards they leave the queues whatever the
	// answer, so the report shows only what the function sent.
	q := s.stack.Queue
	payload, received, err := PassThrough(ictx, q, s.payload, s.stack.QueueFor)
	drop := func() {
		for _, r := range received {
			_ = q.Delete(context.WithoutCancel(ctx), r.QueueURL, r.ReceiptHandle)
		}
	}
	if err != nil {
		drop()
		return nil, err
	}
	start := time.Now()
	status, body, err := s.emu.Invoke(ictx, payload)
	drop()
	if err != nil {
		return nil, err
	}
	res := &Result{
		Function: s.spec.Name, Event: s.event.Path, Status: status, DurationMS: time.Since(start).Milliseconds(),
		Log: lines(s.emu.Stdout()), EmulatorLog: lines(s.emu.Stderr()), Rewrites: s.notes,
		Operations: []OperationChange{}, ReviewsOpened: []ReviewSummary{}, ArtifactsStored: []Object{},
	}
	res.setBody(body)
	// Read with a context of its own: a cancelled invocation (Ctrl-C)
	// still gets its report.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer rcancel()
	after, err := s.snapshot(rctx)
	if err != nil {
		return res, fmt.Errorf("read the state after: %w", err)
	}
	for _, id := range s.watch {
		res.Operations = append(res.Operations, OperationChange{ID: id, Before: before.ops[id], After: after.ops[id]})
	}
	for _, id := range slices.Sorted(maps.Keys(after.reviews)) {
		if _, ok := before.reviews[id]; ok {
			continue
		}
		r := after.reviews[id]
		res.ReviewsOpened = append(res.ReviewsOpened, ReviewSummary{
			ID: r.ID, Source: string(r.Source), OperationID: r.OperationID, Queue: r.Queue,
			Category: r.ErrorCategory, Phase: string(r.Phase), Recommended: string(r.Recommended),
		})
	}
	res.Genace = GenaceCounts{Posts: after.posts - before.posts, Gets: after.gets - before.gets, FileGets: after.fileGets - before.fileGets}
	for _, o := range after.artifacts {
		if !slices.Contains(before.artifacts, o) {
			res.ArtifactsStored = append(res.ArtifactsStored, o)
		}
	}
	if res.Queues, err = s.stack.Peek(rctx); err != nil {
		return res, err
	}
	return res, nil
}

// WriteKeep tells how to reach what the session runs, for --keep.
func (s *Session) WriteKeep(w io.Writer) error {
	eventFile := filepath.Join(s.dir, "event.json")
	if err := os.WriteFile(eventFile, s.payload, 0o644); err != nil {
		return err
	}
	st, ep := s.stack, s.opts.Endpoints
	fmt.Fprintf(w, "\nKept running until Ctrl-C (then everything is removed):\n")
	fmt.Fprintf(w, "  invoke again   curl -s -XPOST %s%s -d @%s\n", s.emu.URL(), emulator.InvokePath, relative(s.opts.Root, eventFile))
	fmt.Fprintf(w, "  records        aws dynamodb scan --endpoint-url %s --region %s --table-name %s\n", ep.DynamoDB, ep.Region, st.Table)
	fmt.Fprintf(w, "                 go run ./cmd/genjobs reviews --table %s --dynamodb-endpoint %s\n", st.Table, ep.DynamoDB)
	for _, q := range st.Queues {
		fmt.Fprintf(w, "  %-14s aws sqs receive-message --endpoint-url %s --region %s --queue-url %s\n", q.Kind, ep.SQS, ep.Region, q.URL)
	}
	fmt.Fprintf(w, "  Genace         %s (simulator; API key %s)\n", st.SimURL, st.APIKey)
	for _, b := range st.Buckets {
		fmt.Fprintf(w, "  S3             aws s3 ls --endpoint-url %s s3://%s --recursive\n", ep.S3, b)
	}
	fmt.Fprintf(w, "  environment    %s (sam local invoke --env-vars), %s (--parameter-overrides)\n", s.files.EnvVars, s.files.ParameterOverrides)
	fmt.Fprintf(w, "  (aws needs AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s)\n", ep.AccessKey, ep.SecretKey)
	return nil
}

func relative(root, path string) string {
	if r, err := filepath.Rel(root, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

func lines(s string) []string {
	out := []string{}
	for _, l := range strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// OperationState is the part of a record the report shows.
type OperationState struct {
	Phase       operation.Phase       `json:"phase"`
	Revision    int64                 `json:"revision"`
	RemoteJobID string                `json:"remote_job_id,omitempty"`
	RemoteState operation.RemoteState `json:"remote_state,omitempty"`
	NextAction  string                `json:"next_action,omitempty"`
	Deliveries  int                   `json:"deliveries"`
	Parked      string                `json:"parked,omitempty"`
}

func stateOf(rec *operation.Record) *OperationState {
	s := &OperationState{Phase: rec.Phase, Revision: rec.Revision, RemoteJobID: rec.RemoteJobID, Deliveries: len(rec.Deliveries)}
	if rec.Remote != nil {
		s.RemoteState = rec.Remote.State
	}
	if rec.Schedule != nil {
		s.NextAction = rec.Schedule.Action
	}
	if rec.Parked != nil {
		s.Parked = rec.Parked.Reason
	}
	return s
}

// String is the state in a few words: "accepted r3 (job j, remote
// succeeded, next observe_generation)".
func (o *OperationState) String() string {
	if o == nil {
		return "absent"
	}
	var extra []string
	for _, e := range []struct {
		text string
		set  bool
	}{
		{"job " + o.RemoteJobID, o.RemoteJobID != ""}, {"remote " + string(o.RemoteState), o.RemoteState != ""},
		{strconv.Itoa(o.Deliveries) + " delivered", o.Deliveries > 0}, {"next " + o.NextAction, o.NextAction != ""},
		{"parked: " + o.Parked, o.Parked != ""},
	} {
		if e.set {
			extra = append(extra, e.text)
		}
	}
	s := fmt.Sprintf("%s r%d", o.Phase, o.Revision)
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, ", ") + ")"
	}
	return s
}

// OperationChange is one watched operation before and after (nil: no
// record).
type OperationChange struct {
	ID     string          `json:"operation_id"`
	Before *OperationState `json:"before"`
	After  *OperationState `json:"after"`
}

// Changed reports whether the invocation wrote the record.
func (c OperationChange) Changed() bool {
	if c.Before == nil || c.After == nil {
		return c.Before != c.After
	}
	return c.Before.Revision != c.After.Revision
}

// ReviewSummary is one review record the invocation opened.
type ReviewSummary struct {
	ID          string `json:"id"`
	Source      string `json:"source"`
	OperationID string `json:"operation_id,omitempty"`
	Queue       string `json:"queue,omitempty"`
	Category    string `json:"error_category,omitempty"`
	Phase       string `json:"phase,omitempty"`
	Recommended string `json:"recommended_action"`
}

// GenaceCounts are the simulator's request counts during the invocation.
type GenaceCounts struct {
	Posts    int `json:"posts"`
	Gets     int `json:"gets"`
	FileGets int `json:"file_gets"`
}

// FunctionError is Lambda's error object, what a handler's returned error
// or a panic becomes.
type FunctionError struct {
	Type    string `json:"errorType"`
	Message string `json:"errorMessage"`
}

// Result is one invocation's report.
type Result struct {
	Function string `json:"function"`
	Event    string `json:"event"`
	// Status is the emulator's HTTP status: 200, or 502 when the runtime
	// crashed or failed its init.
	Status int `json:"status"`
	// Response is the answer when it is JSON; ResponseText otherwise.
	Response     json.RawMessage `json:"response,omitempty"`
	ResponseText string          `json:"response_text,omitempty"`
	// Error is set when the function answered with Lambda's error object.
	Error      *FunctionError `json:"error,omitempty"`
	DurationMS int64          `json:"duration_ms"`
	// Rewrites are the placeholder replacements made in the event.
	Rewrites []string `json:"rewrites,omitempty"`
	// Log is the function's output as CloudWatch Logs would hold it;
	// EmulatorLog is the emulator's own.
	Log         []string `json:"log"`
	EmulatorLog []string `json:"emulator_log"`
	// Operations are the watched records before and after.
	Operations []OperationChange `json:"operations"`
	// Queues are every queue's contents afterwards.
	Queues          []QueueContents `json:"queues"`
	ReviewsOpened   []ReviewSummary `json:"reviews_opened"`
	Genace          GenaceCounts    `json:"genace"`
	ArtifactsStored []Object        `json:"artifacts_stored"`
}

func (r *Result) setBody(body []byte) {
	if json.Valid(body) && len(strings.TrimSpace(string(body))) > 0 {
		r.Response = json.RawMessage(body)
		var e FunctionError
		var probe map[string]json.RawMessage
		if json.Unmarshal(body, &probe) == nil && (probe["errorType"] != nil || probe["errorMessage"] != nil) {
			_ = json.Unmarshal(body, &e)
			r.Error = &e
		}
		return
	}
	r.ResponseText = string(body)
}

// Err is non-nil when the invocation failed: the runtime crashed or
// failed its init (not 200), the function returned an error, or the
// answer is not JSON (every genjobs handler answers JSON; the emulator
// answers a timeout in plain text).
func (r *Result) Err() error {
	switch {
	case r.Status != http.StatusOK:
		return fmt.Errorf("%s failed: the emulator answered HTTP %d (the runtime exited or failed its init; see the log)", r.Function, r.Status)
	case r.Error != nil:
		return fmt.Errorf("%s returned an error: %s: %s", r.Function, r.Error.Type, r.Error.Message)
	case len(r.Response) == 0:
		return fmt.Errorf("%s answered %q, not JSON (a timeout?)", r.Function, r.ResponseText)
	}
	return nil
}
