package pipeline

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/genjobs/genjobs/internal/operation"
)

// Report is what a local run leaves: each operation's outcome and the
// totals, with the simulator's own counts when it ran against the
// simulator.
type Report struct {
	Elapsed  string `json:"elapsed"`
	TimedOut bool   `json:"timed_out"`
	// Interrupted: the run was stopped (Ctrl-C) before every operation
	// settled; Stopped: why it ended early on its own (Genace refused the
	// key, or stayed unreachable).
	Interrupted bool   `json:"interrupted,omitempty"`
	Stopped     string `json:"stopped,omitempty"`
	StateDir    string `json:"state_dir"`
	// Command is how hints name the genjobs binary, and Addressing what
	// they add to reach this run (neither in the JSON).
	Command    string     `json:"-"`
	Addressing Addressing `json:"-"`
	Operations []OpReport `json:"operations"`
	Totals     Totals     `json:"totals"`
}

// OpReport is one operation's outcome: the local phase and the remote
// state side by side, never merged.
type OpReport struct {
	OperationID string          `json:"operation_id"`
	Scenario    string          `json:"scenario,omitempty"`
	Model       string          `json:"model"`
	Phase       operation.Phase `json:"phase"`
	// NotCreated: the run was interrupted before it wrote this
	// operation's record (so nothing was sent for it); --resume creates it.
	NotCreated bool `json:"not_created,omitempty"`
	// Refused: the intake API refused the create (its status and error),
	// so nothing was written or sent, as an application would be told.
	Refused     string                `json:"refused,omitempty"`
	Revision    int64                 `json:"revision"`
	Terminal    bool                  `json:"terminal"`
	RemoteJobID string                `json:"remote_job_id,omitempty"`
	RemoteState operation.RemoteState `json:"remote_state,omitempty"`
	Settlement  operation.Settlement  `json:"settlement,omitempty"`
	Credits     *operation.Credits    `json:"credits,omitempty"`
	Posts       int                   `json:"posts"`
	// GenaceJobs is the simulator's ground truth: the jobs Genace really
	// created for the operation (what an operator would look up on
	// Genace's side to reconcile an uncertain one).
	GenaceJobs []string    `json:"genace_jobs,omitempty"`
	Artifacts  []Artifact  `json:"artifacts,omitempty"`
	Reviews    []ReviewRef `json:"open_reviews,omitempty"`
}

// Artifact is one delivered output.
type Artifact struct {
	// Path is the plain copy the run exported when it ended; the durable
	// copy is in the artifact store's pack (localpack.Dir).
	Path      string `json:"path"`
	SizeBytes int64  `json:"size_bytes"`
	SHA256    string `json:"sha256"`
	// ExportError says why no plain copy was written.
	ExportError string `json:"export_error,omitempty"`
}

// ReviewRef is an open review of an operation.
type ReviewRef struct {
	ID          string           `json:"id"`
	Recommended operation.Action `json:"recommended_action"`
	Category    string           `json:"category,omitempty"`
	Reason      string           `json:"reason"`
}

// Totals are the run's counts.
type Totals struct {
	Phases      map[operation.Phase]int `json:"phases"`
	NotCreated  int                     `json:"not_created,omitempty"`
	Refused     int                     `json:"refused,omitempty"`
	Posts       int                     `json:"posts"`
	Gets        int                     `json:"gets"`
	Downloads   int                     `json:"downloads"`
	GenaceJobs  int                     `json:"genace_jobs"`
	Invocations map[string]int64        `json:"invocations"`
	Records     map[string]int64        `json:"records"`
	Sweeps      int                     `json:"sweeps"`
	DLQDepth    int                     `json:"dlq_depth"`
}

// Addressing is the flags that address one local run, for the hints a
// run prints, each already quoted for a shell.
type Addressing struct {
	// Store is what an operator command (reviews, plan, replay, audit)
	// adds: --db with the run's own store file, or --table.
	Store string
	// Resume is what `local --resume` adds: the run's directory, and the
	// --table it was given.
	Resume string
}

func withFlags(cmd, flags string) string {
	if flags == "" {
		return cmd
	}
	return cmd + " " + flags
}

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteSummary prints the summary table.
func (r *Report) WriteSummary(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATION\tLOCAL PHASE\tREMOTE STATE\tSETTLEMENT\tPOSTS\tARTIFACTS\tOPEN REVIEW")
	for _, op := range r.Operations {
		rv := "-"
		if len(op.Reviews) > 0 {
			rv = string(op.Reviews[0].Recommended)
			if c := op.Reviews[0].Category; c != "" {
				rv += " (" + c + ")"
			}
		}
		phase := string(op.Phase)
		switch {
		case op.Refused != "":
			phase, rv = "refused", op.Refused
		case op.NotCreated:
			phase = "not created"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", op.OperationID, phase, cmp.Or(string(op.RemoteState), "-"), cmp.Or(string(op.Settlement), "-"), op.Posts, len(op.Artifacts), rv)
	}
	_ = tw.Flush()
	var phases []string
	for p, n := range r.Totals.Phases {
		phases = append(phases, fmt.Sprintf("%s %d", p, n))
	}
	slices.Sort(phases)
	if r.Totals.Refused > 0 {
		phases = append(phases, fmt.Sprintf("refused %d", r.Totals.Refused))
	}
	if r.Totals.NotCreated > 0 {
		phases = append(phases, fmt.Sprintf("not created %d", r.Totals.NotCreated))
	}
	fmt.Fprintf(w, "\n%d operations in %s: %s\n", len(r.Operations), r.Elapsed, strings.Join(phases, ", "))
	fmt.Fprintf(w, "Genace: %d POSTs, %d jobs, %d GETs, %d downloads; invocations: submit %d, observe %d, deliver %d, triage %d; DLQ %d\n",
		r.Totals.Posts, r.Totals.GenaceJobs, r.Totals.Gets, r.Totals.Downloads, r.Totals.Invocations["submit"], r.Totals.Invocations["observe"],
		r.Totals.Invocations["deliver"], r.Totals.Invocations["triage"], r.Totals.DLQDepth)
	for _, op := range r.Operations {
		if op.Phase == operation.PhaseUncertain && len(op.GenaceJobs) > 0 {
			// The run keeps its simulator's jobs: replay looks the job up
			// there, and a resumed run carries out what replay schedules.
			cmd := cmp.Or(r.Command, "genjobs")
			fmt.Fprintf(w, "%s is uncertain; the simulator shows Genace created %s for it. Reconcile it, then carry out the observation:\n  %s\n  %s\n",
				op.OperationID, strings.Join(op.GenaceJobs, ", "),
				withFlags(fmt.Sprintf("%s replay %s --action reconcile --operator NAME --job-id %s", cmd, op.OperationID, op.GenaceJobs[0]), r.Addressing.Store),
				withFlags(cmd+" local --resume", r.Addressing.Resume))
		}
	}
	switch {
	case r.Interrupted:
		fmt.Fprintf(w, "interrupted before every operation was terminal or waiting for review; the state is kept. Carry it on with:\n  %s\n",
			withFlags(cmp.Or(r.Command, "genjobs")+" local --resume", r.Addressing.Resume))
	case r.Stopped != "":
		fmt.Fprintf(w, "stopped early: %s\n", r.Stopped)
	case r.TimedOut:
		fmt.Fprintln(w, "TIMED OUT before every operation was terminal or waiting for review")
	}
}
