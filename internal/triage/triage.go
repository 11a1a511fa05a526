// Package triage is the DLQ-fed function's handler: for each dead-lettered
// message it writes a review record, with the recovery matrix's
// recommendation computed from the operation's current record (already
// closed, with the reason, when the record has settled what the message
// was for), and acknowledges. It never acts: a dead-lettered message proves neither that
// nothing was accepted nor that anything should be retried.
package triage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/worker"
)

// Store is what triage needs of persistence: every SQS handler's
// (worker.RecordStore), since its reviews are filed through the worker.
type Store = worker.RecordStore

// Handler handles DLQ batches.
type Handler struct {
	store  Store
	clk    clock.Clock
	log    *slog.Logger
	w      *worker.Worker
	runner worker.Runner
}

// Deps is what the handler works with.
type Deps struct {
	Store   Store
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Emitter
}

// Config tunes the handler.
type Config struct {
	// Concurrency bounds records in flight per batch.
	Concurrency int
}

// New wires a handler.
func New(d Deps, cfg Config) *Handler {
	return &Handler{store: d.Store, clk: d.Clock, log: d.Log,
		w:      worker.New(worker.Deps{Store: d.Store, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics}, worker.Config{Name: "triage", Source: review.SourceDLQ}),
		runner: worker.Runner{Action: "triage", Concurrency: cfg.Concurrency, Log: d.Log, Metrics: d.Metrics, Clock: d.Clock}}
}

// Handle is the Lambda entry point for a DLQ batch.
func (h *Handler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	return h.runner.Run(ctx, ev, h.handleRecord), nil
}

// ReviewID keys a dead-lettered message's review, so a redelivered DLQ
// message writes its review once.
func ReviewID(messageID string) string { return "dlq:" + messageID }

// Review builds the review for one dead-lettered message. rec is nil when
// the message names no known operation.
func Review(m events.SQSMessage, env *message.Envelope, rec *operation.Record, decodeErr error, now time.Time) review.Record {
	id := ReviewID(m.MessageId)
	var r review.Record
	switch {
	case rec != nil:
		r = review.ForRecord(id, review.SourceDLQ, rec, now)
		if r.ErrorCategory == "" {
			r.ErrorCategory = "max_receives_exceeded"
		}
	default:
		r = review.Record{ID: id, Source: review.SourceDLQ, CreatedAt: now, Open: true, Recommended: operation.ActionAcknowledge}
		if decodeErr != nil {
			sum := sha256.Sum256([]byte(m.Body))
			r.BodyDigest = hex.EncodeToString(sum[:])
			r.ErrorCategory = "malformed_message"
			// The field name is safe to show; the body never is.
			var de *message.DecodeError
			field := ""
			if errors.As(decodeErr, &de) && de.Field != "" {
				field = " (field " + de.Field + ")"
			}
			r.Reason = fmt.Sprintf("malformed message%s, %d bytes: nothing to replay; the body is kept only as its digest", field, len(m.Body))
		} else {
			r.ErrorCategory = "unknown_operation"
			r.Reason = "the message names an operation that does not exist: nothing to replay"
		}
	}
	r.MessageID = m.MessageId
	r.Queue = queueName(m.EventSourceARN)
	r.ReceiveCount, _ = strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	if env != nil {
		r.OperationID = env.OperationID
		r.MessageType = string(env.Action)
		if r.RemoteJobID == "" {
			r.RemoteJobID = env.ExpectedRemoteJobID
		}
	}
	return r
}

func (h *Handler) handleRecord(ctx context.Context, m events.SQSMessage) error {
	now := h.clk.Now()
	var r review.Record
	env, decodeErr := message.Decode([]byte(m.Body))
	switch {
	case decodeErr != nil:
		r = Review(m, nil, nil, decodeErr, now)
	default:
		rec, err := h.store.Get(ctx, env.OperationID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			r = Review(m, &env, nil, nil, now)
		case err != nil:
			// Retry: a review must not be written without the current state.
			return fmt.Errorf("triage %s: load %s: %w", m.MessageId, env.OperationID, err)
		default:
			r = Review(m, &env, &rec, nil, now)
			if reason, ok := worker.Resolves(&rec, r); ok {
				// The operation already settled what the message was
				// for: the dead letter is on file, with nothing to ask.
				r.Open, r.ClosedBy, r.ClosedAt, r.ClosedReason = false, "automation (triage)", now, reason
			}
		}
	}
	// A review keyed by the message: a redelivered DLQ message files it
	// once (and counts it once).
	if _, err := h.w.Commit(ctx, worker.Turn{Msg: m}, worker.File{Review: r, What: "write review", ByReason: true}); err != nil {
		return err
	}
	h.log.InfoContext(ctx, "dead-lettered message reviewed", "review_id", r.ID, "operation_id", r.OperationID, "phase", string(r.Phase),
		"remote_state", string(r.RemoteState), "recommended", string(r.Recommended), "open", r.Open)
	return nil
}

// queueName is the last part of an SQS ARN (arn:aws:sqs:region:acct:name).
func queueName(arn string) string {
	if i := strings.LastIndexByte(arn, ':'); i >= 0 {
		return arn[i+1:]
	}
	return arn
}
