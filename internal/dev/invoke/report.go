package invoke

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// WriteText prints the report for people: the answer (pretty JSON), the
// function's log lines, then what changed.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "── response: %s, HTTP %d, %d ms ──\n", r.Function, r.Status, r.DurationMS)
	switch {
	case len(r.Response) > 0:
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, r.Response, "", "  "); err != nil {
			pretty.Reset()
			pretty.Write(r.Response)
		}
		b.WriteString(pretty.String())
		b.WriteString("\n")
	case r.ResponseText != "":
		b.WriteString(r.ResponseText + "\n")
	default:
		b.WriteString("(empty)\n")
	}

	section(&b, len(r.Log), "── function log ──", "── function log ──\n(nothing)")
	for _, l := range r.Log {
		b.WriteString(l + "\n")
	}
	if r.Err() != nil && len(r.EmulatorLog) > 0 {
		b.WriteString("── emulator log ──\n")
		for _, l := range r.EmulatorLog {
			b.WriteString(l + "\n")
		}
	}

	b.WriteString("── what changed ──\n")
	width := 0
	for _, o := range r.Operations {
		width = max(width, len(o.ID))
	}
	section(&b, len(r.Operations), "operations:", "operations: none watched (the event names no operation)")
	for _, o := range r.Operations {
		if o.Changed() {
			fmt.Fprintf(&b, "  %-*s  %s  →  %s\n", width, o.ID, o.Before, o.After)
		} else {
			fmt.Fprintf(&b, "  %-*s  unchanged: %s\n", width, o.ID, o.After)
		}
	}
	b.WriteString("queues:\n")
	kw := 0
	for _, q := range r.Queues {
		kw = max(kw, len(q.Kind))
	}
	for _, q := range r.Queues {
		fmt.Fprintf(&b, "  %-*s  %d message(s)", kw, q.Kind, q.Count)
		if hidden := q.Count - len(q.Messages); hidden > 0 {
			fmt.Fprintf(&b, " (%d delayed or in flight)", hidden)
		}
		b.WriteString("\n")
		for _, m := range q.Messages {
			if e := m.Envelope; e != nil {
				fmt.Fprintf(&b, "  %-*s    %s %s expected_revision=%d", kw, "", e.Action, e.OperationID, e.ExpectedRevision)
				if e.ExpectedRemoteJobID != "" {
					fmt.Fprintf(&b, " job=%s", e.ExpectedRemoteJobID)
				}
				fmt.Fprintf(&b, " attempt=%d\n", e.Attempt)
			} else {
				fmt.Fprintf(&b, "  %-*s    %s\n", kw, "", m.Body)
			}
		}
	}
	fmt.Fprintf(&b, "genace simulator: %d POST, %d GET, %d output download(s)\n", r.Genace.Posts, r.Genace.Gets, r.Genace.FileGets)
	section(&b, len(r.ReviewsOpened), "reviews opened:", "reviews opened: none")
	for _, rv := range r.ReviewsOpened {
		fmt.Fprintf(&b, "  %s  source=%s", rv.ID, rv.Source)
		for _, kv := range [][2]string{{"operation", rv.OperationID}, {"queue", rv.Queue}, {"category", rv.Category}, {"phase", rv.Phase}, {"recommended", rv.Recommended}} {
			if kv[1] != "" {
				fmt.Fprintf(&b, " %s=%s", kv[0], kv[1])
			}
		}
		b.WriteString("\n")
	}
	section(&b, len(r.ArtifactsStored), "artifacts stored (S3):", "artifacts stored: none")
	for _, o := range r.ArtifactsStored {
		fmt.Fprintf(&b, "  %s (%d bytes)\n", o.Key, o.Size)
	}
	if err := r.Err(); err != nil {
		fmt.Fprintf(&b, "FAILED: %v\n", err)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// section writes a section's heading, or none when it has no items.
func section(b *strings.Builder, items int, heading, none string) {
	if items == 0 {
		heading = none
	}
	b.WriteString(heading + "\n")
}
