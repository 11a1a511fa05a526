package console

import (
	"fmt"
	"slices"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
)

// Lanes of the timeline, left to right.
const (
	laneState = iota
	laneFollowUp
	laneReview
	laneAudit
)

var laneNames = [...]string{"state", "follow-up", "review", "audit"}

// Geometry of the drawing, in SVG user units.
const (
	laneGap   = 70
	laneLeft  = 40
	rowHeight = 28
	rowTop    = 44
	textLeft  = laneLeft + len(laneNames)*laneGap
)

type event struct {
	At   time.Time
	Lane int
	Text string
	// Due marks a follow-up not yet due.
	Due bool
}

type eventView struct {
	event
	X, Y, TextX int
	Class       string
}

type laneView struct {
	Name string
	X    int
}

// timeline is the drawing of an operation's history: one row per event,
// oldest first, each in the lane of its kind.
type timeline struct {
	Lanes         []laneView
	Events        []eventView
	Width, Height int
	Bottom        int
}

// history lists what the store holds about when things happened to the
// operation: the record's own times (it keeps no log of past revisions,
// so each kind of change appears at the time the record last noted it),
// its reviews and its audit trail.
func history(rec *operation.Record, reviews []review.Record, audit []review.AuditEntry, now time.Time) []event {
	var ev []event
	add := func(at time.Time, lane int, format string, args ...any) {
		if !at.IsZero() {
			ev = append(ev, event{At: at, Lane: lane, Text: fmt.Sprintf(format, args...)})
		}
	}
	t := rec.Timestamps
	add(t.Created, laneState, "created: model %s, estimate %d credits", rec.Model, rec.EstimatedCredits)
	if c := rec.Claim; c != nil {
		add(c.At, laneState, "submission claimed by %s", c.Owner)
	}
	if r := rec.Remote; r != nil {
		add(r.CreatedAt, laneState, "Genace job created")
		if r.StartedAt != nil {
			add(*r.StartedAt, laneState, "Genace job started")
		}
		if r.FinishedAt != nil {
			add(*r.FinishedAt, laneState, "Genace job finished: %s", r.State)
		}
		add(r.ObservedAt, laneFollowUp, "observed: remote %s, progress %.0f%% (%d observations)", r.State, r.Progress*100, rec.Counters.Observations)
	}
	if t.Accepted != nil {
		add(*t.Accepted, laneState, "accepted: job %s", rec.RemoteJobID)
	}
	if t.RemoteFailed != nil {
		add(*t.RemoteFailed, laneState, "remote failure recorded")
	}
	for _, d := range rec.Deliveries {
		add(d.StoredAt, laneFollowUp, "output %d stored (%d bytes)", d.Index, d.SizeBytes)
	}
	if p := rec.Parked; p != nil {
		add(p.At, laneState, "parked for an operator: %s", p.Reason)
	}
	add(t.Updated, laneState, "revision %d written: phase %s", rec.Revision, rec.Phase)
	if s := rec.Schedule; s != nil {
		add(s.Due, laneFollowUp, "follow-up %s due", s.Action)
		if s.Due.After(now) {
			ev[len(ev)-1].Due = true
		}
	}
	for _, r := range reviews {
		add(r.CreatedAt, laneReview, "review %s opened (%s): recommends %s", r.ID, r.Source, r.Recommended)
		switch {
		case r.Open:
		case r.ClosedReason != "":
			add(r.ClosedAt, laneReview, "review %s closed by %s: %s", r.ID, r.ClosedBy, r.ClosedReason)
		default:
			add(r.ClosedAt, laneReview, "review %s closed by %s", r.ID, r.ClosedBy)
		}
	}
	for _, a := range audit {
		text := fmt.Sprintf("%s: %s %s, %s r%d → %s r%d", a.Operator, a.Action, a.Decision, a.FromPhase, a.FromRevision, a.ToPhase, a.Revision)
		if a.RemoteJobID != "" {
			text += fmt.Sprintf(", job %s (%s)", a.RemoteJobID, a.Verification)
		}
		add(a.At, laneAudit, "%s", text)
	}
	slices.SortStableFunc(ev, func(a, b event) int { return a.At.Compare(b.At) })
	return ev
}

func drawTimeline(rec *operation.Record, reviews []review.Record, audit []review.AuditEntry, now time.Time) timeline {
	ev := history(rec, reviews, audit, now)
	tl := timeline{Width: 1150, Height: rowTop + len(ev)*rowHeight + 8}
	tl.Bottom = tl.Height - 8
	for i, n := range laneNames {
		tl.Lanes = append(tl.Lanes, laneView{Name: n, X: laneLeft + i*laneGap})
	}
	for i, e := range ev {
		v := eventView{event: e, X: laneLeft + e.Lane*laneGap, Y: rowTop + i*rowHeight + rowHeight/2, TextX: textLeft, Class: laneNames[e.Lane]}
		if e.Due {
			v.Class += " due"
		}
		tl.Events = append(tl.Events, v)
	}
	return tl
}
