package faultsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/genjobs/genjobs/internal/intake"
	"github.com/genjobs/genjobs/internal/operation"
)

// The application: it creates, changes and cancels its operations
// through intake.Service, the real one, on the world's store (above the
// recorder) and dispatcher, and keeps what it sent and was answered
// (Caller) for invariants j–m.

// newIntake builds the intake Service the application calls.
func (w *world) newIntake() error {
	catalog := intake.Catalog{}
	for name, mc := range w.models {
		catalog[name] = mc.Price
	}
	var st intake.Store = appStore{Store: w.rec, w: w}
	if w.cfg.WrapIntake != nil {
		st = w.cfg.WrapIntake(st)
	}
	svc, err := intake.New(intake.Deps{Store: st, Sender: w.disp, Clock: w.clk, Catalog: catalog, Log: slog.New(&traceLog{w: w}).With("function", "intake")})
	w.svc = svc
	return err
}

// appStore is the store the intake writes through: it runs a raced
// create (IntakeCreateRace) inside the first one's Create, and under
// Config.UnrecordedDispatch stores the record without its dispatch.
type appStore struct {
	intake.Store
	w *world
}

// Create runs the raced create before or after the write applies.
func (s appStore) Create(ctx context.Context, rec operation.Record) (operation.Record, error) {
	i := s.w.opIndex(rec.OperationID)
	if i < 0 {
		return s.Store.Create(ctx, rec)
	}
	op := &s.w.ops[i]
	race := s.w.take(&op.createRace)
	if race == raceBefore {
		s.w.raceCreate(op, "before")
	}
	stored := rec
	if s.w.cfg.UnrecordedDispatch {
		stored.Schedule = nil
	}
	saved, err := s.Store.Create(ctx, stored)
	if race == raceAfter {
		s.w.raceCreate(op, "after")
	}
	if err == nil {
		saved.Schedule = rec.Schedule // sent all the same
	}
	return saved, err
}

// take consumes a planned interleaving.
func (w *world) take(p *int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := *p
	*p = 0
	return v
}

func (w *world) request(op *opSpec, changed bool) intake.CreateRequest {
	prompt := "faultsim render " + op.id
	if changed {
		prompt += " (changed)"
	}
	input, _ := json.Marshal(map[string]any{"prompt": prompt, "size": "1024x1024"})
	return intake.CreateRequest{OperationID: op.id, UserID: "user-" + op.id[len(op.id)-2:], Model: op.model, Input: input, BudgetCredits: 3 * op.price}
}

// caller is op's Caller; w.mu must be held.
func (w *world) caller(op string) *Caller {
	c, ok := w.callers[op]
	if !ok {
		c = &Caller{Specs: map[int64]string{}}
		w.callers[op] = c
	}
	return c
}

// create is the application creating an authorized operation (spec r1)
// through the intake, which records and sends the dispatch.
func (w *world) create(op *opSpec) {
	req := w.request(op, false)
	w.mu.Lock()
	c := w.caller(op.id)
	c.Specs[1], c.Current = SpecDigest(req.Model, req.Input), 1
	w.mu.Unlock()
	w.createAttempt(op)
}

// createAttempt sends op's create; while IntakeAnswerLost has answers
// to lose, its answer is lost and the caller sends it again 0–3 s later.
func (w *world) createAttempt(op *opSpec) {
	res, err := w.svc.Create(withWriter(context.Background(), "app"), w.request(op, false))
	w.createAnswered(op.id, res, err)
	if op.lostAnswers == 0 {
		return
	}
	op.lostAnswers--
	w.inj.note(IntakeAnswerLost)
	after := time.Duration(w.inj.intn(IntakeAnswerLost, 4)) * time.Second
	w.tracef(op.id, "FAULT %s: the create's answer (%d) is lost; the caller sends it again in %s", IntakeAnswerLost, answerCode(res, err), after)
	w.plan(w.clk.Now().Add(after), evCreateRetry, w.opIndex(op.id))
}

// raceCreate is the same create run inside the first one's store call.
func (w *world) raceCreate(op *opSpec, when string) {
	res, err := w.svc.Create(withWriter(context.Background(), "app"), w.request(op, false))
	w.createAnswered(op.id, res, err)
	w.inj.note(IntakeCreateRace)
	w.tracef(op.id, "FAULT %s: the same create ran %s the first one's store write applied: %d", IntakeCreateRace, when, answerCode(res, err))
}

func (w *world) createAnswered(id string, res intake.Result, err error) {
	a := CreateAnswer{Identity: fmt.Sprintf("%s created %s", res.Status.OperationID, res.Status.CreatedAt.Format(time.RFC3339Nano)), Created: res.Created}
	if err != nil {
		a = CreateAnswer{Err: err.Error()}
	}
	w.mu.Lock()
	c := w.caller(id)
	c.Creates = append(c.Creates, a)
	w.mu.Unlock()
}

// answerCode is the HTTP status the intake's answer maps to.
func answerCode(res intake.Result, err error) int {
	var e *intake.Error
	switch {
	case errors.As(err, &e):
		return e.Status
	case err != nil:
		return http.StatusInternalServerError
	case res.Created:
		return http.StatusCreated
	}
	return http.StatusOK
}

// change is the application changing op's input (IntakeChangeRace),
// keeping the budget it sees, If-Match the status seen (nil: read now);
// after a 412 it reads again, three times at most.
func (w *world) change(op *opSpec, when string, seen *intake.Status) {
	req := w.request(op, true)
	w.ask(op, IntakeChangeRace, "change "+when, seen, func(ctx context.Context, st intake.Status) (intake.Result, error) {
		req.BudgetCredits = st.BudgetCredits
		return w.svc.Change(ctx, op.id, req, st.Revision, "app")
	}, func(c *Caller, st intake.Status) {
		c.Specs[st.SpecRevision], c.Current = SpecDigest(req.Model, req.Input), st.SpecRevision
	})
}

// cancel is the application cancelling op (IntakeCancel), If-Match
// the status seen (nil: read now).
func (w *world) cancel(op *opSpec, when string, seen *intake.Status) {
	w.ask(op, IntakeCancel, "cancel "+when, seen, func(ctx context.Context, st intake.Status) (intake.Result, error) {
		return w.svc.Cancel(ctx, op.id, st.Revision, "app")
	}, func(c *Caller, _ intake.Status) { c.Cancelled = true })
}

// ask sends a change or cancel (fault f) and holds a 409 to invariant
// m; done applies an accepted one to the caller.
func (w *world) ask(op *opSpec, f Fault, what string, seen *intake.Status, send func(context.Context, intake.Status) (intake.Result, error), done func(*Caller, intake.Status)) {
	ctx := withWriter(context.Background(), "app")
	for range 3 {
		if seen == nil {
			st, err := w.svc.Status(ctx, op.id)
			if err != nil {
				return
			}
			seen = &st
		}
		res, err := send(ctx, *seen)
		code := answerCode(res, err)
		if code == http.StatusPreconditionFailed {
			seen = nil
			continue
		}
		w.inj.note(f)
		w.countPath(fmt.Sprintf("intake: %s answered %d", what, code))
		w.tracef(op.id, "the application's %s (If-Match r%d) is answered %d", what, seen.Revision, code)
		switch code {
		case http.StatusOK:
			w.mu.Lock()
			done(w.caller(op.id), res.Status)
			w.mu.Unlock()
		case http.StatusConflict:
			w.refused(op.id, what)
		}
		return
	}
}

// refused holds a change or cancel answered 409 to invariant m.
func (w *world) refused(id, what string) {
	rec, err := w.db.Get(context.Background(), id)
	if err != nil {
		return
	}
	w.rec.mu.Lock()
	claimed := w.rec.claimed[id]
	w.rec.mu.Unlock()
	if p := CheckRefusal(what, claimed, &rec); p != "" {
		w.tracef(id, "VIOLATION %s: %s", InvRefusal, p)
		w.violate(InvRefusal, id, p)
	}
}

// claimRace runs op's planned IntakeChangeRace and IntakeCancel around
// a submit worker's claim write (write): inside it, before it applies,
// or after, with the revision the application read before it.
func (w *world) claimRace(ctx context.Context, rec operation.Record, write func() (operation.Record, error)) (operation.Record, error) {
	inv, i := invOf(ctx), w.opIndex(rec.OperationID)
	if inv == nil || inv.fn != "submit" || rec.Phase != operation.PhaseSubmitting || rec.Claim == nil || i < 0 {
		return write()
	}
	op := &w.ops[i]
	calls := []struct {
		race int
		f    Fault
		call func(*opSpec, string, *intake.Status)
	}{{w.take(&op.changeRace), IntakeChangeRace, w.change}, {w.take(&op.cancelRace), IntakeCancel, w.cancel}}
	if calls[0].race == 0 && calls[1].race == 0 {
		return write()
	}
	for _, c := range calls {
		if c.race == raceBefore {
			w.tracef(op.id, "FAULT %s: the application's call runs inside the claim's write, before it applies", c.f)
			c.call(op, "inside the claim's write, before it applied", nil)
		}
	}
	// What the application read before the claim applied.
	seen, serr := w.svc.Status(context.Background(), op.id)
	saved, err := write()
	for _, c := range calls {
		if c.race == raceAfter && serr == nil {
			w.tracef(op.id, "FAULT %s: the application's call, read at r%d, runs inside the claim's write, after it applied", c.f, seen.Revision)
			c.call(op, "inside the claim's write, after it applied", &seen)
		}
	}
	return saved, err
}

// when names the moment an intake call was planned for.
func when(at time.Duration) string {
	if at == 0 {
		return "before the claim"
	}
	return "1-60 s after the create"
}

// checkPost holds a POST Genace received to invariants k and l, and
// returns the record's spec revision at it.
func (w *world) checkPost(op string, body []byte) int64 {
	var req struct {
		Model string          `json:"model"`
		Input json.RawMessage `json:"input"`
	}
	_ = json.Unmarshal(body, &req)
	w.rec.mu.Lock()
	spec := w.rec.last[op].Facts.SpecRevision
	w.rec.mu.Unlock()
	w.mu.Lock()
	var vs []Violation
	if c, ok := w.callers[op]; ok {
		vs = CheckPost(op, *c, spec, SpecDigest(req.Model, req.Input))
	}
	w.mu.Unlock()
	for _, v := range vs {
		w.tracef(op, "VIOLATION %s: %s", v.Invariant, v.Detail)
		w.violate(v.Invariant, op, v.Detail)
	}
	return spec
}

// checkIntake holds an operation to invariants j and k at the end.
func (w *world) checkIntake(id string, confirmed int) []Violation {
	w.rec.mu.Lock()
	records := w.rec.creates[id]
	w.rec.mu.Unlock()
	w.mu.Lock()
	answers := w.caller(id).Creates
	w.mu.Unlock()
	return append(CheckCreates(id, records, answers), CheckPostsPerSpec(id, w.wire.perSpec(id), confirmed)...)
}

// authorize notes a spec the user re-authorized outside the intake
// (UserChangeSpec): in effect from now on.
func (w *world) authorize(rec operation.Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.caller(rec.OperationID)
	c.Specs[rec.SpecRevision], c.Current = SpecDigest(rec.Model, rec.Input), rec.SpecRevision
}
