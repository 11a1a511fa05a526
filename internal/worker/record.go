// Consumer is what the operation queues' consumers (submit, observe,
// deliver) share around their decisions: one SQS record is
// decoded into its envelope, checked to belong on the queue, turned into
// the operation record it names and a lease on the message, and the
// decision on it is timed. A message the record makes pointless is
// acknowledged as obsolete the same way by all of them.

package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
)

// Store loads the operation a message names.
type Store interface {
	Get(ctx context.Context, operationID string) (operation.Record, error)
}

// RecordStore is what every SQS handler needs of persistence: read the
// record, write it conditionally, open a review, and find and close the
// reviews a write resolved.
type RecordStore interface {
	Store
	Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error)
	PutReview(ctx context.Context, r review.Record) (bool, error)
	OpenReviewsOf(ctx context.Context, operationID string) ([]review.Record, error)
	ResolveReview(ctx context.Context, id, by, reason string, at time.Time) error
}

// Act acts on one message's record, under the message's lease. It
// returns the outcome for metrics.
type Act func(ctx context.Context, m events.SQSMessage, env message.Envelope, rec operation.Record, l *Lease) (Outcome, error)

// Consumer is one queue's consumer.
type Consumer struct {
	// Action is the only action its queue carries.
	Action message.Action
	// Name is the function ("submit"), which starts its error texts;
	// Queue names its queue in them ("dispatch").
	Name, Queue string
	// Store loads records.
	Store Store
	// Extender, QueueURL and Visibility make the message's lease.
	Extender   Extender
	QueueURL   string
	Visibility time.Duration
	Clock      clock.Clock
	Log        *slog.Logger
	Metrics    *metrics.Emitter
}

// Record is the Func that hands each record to decide: it decodes
// the message (a malformed one fails permanently, through
// message.ErrMalformed), refuses one whose action does not belong on the
// queue (permanently), loads the record (an unknown operation fails
// permanently, through store.ErrNotFound), leases the message, and
// records the decision's ActionDuration with its outcome. The lease's
// estimate starts when the handler reached the record, after the receive
// (the batching window, a cold start, throttling and the records before it
// in the batch come first), so it errs long: a decision that needs the
// message for sure renews it with the queue (Lease.Renew).
func (c *Consumer) Record(decide Act) Func {
	return func(ctx context.Context, m events.SQSMessage) error {
		start := c.Clock.Now()
		env, err := message.Decode([]byte(m.Body))
		if err != nil {
			return fmt.Errorf("%s message %s: %w", c.Name, m.MessageId, err)
		}
		if env.Action != c.Action {
			return MarkPermanent(fmt.Errorf("%s message %s: action %s does not belong on the %s queue", c.Name, m.MessageId, env.Action, c.Queue))
		}
		// Every write of this handling names this receive as its writer:
		// a write sent again is known as its own, while a worker that got
		// the same message (another receive) stays another writer.
		ctx = store.WithWriter(ctx, Writer(c.Name, m))
		rec, err := c.Store.Get(ctx, env.OperationID)
		if err != nil {
			return fmt.Errorf("%s %s: load: %w", c.Name, env.OperationID, err)
		}
		l := NewLease(c.Clock, c.Extender, c.QueueURL, m.ReceiptHandle, c.Visibility, start)
		l.OnRenewalFailure = func(error) {
			c.Metrics.Count(metrics.LeaseRenewalFailures, 1, metrics.Dim{Name: "Action", Value: string(env.Action)})
		}
		outcome, err := decide(ctx, m, env, rec, l)
		c.Metrics.Duration(metrics.ActionDuration, c.Clock.Now().Sub(start),
			metrics.Dim{Name: "Action", Value: string(env.Action)}, metrics.Dim{Name: "Outcome", Value: string(outcome)})
		return err
	}
}

// Writer names the function's handling of one receive of m (the store's
// writer): the receipt handle is new with every receive. Only a digest of
// it is kept, since the handle itself lets its holder delete the message.
func Writer(name string, m events.SQSMessage) string {
	sum := sha256.Sum256([]byte(m.ReceiptHandle))
	return name + "/" + hex.EncodeToString(sum[:8])
}

// Obsolete acknowledges a message that the record makes pointless: it
// counts it by action and reason, logs it, and returns OutcomeObsolete
// with no error.
func (c *Consumer) Obsolete(ctx context.Context, env message.Envelope, rec *operation.Record, why Reason) (Outcome, error) {
	c.Metrics.Count(metrics.Obsolete, 1, metrics.Dim{Name: "Action", Value: string(env.Action)}, metrics.Dim{Name: "Reason", Value: string(why)})
	c.Log.InfoContext(ctx, "acknowledged as obsolete", "operation_id", env.OperationID, "reason", string(why),
		"expected_revision", env.ExpectedRevision, "revision", rec.Revision, "phase", string(rec.Phase))
	return OutcomeObsolete, nil
}
