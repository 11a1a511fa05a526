package faultsim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/followup"
	"github.com/genjobs/genjobs/internal/genacesim"
	"github.com/genjobs/genjobs/internal/operation"
)

// State is what the write check needs of a record: small, so the run can
// remember the last one of every operation.
type State struct {
	Revision    int64
	Phase       operation.Phase
	Settlement  operation.Settlement
	RemoteJobID string
}

// StateOf extracts a record's State.
func StateOf(r operation.Record) State {
	return State{Revision: r.Revision, Phase: r.Phase, Settlement: r.Settlement, RemoteJobID: r.RemoteJobID}
}

// Terminal is operation.Record.Terminal for the state.
func (s State) Terminal() bool {
	r := operation.Record{Phase: s.Phase, Settlement: s.Settlement}
	return r.Terminal()
}

// CheckWrite checks one successful write (invariant c): the writer
// expected the revision the store held, the revision moved by one, the
// record left was not terminal, the phase moved along a legal edge (or
// stayed), and a known job id stayed. old is the record before the write
// (nil for a create, whose expected is 0). It returns the problems.
func CheckWrite(expected int64, old *State, next State) []string {
	var out []string
	if old == nil {
		if next.Revision != 1 {
			out = append(out, fmt.Sprintf("created at revision %d, not 1", next.Revision))
		}
		return out
	}
	if expected != old.Revision {
		out = append(out, fmt.Sprintf("stale overwrite: the writer expected r%d but the store held r%d (%s), now r%d %s",
			expected, old.Revision, old.Phase, next.Revision, next.Phase))
	}
	if next.Revision != old.Revision+1 {
		out = append(out, fmt.Sprintf("revision moved from r%d to r%d, not by one", old.Revision, next.Revision))
	}
	if old.Terminal() {
		out = append(out, fmt.Sprintf("terminal record (r%d %s %s) written again as r%d %s", old.Revision, old.Phase, old.Settlement, next.Revision, next.Phase))
	} else if old.Phase != next.Phase && !operation.CanTransition(old.Phase, next.Phase) {
		out = append(out, fmt.Sprintf("illegal transition %s → %s (r%d → r%d)", old.Phase, next.Phase, old.Revision, next.Revision))
	}
	if old.RemoteJobID != "" && next.RemoteJobID != old.RemoteJobID {
		out = append(out, fmt.Sprintf("job id %s replaced by %q at r%d", old.RemoteJobID, next.RemoteJobID, next.Revision))
	}
	return out
}

// Output is Genace's truth about one output of a job.
type Output struct {
	ContentType string
	SizeBytes   int64
	SHA256      string
}

// Final is everything the end-of-run checks know about one operation: its
// record and reviews, Genace's ground truth, what the client was handed,
// and what the artifact store holds.
type Final struct {
	Record operation.Record
	// Audit counts operator decisions on the operation (audit entries):
	// an operator may decide on a second POST, automation never.
	Audit int
	// ReviewJobIDs are the job ids carried by the operation's reviews, and
	// Reviews how many it has.
	ReviewJobIDs []string
	Reviews      int
	// Jobs are the jobs Genace created for the operation.
	Jobs []genacesim.JobTruth
	// Posts counts POSTs that reached Genace for the operation;
	// RateLimited those answered 429 (nothing created, may be retried).
	Posts, RateLimited int
	// Returned are the job ids Genace's answers handed to a live handler
	// (a 202 body or a 5xx error.job_id).
	Returned []string
	// Outputs are Genace's outputs of the record's job, read when the
	// record is delivered (nil otherwise).
	Outputs []Output
	// Stored maps the key of each of the record's deliveries to the
	// sha256 the artifact store holds under it ("" when nothing).
	Stored map[string]string
	// Created counts, per key, the Puts that stored a new object.
	Created map[string]int
}

// CheckFinal checks one operation at the end of a run: invariants a, b and
// d–f (c is checked on every write).
func CheckFinal(f Final) []Violation {
	rec := &f.Record
	id := rec.OperationID
	var out []Violation
	add := func(inv Invariant, format string, args ...any) {
		out = append(out, Violation{Invariant: inv, OperationID: id, Detail: fmt.Sprintf(format, args...)})
	}
	review := followup.NeedsReview(rec)

	// (a) At most one POST per operation: one job created at most, and no
	// POST after the first except after a 429. An operator's decision
	// (an audit entry) may allow more.
	if f.Audit == 0 {
		if len(f.Jobs) > 1 {
			ids := make([]string, len(f.Jobs))
			for i, j := range f.Jobs {
				ids[i] = j.ID
			}
			add(InvPosts, "%d jobs created on Genace for one operation (%s): charged %d times", len(f.Jobs), strings.Join(ids, ", "), len(f.Jobs))
		}
		if f.Posts > 1+f.RateLimited {
			add(InvPosts, "%d POSTs reached Genace but only %d of them were answered 429: at most %d were allowed", f.Posts, f.RateLimited, 1+f.RateLimited)
		}
	}

	// (b) Every job id handed back is kept; a job whose id never came back
	// leaves the operation for review (reconciliation finds it).
	for _, j := range f.Returned {
		if rec.RemoteJobID != j && !slices.Contains(f.ReviewJobIDs, j) {
			add(InvJobID, "Genace returned job %s but the record holds %q and no review carries it", j, rec.RemoteJobID)
		}
	}
	for _, j := range f.Jobs {
		if rec.RemoteJobID == j.ID || slices.Contains(f.Returned, j.ID) || slices.Contains(f.ReviewJobIDs, j.ID) {
			continue
		}
		if !review {
			add(InvJobID, "job %s (%s) exists on Genace, its id never came back, yet the operation is %s without review", j.ID, j.State, rec.Phase)
		}
	}

	// (d) Terminal or waiting for review: nothing lost, nothing stuck.
	if !rec.Terminal() && !review {
		next := "no next action"
		if rec.Schedule != nil {
			next = fmt.Sprintf("next %s due %s", rec.Schedule.Action, rec.Schedule.Due.Format("15:04:05"))
		}
		add(InvSettled, "stuck in %s at r%d (%s, %d reviews, last error %q)", rec.Phase, rec.Revision, next, f.Reviews, rec.LastError)
	}

	var job *genacesim.JobTruth
	for i := range f.Jobs {
		if f.Jobs[i].ID == rec.RemoteJobID {
			job = &f.Jobs[i]
		}
	}

	// (e) Delivered: every output stored, with Genace's checksum, once; a
	// succeeded render never ends otherwise terminal.
	if rec.Phase == operation.Delivered {
		switch {
		case job == nil:
			add(InvDelivery, "delivered, but Genace has no job %q for the operation", rec.RemoteJobID)
		case job.State != genacesim.StateSucceeded:
			add(InvDelivery, "delivered, but job %s is %s on Genace", job.ID, job.State)
		default:
			if len(rec.Deliveries) != len(f.Outputs) {
				add(InvDelivery, "%d deliveries recorded for %d outputs of job %s", len(rec.Deliveries), len(f.Outputs), job.ID)
			}
			for i, o := range f.Outputs {
				d, ok := rec.Delivered(i)
				if !ok {
					add(InvDelivery, "output %d of job %s is not recorded as delivered", i, job.ID)
					continue
				}
				if want := artifact.Key(id, job.ID, i, o.ContentType); d.Key != want {
					add(InvDelivery, "output %d stored under %s, not its deterministic key %s", i, d.Key, want)
				}
				if d.SHA256 != o.SHA256 || d.SizeBytes != o.SizeBytes {
					add(InvDelivery, "output %d recorded with sha256 %s (%d bytes); Genace's is %s (%d bytes)", i, d.SHA256, d.SizeBytes, o.SHA256, o.SizeBytes)
				}
				switch got := f.Stored[d.Key]; got {
				case o.SHA256:
				case "":
					add(InvDelivery, "output %d: nothing stored under %s", i, d.Key)
				default:
					add(InvDelivery, "output %d: %s holds sha256 %s, Genace's is %s", i, d.Key, got, o.SHA256)
				}
			}
		}
	}
	for key, n := range f.Created {
		if n > 1 {
			add(InvDelivery, "%s stored %d times", key, n)
		}
	}
	if job != nil && rec.Terminal() {
		switch {
		case job.State == genacesim.StateSucceeded && rec.Phase != operation.Delivered && rec.Phase != operation.Superseded:
			add(InvDelivery, "job %s succeeded but the operation ended %s", job.ID, rec.Phase)
		case (job.State == genacesim.StateFailed || job.State == genacesim.StateCanceled) && rec.Phase != operation.Failed && rec.Phase != operation.Superseded:
			add(InvRefund, "job %s %s but the operation ended %s", job.ID, job.State, rec.Phase)
		}
	}

	// (f) A failed operation is settled only on Genace's word.
	if rec.Phase == operation.Failed && rec.Settlement == operation.SettlementSettled {
		switch {
		case job == nil:
			add(InvRefund, "failed and settled, but Genace has no job %q for it", rec.RemoteJobID)
		case job.Credits.RefundState != genacesim.RefundSettled && job.Credits.Charged != 0:
			add(InvRefund, "settled, but Genace shows job %s refund_state %s with %d charged, %d refunded", job.ID, job.Credits.RefundState, job.Credits.Charged, job.Credits.Refunded)
		}
	}
	return out
}
