package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"log"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/replay"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"dash":   func(s string) string { return cmp.Or(s, "-") },
	"mul100": func(f float64) float64 { return f * 100 },
	"size": func(n int64) string {
		switch {
		case n >= 1<<20:
			return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
		case n >= 1<<10:
			return fmt.Sprintf("%.1f KiB (%d bytes)", float64(n)/(1<<10), n)
		}
		return fmt.Sprintf("%d bytes", n)
	},
}

// rowsPerGroup bounds the rows drawn per group: the counts are of every
// review, the rows the newest; a filter narrows them.
const rowsPerGroup = 50

type reviewRow struct {
	review.Record
	Model string
	Age   string
}

type reviewGroup struct {
	Action operation.Action
	Class  string
	Count  int
	Rows   []reviewRow
	More   int
}

type reviewFilter struct {
	Operation, Model, Newer, Older string
}

type reviewsPage struct {
	Filter       reviewFilter
	Total, Match int
	Groups       []reviewGroup
	Now          time.Time
	Err          string
}

// parseAge reads "90m", "36h" or "7d".
func parseAge(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("age %q: want e.g. 90m, 36h or 7d", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("age %q: want e.g. 90m, 36h or 7d", s)
	}
	return d, nil
}

// age says how long ago something happened, as the page shows it ("just
// now", "5m ago").
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

func (s *Server) reviews(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	p := reviewsPage{Now: s.cfg.Clock.Now(),
		Filter: reviewFilter{Operation: strings.TrimSpace(q.Get("op")), Model: strings.TrimSpace(q.Get("model")),
			Newer: strings.TrimSpace(q.Get("newer")), Older: strings.TrimSpace(q.Get("older"))}}
	newer, err1 := parseAge(p.Filter.Newer)
	older, err2 := parseAge(p.Filter.Older)
	if err := errors.Join(err1, err2); err != nil {
		p.Err = err.Error()
		s.render(w, http.StatusBadRequest, "reviews.html", p)
		return
	}
	all, err := s.cfg.Store.OpenReviews(ctx)
	if err != nil {
		s.fail(w, err)
		return
	}
	p.Total = len(all)
	// Models live on the records: read only those a filter or a drawn row needs.
	models := map[string]string{}
	model := func(id string) string {
		if m, ok := models[id]; ok || id == "" {
			return m
		}
		rec, err := s.cfg.Store.Get(ctx, id)
		if err == nil {
			models[id] = rec.Model
		} else {
			models[id] = ""
		}
		return models[id]
	}
	var match []review.Record
	for _, rv := range all {
		a := p.Now.Sub(rv.CreatedAt)
		switch {
		case p.Filter.Operation != "" && !strings.Contains(rv.OperationID, p.Filter.Operation),
			newer > 0 && a > newer,
			older > 0 && a < older,
			p.Filter.Model != "" && model(rv.OperationID) != p.Filter.Model:
			continue
		}
		match = append(match, rv)
	}
	p.Match = len(match)
	// Newest first.
	slices.SortStableFunc(match, func(a, b review.Record) int { return b.CreatedAt.Compare(a.CreatedAt) })
	index := map[[2]string]int{}
	for _, rv := range match {
		k := [2]string{string(rv.Recommended), cmp.Or(rv.ErrorCategory, "(none)")}
		i, ok := index[k]
		if !ok {
			i = len(p.Groups)
			index[k] = i
			p.Groups = append(p.Groups, reviewGroup{Action: rv.Recommended, Class: k[1]})
		}
		g := &p.Groups[i]
		g.Count++
		if len(g.Rows) < rowsPerGroup {
			g.Rows = append(g.Rows, reviewRow{Record: rv, Model: model(rv.OperationID), Age: age(p.Now.Sub(rv.CreatedAt))})
		} else {
			g.More++
		}
	}
	slices.SortStableFunc(p.Groups, func(a, b reviewGroup) int {
		return cmp.Or(b.Count-a.Count, cmp.Compare(a.Action, b.Action), cmp.Compare(a.Class, b.Class))
	})
	s.render(w, http.StatusOK, "reviews.html", p)
}

// opPage is one operation as the store holds it now, and its plan.
type opPage struct {
	Rec      operation.Record
	Plan     replay.Plan
	Reviews  []review.Record
	Audit    []review.AuditEntry
	Timeline timeline
	Outputs  []outputRow
	Effects  []string
	CSRF     string
	Form     formValues
	// Notice says why nothing changed (a refused or stale submit).
	Notice string
	Result *resultView
}

type outputRow struct {
	Index       int
	ContentType string
	SizeBytes   int64
	SHA256      string
	Delivered   *operation.Delivery
}

type formValues struct {
	JobID, Mode, Reason string
}

type resultView struct {
	replay.Result
	Hint string
}

// load reads the operation and what the store holds beside it, and
// computes its plan with the command line's code.
func (s *Server) load(ctx context.Context, id string) (opPage, error) {
	rec, err := s.cfg.Store.Get(ctx, id)
	if err != nil {
		return opPage{}, fmt.Errorf("operation %s: %w", id, err)
	}
	reviews, err := s.cfg.Store.OperationReviews(ctx, id)
	if err != nil {
		return opPage{}, fmt.Errorf("reviews of %s: %w", id, err)
	}
	audit, err := s.cfg.Store.Audit(ctx, id)
	if err != nil {
		return opPage{}, fmt.Errorf("audit of %s: %w", id, err)
	}
	p := opPage{Rec: rec, Reviews: reviews, Audit: audit,
		Plan: replay.PlanFor(&rec, replay.Evidence{Reviews: reviews, Audit: audit})}
	p.Timeline = drawTimeline(&rec, reviews, audit, s.cfg.Clock.Now())
	if rec.Remote != nil {
		for i, o := range rec.Remote.Outputs {
			row := outputRow{Index: i, ContentType: o.ContentType, SizeBytes: o.SizeBytes, SHA256: o.SHA256}
			if d, ok := rec.Delivered(i); ok {
				row.Delivered = &d
			}
			p.Outputs = append(p.Outputs, row)
		}
	}
	p.Effects = s.effects(&rec, p.Plan)
	return p, nil
}

// effects says what a replay of the plan's action reads, copies or
// submits, in the operator's terms (replay.Explain), and how it is
// written and followed up.
func (s *Server) effects(rec *operation.Record, p replay.Plan) []string {
	out := replay.Explain(rec, p, s.cfg.Operator)
	if p.WritesRecord() {
		out = append(out, fmt.Sprintf("The record update and its audit entry are written in one transaction, only if the record is still at revision %d.", p.Revision))
		if s.cfg.Replayer.Sender == nil {
			out = append(out, "No queue is configured: the follow-up is scheduled on the record. "+s.cfg.ScheduledHint)
		} else {
			out = append(out, "The follow-up message is sent at once.")
		}
	}
	return out
}

func (s *Server) operation(w http.ResponseWriter, r *http.Request) {
	p, err := s.load(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	p.CSRF = s.token()
	p.Form.Mode = "job"
	s.render(w, http.StatusOK, "operation.html", p)
}

// replay carries out the plan's action, recomputed from the record as it
// stands now: a form drawn at another revision, or for another action,
// changes nothing and shows the new plan.
func (s *Server) replay(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	f := r.PostForm
	p, err := s.load(ctx, id)
	if err != nil {
		s.fail(w, err)
		return
	}
	p.CSRF = s.token()
	p.Form = formValues{JobID: strings.TrimSpace(f.Get("job_id")), Mode: f.Get("mode"), Reason: strings.TrimSpace(f.Get("reason"))}
	refuse := func(status int, format string, args ...any) {
		p.Notice = "Nothing was changed: " + s.redact(fmt.Sprintf(format, args...))
		s.render(w, status, "operation.html", p)
	}
	action := operation.Action(f.Get("action"))
	if f.Get("revision") != strconv.FormatInt(p.Plan.Revision, 10) || action != p.Plan.Recommendation.Action {
		refuse(http.StatusConflict, "the form was drawn for %q at revision %s; the record is now at revision %d, and the plan recomputed from it is %s. Review it and submit again.",
			action, f.Get("revision"), p.Plan.Revision, p.Plan.Recommendation.Action)
		return
	}
	if f.Get("confirm") != "yes" {
		refuse(http.StatusBadRequest, "tick the confirmation to carry out %s.", action)
		return
	}
	// The operator is the launch's: a form's field, if any, is ignored.
	req := replay.Request{OperationID: id, Action: action, Operator: s.cfg.Operator}
	switch action {
	case operation.ActionReconcile:
		// The one action that takes evidence: a job id, or the
		// confirmation with its reason.
		switch p.Form.Mode {
		case "job":
			req.JobID = p.Form.JobID
		case "not-submitted":
			req.ConfirmedNotSubmitted = true
			req.Reason = p.Form.Reason
		default:
			refuse(http.StatusBadRequest, "reconcile needs a job id or the not-submitted confirmation.")
			return
		}
	default:
		// Replay says whether the action takes the operator's word,
		// and refuses it where it does not.
		req.Reason = p.Form.Reason
	}
	res, err := s.cfg.Replayer.Replay(ctx, req)
	if s.cfg.AfterReplay != nil {
		s.cfg.AfterReplay()
	}
	if err != nil {
		status := http.StatusConflict
		if errors.Is(err, replay.ErrBadRequest) {
			status = http.StatusBadRequest
		}
		// The state the refusal was decided on.
		if fresh, lerr := s.load(ctx, id); lerr == nil {
			fresh.CSRF, fresh.Form = p.CSRF, p.Form
			p = fresh
		}
		refuse(status, "%v", err)
		return
	}
	after, err := s.load(ctx, id)
	if err != nil {
		s.fail(w, err)
		return
	}
	after.CSRF, after.Form.Mode = p.CSRF, "job"
	after.Result = &resultView{Result: res}
	if res.Sent != nil && s.cfg.Replayer.Sender == nil {
		after.Result.Hint = s.cfg.ScheduledHint
	}
	if res.SendErr != "" {
		after.Result.SendErr = s.redact(res.SendErr)
	}
	s.render(w, http.StatusOK, "operation.html", after)
}

func (s *Server) fail(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	if errors.Is(err, store.ErrNotFound) {
		status = http.StatusNotFound
	}
	s.render(w, status, "error.html", s.redact(err.Error()))
}

func (s *Server) render(w http.ResponseWriter, status int, name string, data any) {
	var b strings.Builder
	if err := s.pages.ExecuteTemplate(&b, name, data); err != nil {
		log.Printf("console: page %s: %v", name, err)
		http.Error(w, "console: the page could not be drawn", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}
