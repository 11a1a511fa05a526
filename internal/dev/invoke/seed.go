package invoke

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
)

// Sample is one operation the sample events in events/ may name. Before
// an invocation the operations its event names are stored as described
// here (and, for the sweep, SweepSamples), so each event finds the record
// it was written for.
type Sample struct {
	ID    string // the operation id the events use
	State string // what the seeded record is, for people
	// Placeholder is the job id the events carry for this operation
	// (empty when none): the simulator makes up its own job ids, so every
	// occurrence in a record's body is replaced by the real one, and
	// md5OfBody recomputed, before the invocation.
	Placeholder string
	// Revision is the revision seeding leaves, which the events'
	// expected_revision is written against.
	Revision int64

	seed func(ctx context.Context, st *Stack, s Sample, now time.Time) (operation.Record, error)
}

// Samples lists every operation seeding knows, by id.
var Samples = map[string]Sample{
	"op-sample-1": {ID: "op-sample-1", State: "prepared and authorized, never dispatched", Revision: 1, seed: seedPrepared},
	"op-sample-2": {ID: "op-sample-2", State: "accepted; its render has already succeeded on the simulator",
		Placeholder: "job_sample_observe", Revision: 3, seed: seedAccepted(0)},
	"op-sample-3": {ID: "op-sample-3", State: "succeeded; outputs waiting to be delivered",
		Placeholder: "job_sample_deliver", Revision: 5, seed: seedSucceeded},
	"op-sample-4": {ID: "op-sample-4", State: "accepted; next observation 10 minutes overdue (the sweep re-arms it)",
		Revision: 3, seed: seedAccepted(10 * time.Minute)},
	"op-sample-5": {ID: "op-sample-5", State: "submitting; claim taken 10 minutes ago (the sweep expires it)",
		Revision: 2, seed: seedStaleClaim},
	"op-sample-6": {ID: "op-sample-6", State: "accepted; next observation 3 minutes late (the sweep reads it, not yet overdue)",
		Revision: 3, seed: seedAccepted(3 * time.Minute)},
}

// SweepSamples are seeded for every sweep invocation: the scheduled event
// names no operation, the sweep finds them through the due index. With
// the template's thresholds (claims 120 s, overdue 300 s) a sweep reads
// all three, re-arms op-sample-4, expires op-sample-5's claim and skips
// op-sample-6.
var SweepSamples = []string{"op-sample-4", "op-sample-5", "op-sample-6"}

// How the simulator renders every sample job: at once (no queueing, no
// running time), so a job is succeeded whenever a function looks,
// whatever the machine's speed, with one output to deliver.
const (
	samplePrice   = 12
	sampleOutputs = 1
)

// seedOwner is the claim owner seeding writes.
const seedOwner = "genjobs-invoke"

// prepared is an authorized, prepared operation ready to dispatch (the
// shape internal/dev/handlertest.Prepared gives the tests).
func prepared(id string, now time.Time) operation.Record {
	return operation.Record{
		OperationID: id, SpecRevision: 1, Phase: operation.PhasePrepared, UserID: "user-1", Model: "flux-pro-2",
		Input:      json.RawMessage(`{"prompt":"a lighthouse at dusk","size":"1024x1024"}`),
		Authorized: true, AuthorizedSpecRevision: 1, BudgetCredits: 50, EstimatedCredits: samplePrice,
		Timestamps: operation.Timestamps{Created: now, Updated: now},
	}
}

func seedPrepared(ctx context.Context, st *Stack, s Sample, now time.Time) (operation.Record, error) {
	return st.Store.Create(ctx, prepared(s.ID, now))
}

// seedStaleClaim leaves a claim as a worker that died before its POST
// would: submitting, no job.
func seedStaleClaim(ctx context.Context, st *Stack, s Sample, now time.Time) (operation.Record, error) {
	return claimed(ctx, st, s.ID, now.Add(-10*time.Minute))
}

// claimed stores a prepared operation and takes its submission claim.
func claimed(ctx context.Context, st *Stack, id string, at time.Time) (operation.Record, error) {
	rec, err := st.Store.Create(ctx, prepared(id, at))
	if err != nil {
		return rec, err
	}
	next, err := operation.ClaimSubmission(rec, seedOwner, "seed", at)
	if err != nil {
		return rec, err
	}
	return st.Store.Update(ctx, next, rec.Revision)
}

// seedAccepted stores the operation as the submit function leaves it
// after a 202: claimed, a job created on the simulator for it, then
// accepted with the job's snapshot, and an observation due late ago.
func seedAccepted(late time.Duration) func(context.Context, *Stack, Sample, time.Time) (operation.Record, error) {
	return func(ctx context.Context, st *Stack, s Sample, now time.Time) (operation.Record, error) {
		return accepted(ctx, st, s.ID, now.Add(-late))
	}
}

func accepted(ctx context.Context, st *Stack, id string, at time.Time) (operation.Record, error) {
	rec, err := claimed(ctx, st, id, at)
	if err != nil {
		return rec, err
	}
	res := st.Genace.Submit(ctx, genace.SubmitRequest{OperationID: id, Model: rec.Model, Input: rec.Input}, 10*time.Second)
	if res.Outcome != genace.OutcomeAccepted {
		return rec, fmt.Errorf("the simulator refused %s's job: %v", id, res.Err)
	}
	snap := res.Job.Snapshot(at)
	next, err := operation.Accept(rec, res.JobID, &snap, at)
	if err != nil {
		return rec, err
	}
	next.Schedule = &operation.NextAction{Action: string(message.ActionObserveGeneration), Due: at}
	return st.Store.Update(ctx, next, rec.Revision)
}

// seedSucceeded stores the operation as the observe function leaves it
// on the usual path, where the first look finds the render still running
// and the next one finds it succeeded: the snapshot with the outputs'
// descriptors, and a delivery due now. The simulator's sample jobs finish
// at once, so the first snapshot is the real job's, rewound to running.
func seedSucceeded(ctx context.Context, st *Stack, s Sample, now time.Time) (operation.Record, error) {
	first := now.Add(-2 * time.Second)
	rec, err := accepted(ctx, st, s.ID, first.Add(-time.Second))
	if err != nil {
		return rec, err
	}
	job, err := st.Genace.Get(ctx, rec.RemoteJobID, 0, 10*time.Second)
	if err != nil {
		return rec, err
	}
	running := job.Snapshot(first)
	running.State, running.Progress, running.Outputs, running.FinishedAt = operation.RemoteRunning, 0.5, nil, nil
	running.Credits.Charged = 0
	next, follow, err := operation.Observe(rec, running, first, operation.DefaultBudgets)
	if err != nil {
		return rec, err
	}
	if follow != operation.FollowObserve {
		return rec, fmt.Errorf("observing %s running: %s, want another observation", s.ID, follow)
	}
	next.Schedule = &operation.NextAction{Action: string(message.ActionObserveGeneration), Due: first}
	if rec, err = st.Store.Update(ctx, next, rec.Revision); err != nil {
		return rec, err
	}
	snap := job.Snapshot(now)
	next, follow, err = operation.Observe(rec, snap, now, operation.DefaultBudgets)
	if err != nil {
		return rec, err
	}
	if follow != operation.FollowDeliver || len(snap.Outputs) == 0 {
		return rec, fmt.Errorf("the simulator's job %s is %s with %d outputs, not succeeded with outputs", rec.RemoteJobID, snap.State, len(snap.Outputs))
	}
	next.Schedule = &operation.NextAction{Action: string(message.ActionDeliverArtifacts), Due: now}
	return st.Store.Update(ctx, next, rec.Revision)
}

// Seed stores the samples named by ids (unknown ids are left absent, as
// an event naming an operation that does not exist needs) and returns the
// stored records by id. A sample whose revision is not what the events
// expect is an error: the events would then test something else.
func Seed(ctx context.Context, st *Stack, ids []string, now time.Time) (map[string]operation.Record, error) {
	out := map[string]operation.Record{}
	for _, id := range ids {
		s, ok := Samples[id]
		if !ok {
			continue
		}
		if _, done := out[id]; done {
			continue
		}
		rec, err := s.seed(ctx, st, s, now)
		if err != nil {
			return out, fmt.Errorf("seed %s: %w", id, err)
		}
		if rec.Revision != s.Revision {
			return out, fmt.Errorf("seed %s: stored at revision %d, the sample events expect %d", id, rec.Revision, s.Revision)
		}
		out[id] = rec
	}
	return out, nil
}

// Rewrite replaces the sample placeholders in the event's SQS record
// bodies by the seeded records' real job ids and recomputes each changed
// record's md5OfBody; everything else stays as in the file (an
// expected_revision included, so a stale one stays stale). It returns the
// payload to invoke with and one line per replacement.
func Rewrite(ev *Event, seeded map[string]operation.Record) ([]byte, []string, error) {
	if ev.Kind != KindSQS {
		return ev.Raw, nil, nil
	}
	repl := map[string]string{}
	for id, rec := range seeded {
		if s := Samples[id]; s.Placeholder != "" && rec.RemoteJobID != "" {
			repl[s.Placeholder] = rec.RemoteJobID
		}
	}
	if len(repl) == 0 {
		return ev.Raw, nil, nil
	}
	var doc map[string]any
	if err := json.Unmarshal(ev.Raw, &doc); err != nil {
		return nil, nil, err
	}
	records, _ := doc["Records"].([]any)
	var notes []string
	changed := false
	for _, r := range records {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		body, ok := m["body"].(string)
		if !ok {
			continue
		}
		placeholders := slices.Sorted(maps.Keys(repl))
		nb := body
		for _, p := range placeholders {
			quoted := `"` + p + `"`
			if strings.Contains(nb, quoted) {
				nb = strings.ReplaceAll(nb, quoted, `"`+repl[p]+`"`)
				notes = append(notes, fmt.Sprintf("record %v: job id %s -> %s", m["messageId"], p, repl[p]))
			}
		}
		if nb != body {
			m["body"], m["md5OfBody"] = nb, md5Hex(nb)
			changed = true
		}
	}
	if !changed {
		return ev.Raw, nil, nil
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	return out, notes, err
}
