// Package intake is the application's way in: create an operation, read
// its status, change or cancel it before it is submitted. It is the
// idempotency Genace lacks, given to genjobs' users: the caller's
// operation_id is the key, so a client that lost an answer and sends the
// same create again gets the same operation, never a second record, a
// second dispatch or a second render.
//
// Service holds the rules on narrow interfaces (the store, the dispatch
// sender, a clock, the model catalog), independent of the transport;
// Handler maps them onto HTTP (openapi.yaml documents exactly that API),
// and FunctionURL maps a Lambda function URL's events onto Handler: the
// intake function (functions/intake) serves it behind AWS_IAM auth.
//
// The input (the prompt) is written to the record and nowhere else: not
// to a queue body, a log line, an audit entry, an error or a status view.
package intake

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/genjobs/genjobs/client"
	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/worker"
)

// Store is what the intake needs of persistence, a subset of
// store.Store: create a record if absent, read it, and write a change
// with its audit entry in one revision-conditioned transaction.
type Store interface {
	Create(ctx context.Context, rec operation.Record) (operation.Record, error)
	Get(ctx context.Context, operationID string) (operation.Record, error)
	UpdateWithAudit(ctx context.Context, rec operation.Record, expected int64, entry review.AuditEntry) (operation.Record, error)
}

// Catalog maps each model a caller may ask for to the credits one render
// of it is estimated to cost. The estimate goes on the record, where the
// submit function's budget check reads it, so a model outside the catalog
// cannot be priced and is refused.
type Catalog map[string]int64

// The default limits. An input of 32 KiB is far inside DynamoDB's 400 KB
// item (the rest of a record is about 1 KB) and far above a prompt and
// its parameters; a larger input is refused with 413 rather than stored,
// and would go by reference (the record's InputRef) in a later version.
// The body may hold the input with whitespace around it, hence twice.
const (
	DefaultMaxInputBytes = 32 << 10
	DefaultMaxBodyBytes  = 64 << 10
)

// Limits bound what one request may carry; a zero field takes its default.
type Limits struct {
	// MaxInputBytes bounds the input in its canonical (compact) form, the
	// form stored.
	MaxInputBytes int
	// MaxBodyBytes bounds the whole request body as received.
	MaxBodyBytes int64
}

// Deps are the Service's collaborators.
type Deps struct {
	Store Store
	// Sender sends the dispatch to the submit function's queue; the same
	// interface the handlers send their follow-ups through.
	Sender  worker.Sender
	Clock   clock.Clock
	Catalog Catalog
	Limits  Limits
	// Log gets one line per refused send or store error, never an input.
	Log *slog.Logger
}

// Service carries out the intake's rules. It is safe for concurrent use
// if its dependencies are.
type Service struct {
	store   Store
	sender  worker.Sender
	clk     clock.Clock
	catalog Catalog
	limits  Limits
	log     *slog.Logger
}

// New checks d and builds a Service: a nil clock is the wall clock and a
// nil logger discards.
func New(d Deps) (*Service, error) {
	if d.Store == nil || d.Sender == nil {
		return nil, errors.New("intake: a store and a sender are required")
	}
	if len(d.Catalog) == 0 {
		return nil, errors.New("intake: the model catalog is empty: no request could be priced")
	}
	for m, c := range d.Catalog {
		if !message.ValidOperationID(m) || c < 0 {
			return nil, fmt.Errorf("intake: catalog entry %q: %d credits: want a model name (letters, digits, . _ : -) and an estimate of 0 or more", m, c)
		}
	}
	if d.Clock == nil {
		d.Clock = clock.Real{}
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Limits.MaxInputBytes <= 0 {
		d.Limits.MaxInputBytes = DefaultMaxInputBytes
	}
	if d.Limits.MaxBodyBytes <= 0 {
		d.Limits.MaxBodyBytes = DefaultMaxBodyBytes
	}
	return &Service{store: d.Store, sender: d.Sender, clk: d.Clock, catalog: maps.Clone(d.Catalog), limits: d.Limits, log: d.Log}, nil
}

func bad(status int, code, field, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Result is a request's answer: the operation's status and whether this
// request created it (201 rather than 200).
type Result struct {
	Status  Status
	Created bool
}

// spec is a validated request in the form stored.
type spec struct {
	req      CreateRequest
	input    []byte // canonical
	estimate int64
	digest   string
}

// check validates req: each refusal names its field, and nothing is
// written before it passes.
func (s *Service) check(req CreateRequest) (spec, error) {
	if !message.ValidOperationID(req.OperationID) {
		return spec{}, bad(http.StatusBadRequest, client.CodeInvalidField, "operation_id", "not an operation id: a letter or digit, then letters, digits and . _ : - only, at most 128 bytes")
	}
	if !message.ValidOperationID(req.UserID) {
		return spec{}, bad(http.StatusBadRequest, client.CodeInvalidField, "user_id", "not a user id: a letter or digit, then letters, digits and . _ : - only, at most 128 bytes")
	}
	estimate, ok := s.catalog[req.Model]
	if !ok {
		// The value is not echoed: it is the caller's own, and bounded nowhere.
		return spec{}, bad(http.StatusBadRequest, client.CodeUnknownModel, "model", "not a model of the catalog (%s)", strings.Join(slices.Sorted(maps.Keys(s.catalog)), ", "))
	}
	if req.BudgetCredits <= 0 {
		return spec{}, bad(http.StatusBadRequest, client.CodeInvalidField, "budget_credits", "must be more than 0")
	}
	if req.BudgetCredits < estimate {
		// Submit would never POST it (its budget check fails), so the
		// operation would wait in prepared for ever: say so now.
		return spec{}, bad(http.StatusBadRequest, client.CodeBudgetTooLow, "budget_credits", "%d credits, below the %d credits a render of %s is estimated at", req.BudgetCredits, estimate, req.Model)
	}
	input, err := canonicalInput(req.Input)
	if err != nil {
		return spec{}, bad(http.StatusBadRequest, client.CodeInvalidField, "input", "%v", err)
	}
	if len(input) > s.limits.MaxInputBytes {
		return spec{}, bad(http.StatusRequestEntityTooLarge, client.CodeInputTooLarge, "input", "%d bytes in compact form, over the %d-byte limit; larger inputs are not accepted", len(input), s.limits.MaxInputBytes)
	}
	sp := spec{req: req, input: input, estimate: estimate}
	sp.req.Input = input
	sp.digest = digest(sp.req)
	return sp, nil
}

// canonicalInput is raw as one compact JSON object with its keys sorted
// at every level and numbers as written, so that two encodings of one
// object (key order, whitespace, escapes) are one request: a client that
// re-encodes its retry is still retrying. A duplicated key keeps its
// last value, which is then the only one stored and sent.
func canonicalInput(raw json.RawMessage) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, errors.New("not JSON")
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, errors.New("must be a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("must be one JSON object")
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, errors.New("not encodable JSON")
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// digestPrefix versions the digest's form: a later form must not compare
// equal to this one by accident.
const digestPrefix = "genjobs.intake.create.v1\n"

// digest is the hex sha256 of the canonical request (its input already
// canonical): the record's RequestSHA256.
func digest(req CreateRequest) string {
	b, _ := json.Marshal(req) // fields in declaration order; cannot fail on a canonical input
	sum := sha256.Sum256(append([]byte(digestPrefix), b...))
	return hex.EncodeToString(sum[:])
}

// writer names one request's writes (store.WithWriter), so a write whose
// answer was lost is known as its own and no other request's is.
func writer() string { return "intake/" + rand.Text() }

// Create creates the operation req names, or answers the one it already
// created. A new id: the record, prepared and authorized for spec
// revision 1 with the dispatch it owes recorded on it, then the dispatch
// (201). The same id with the same request: the operation as it stands,
// nothing written or sent (200). The same id with another request, or an
// operation this API did not create: 409 operation_id_conflict.
func (s *Service) Create(ctx context.Context, req CreateRequest) (Result, error) {
	sp, err := s.check(req)
	if err != nil {
		return Result{}, err
	}
	now := s.clk.Now()
	rec := operation.Record{
		OperationID: req.OperationID, SpecRevision: 1, Phase: operation.PhasePrepared, UserID: req.UserID, Model: req.Model,
		Input: sp.input, RequestSHA256: sp.digest, Authorized: true, AuthorizedSpecRevision: 1,
		BudgetCredits: req.BudgetCredits, EstimatedCredits: sp.estimate, Timestamps: operation.Timestamps{Created: now, Updated: now},
		// The dispatch is owed from the moment the record exists: recorded,
		// the sweep re-sends it if the message below is lost or never sent.
		Schedule: &operation.NextAction{Action: string(message.ActionSubmitGeneration), Due: now},
	}
	w := writer()
	saved, err := s.store.Create(store.WithWriter(ctx, w), rec)
	if errors.Is(err, store.ErrExists) {
		cur, gerr := s.store.Get(ctx, req.OperationID)
		switch {
		case gerr != nil:
			return Result{}, fmt.Errorf("intake: create %s: read the existing record: %w", req.OperationID, gerr)
		case cur.Writer == w && cur.Revision == 1:
			// This request's own create, applied by an attempt whose
			// answer was lost: it still owes the dispatch.
			saved, err = cur, nil
		case cur.RequestSHA256 != sp.digest:
			return Result{}, bad(http.StatusConflict, client.CodeOperationIDConflict, "operation_id",
				"operation %s exists with a different request; use a new operation_id, or change it with PUT", req.OperationID)
		default:
			return Result{Status: View(cur)}, nil
		}
	}
	if err != nil {
		return Result{}, fmt.Errorf("intake: create %s: %w", req.OperationID, err)
	}
	s.dispatch(ctx, saved, now)
	return Result{Status: View(saved), Created: true}, nil
}

// dispatch sends the submit message the record's Schedule expects. A
// failed send is logged and answered as success all the same: the record
// carries the dispatch, and the sweep re-sends it once overdue.
func (s *Service) dispatch(ctx context.Context, rec operation.Record, now time.Time) {
	env, delay, ok := worker.FollowUpOf(&rec, 0, now)
	if !ok {
		return
	}
	// Sent even if the caller hung up: the write is done and owes it.
	if _, err := s.sender.Send(context.WithoutCancel(ctx), env, delay); err != nil {
		s.log.WarnContext(ctx, "intake: dispatch not sent; the sweep re-sends it", "operation_id", rec.OperationID,
			"revision", rec.Revision, "error", err.Error())
	}
}

// Status reads the operation's status view.
func (s *Service) Status(ctx context.Context, operationID string) (Status, error) {
	if !message.ValidOperationID(operationID) {
		return Status{}, bad(http.StatusBadRequest, client.CodeInvalidField, "operation_id", "not an operation id")
	}
	rec, err := s.get(ctx, operationID)
	if err != nil {
		return Status{}, err
	}
	return View(rec), nil
}

func (s *Service) get(ctx context.Context, id string) (operation.Record, error) {
	rec, err := s.store.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return rec, bad(http.StatusNotFound, client.CodeNotFound, "", "no operation %s", id)
	}
	if err != nil {
		return rec, fmt.Errorf("intake: get %s: %w", id, err)
	}
	return rec, nil
}

// beforeClaim reports whether the user may still change or cancel the
// operation: prepared, with no submission claim and no job known, so no
// POST can be in flight or have happened for this spec. An operation an
// operator review holds is theirs to move.
func beforeClaim(rec *operation.Record) bool {
	return rec.Phase == operation.PhasePrepared && rec.Claim == nil && rec.RemoteJobID == "" && rec.Parked == nil
}

// Change replaces the request of an operation not yet claimed for
// submission, conditioned on the revision the caller last saw (ifMatch):
// spec revision + 1, authorized for it, with the new model, input, budget
// and estimate; audited as the caller's; then a dispatch at the new
// revision, which makes every dispatch sent before stale (the submit
// function acknowledges those without a POST). A change whose request the
// operation already has is answered with its status and writes nothing,
// whatever ifMatch says (RFC 9110 §13.1.1 allows a 2xx for a change that
// is already in effect): that is a PUT retried after its answer was lost.
func (s *Service) Change(ctx context.Context, operationID string, req CreateRequest, ifMatch int64, caller string) (Result, error) {
	if !message.ValidOperationID(operationID) {
		return Result{}, bad(http.StatusBadRequest, client.CodeInvalidField, "operation_id", "not an operation id")
	}
	if req.OperationID != operationID {
		return Result{}, bad(http.StatusBadRequest, client.CodeOperationIDMismatch, "operation_id", "the body names another operation than the path")
	}
	sp, err := s.check(req)
	if err != nil {
		return Result{}, err
	}
	cur, err := s.get(ctx, operationID)
	if err != nil {
		return Result{}, err
	}
	if inEffect(&cur, sp) {
		return Result{Status: View(cur)}, nil
	}
	if err := precondition(&cur, ifMatch); err != nil {
		return Result{}, err
	}
	if cur.UserID != req.UserID {
		// The budget and the authorization are the user's: moving an
		// operation to another user is not a change of its request.
		return Result{}, bad(http.StatusConflict, client.CodeUserIDConflict, "user_id", "operation %s belongs to another user; create a new operation", operationID)
	}
	if !beforeClaim(&cur) {
		e := bad(http.StatusConflict, client.CodeNotChangeable, "", "operation %s is %s: %s", operationID, cur.Phase, whyLocked(&cur))
		e.Phase = client.Phase(cur.Phase)
		return Result{}, e
	}
	now := s.clk.Now()
	next, err := operation.ChangeSpec(cur, now)
	if err != nil {
		return Result{}, fmt.Errorf("intake: change %s: %w", operationID, err)
	}
	next.Model, next.Input, next.BudgetCredits, next.EstimatedCredits = req.Model, sp.input, req.BudgetCredits, sp.estimate
	next.Authorized, next.AuthorizedSpecRevision = true, next.SpecRevision
	// A dispatch waiting out Genace's Retry-After keeps its due time: a
	// change never jumps a rate limit.
	due := now
	if cur.Schedule != nil && cur.Schedule.Action == string(message.ActionSubmitGeneration) && cur.Schedule.Due.After(now) {
		due = cur.Schedule.Due
	}
	next.Schedule = &operation.NextAction{Action: string(message.ActionSubmitGeneration), Due: due}
	// This revision is no queue message's: a redelivered earlier message
	// must not take it for its own write (submit re-emits for those).
	next.LastAppliedMessageID = ""
	entry := review.AuditEntry{Operator: caller, Action: operation.ActionChange, Decision: "change-spec",
		FromPhase: cur.Phase, ToPhase: next.Phase, FromRevision: cur.Revision, At: now, Credits: sp.estimate}
	saved, err := s.write(ctx, next, cur.Revision, entry)
	if err != nil {
		return Result{}, err
	}
	s.dispatch(ctx, saved, now)
	return Result{Status: View(saved)}, nil
}

// inEffect reports whether the operation's current request is sp's.
func inEffect(rec *operation.Record, sp spec) bool {
	in, err := canonicalInput(rec.Input)
	return err == nil && rec.UserID == sp.req.UserID && rec.Model == sp.req.Model &&
		rec.BudgetCredits == sp.req.BudgetCredits && bytes.Equal(in, sp.input)
}

// Cancel supersedes an operation not yet claimed for submission,
// conditioned on ifMatch and audited: nothing was POSTed, so nothing is
// charged, and every dispatch sent before finds it terminal. After the
// claim Genace has no cancel: the job (perhaps charging) stays tracked
// until its credits settle, and the cancel is refused. An operation
// already superseded is answered with its status (a cancel retried after
// its answer was lost).
func (s *Service) Cancel(ctx context.Context, operationID string, ifMatch int64, caller string) (Result, error) {
	if !message.ValidOperationID(operationID) {
		return Result{}, bad(http.StatusBadRequest, client.CodeInvalidField, "operation_id", "not an operation id")
	}
	cur, err := s.get(ctx, operationID)
	if err != nil {
		return Result{}, err
	}
	if cur.Phase == operation.PhaseSuperseded {
		return Result{Status: View(cur)}, nil
	}
	if err := precondition(&cur, ifMatch); err != nil {
		return Result{}, err
	}
	if !beforeClaim(&cur) {
		e := bad(http.StatusConflict, client.CodeNotCancellable, "", "operation %s is %s: %s", operationID, cur.Phase, whyLocked(&cur))
		if !cur.Terminal() && cur.Phase != operation.PhasePrepared {
			e.Message += "; Genace has no cancel, so the job stays tracked until its credits settle"
		}
		e.Phase = client.Phase(cur.Phase)
		return Result{}, e
	}
	now := s.clk.Now()
	next, err := operation.Supersede(cur, now)
	if err != nil {
		return Result{}, fmt.Errorf("intake: cancel %s: %w", operationID, err)
	}
	next.LastAppliedMessageID = ""
	entry := review.AuditEntry{Operator: caller, Action: operation.ActionCancel, Decision: "cancel-before-claim",
		FromPhase: cur.Phase, ToPhase: next.Phase, FromRevision: cur.Revision, At: now}
	saved, err := s.write(ctx, next, cur.Revision, entry)
	if err != nil {
		return Result{}, err
	}
	return Result{Status: View(saved)}, nil
}

// whyLocked says why the user can no longer change an operation.
func whyLocked(rec *operation.Record) string {
	switch {
	case rec.Terminal():
		return "it has ended"
	case rec.Parked != nil:
		return "an operator review holds it"
	case rec.Phase == operation.PhasePrepared && rec.RemoteJobID != "":
		return "a Genace job is known for it"
	}
	return "the submission was claimed, so a POST may have been sent"
}

// precondition refuses a write based on a revision the record no longer
// stands at.
func precondition(rec *operation.Record, ifMatch int64) error {
	if rec.Revision == ifMatch {
		return nil
	}
	e := bad(http.StatusPreconditionFailed, client.CodeRevisionMismatch, "If-Match", "operation %s is at revision %d, not %d: read it again", rec.OperationID, rec.Revision, ifMatch)
	e.CurrentRevision = rec.Revision
	return e
}

// write is the audited conditional write; losing the race to a handler
// (or another change) is a 412 with the revision that won, and nothing
// written.
func (s *Service) write(ctx context.Context, next operation.Record, expected int64, entry review.AuditEntry) (operation.Record, error) {
	saved, err := s.store.UpdateWithAudit(store.WithWriter(ctx, writer()), next, expected, entry)
	var ce *store.ConflictError
	switch {
	case errors.As(err, &ce) && ce.Current == nil:
		return saved, bad(http.StatusNotFound, client.CodeNotFound, "", "no operation %s", next.OperationID)
	case errors.As(err, &ce):
		e := bad(http.StatusPreconditionFailed, client.CodeRevisionMismatch, "If-Match", "operation %s moved to revision %d meanwhile: read it again", next.OperationID, ce.Current.Revision)
		e.CurrentRevision = ce.Current.Revision
		return saved, e
	case err != nil:
		return saved, fmt.Errorf("intake: write %s: %w", next.OperationID, err)
	}
	return saved, nil
}
