package genacesim

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Genace's job states, as the simulator reports them.
const (
	StateQueued    = "queued"
	StateRunning   = "running"
	StateSucceeded = "succeeded"
	StateFailed    = "failed"
	StateCanceled  = "canceled"
)

// Genace's refund states.
const (
	RefundNone    = "none"
	RefundPending = "pending"
	RefundSettled = "settled"
)

// Credits is a job's money state at some instant.
type Credits struct {
	Reserved    int64  `json:"reserved"`
	Charged     int64  `json:"charged"`
	Refunded    int64  `json:"refunded"`
	RefundState string `json:"refund_state"`
}

// job is the stored record. Its state is never stored: view computes it
// from the clock, so a manual clock drives every transition.
type job struct {
	id, opID, model string
	mc              ModelConfig
	metadata        map[string]string
	created         time.Time

	// Known submission failure: failed at creation; the refund settles
	// only when a GET observes it (subSettled set by that GET).
	subFail    bool
	subSettled *time.Time

	// Operator reconciliation: failed at reconciled, no refund ever.
	reconciled *time.Time

	outputs [][]byte // PNG bytes, rendered at creation
	sums    []string // hex sha256 of outputs

	// duplicateOf is the job whose POST Genace ran a second time to
	// create this one ("" for a job a POST created).
	duplicateOf string
}

// view is a job as seen at one instant.
type view struct {
	state      string
	progress   float64
	started    *time.Time
	finished   *time.Time
	updated    time.Time
	errCode    string
	errMsg     string
	credits    Credits
	hasOutputs bool
	// next is when state or refund_state changes next (zero: never by
	// time alone). Long polls sleep until then.
	next time.Time
}

// key is what a long poll watches: state and refund_state.
func (v view) key() string { return v.state + "/" + v.credits.RefundState }

func tp(t time.Time) *time.Time { return &t }

// view computes the job at now. Transitions: queued until created+QueueFor,
// running until +RunFor, then succeeded, or failed with an automatic
// refund pending for RefundSettleAfter then settled.
func (j *job) view(now time.Time, settleAfter time.Duration) view {
	price := j.mc.Price
	v := view{credits: Credits{Reserved: price, RefundState: RefundNone}}
	if j.subFail {
		v.state, v.finished, v.updated = StateFailed, tp(j.created), j.created
		v.errCode, v.errMsg = "submission_failed", "the job could not be submitted to a render backend"
		v.credits.Charged = price
		if j.subSettled != nil {
			v.credits.RefundState, v.credits.Refunded, v.updated = RefundSettled, price, *j.subSettled
		} else {
			v.credits.RefundState = RefundPending
			v.next = j.created.Add(settleAfter)
		}
		return v
	}
	qEnd := j.created.Add(j.mc.QueueFor)
	rEnd := qEnd.Add(j.mc.RunFor)
	progressAt := func(t time.Time) float64 {
		if j.mc.RunFor <= 0 || !t.Before(rEnd) {
			return 1
		}
		if t.Before(qEnd) {
			return 0
		}
		return float64(t.Sub(qEnd)) / float64(j.mc.RunFor)
	}
	if j.reconciled != nil {
		r := *j.reconciled
		v.state, v.finished, v.updated = StateFailed, tp(r), r
		v.errCode, v.errMsg = "reconciled", "failed by operator reconciliation"
		v.credits.Charged = price
		v.progress = progressAt(r)
		if !r.Before(qEnd) {
			v.started = tp(qEnd)
		}
		return v
	}
	switch {
	case now.Before(qEnd):
		v.state, v.updated, v.next = StateQueued, j.created, qEnd
	case now.Before(rEnd):
		v.state, v.started, v.updated, v.next = StateRunning, tp(qEnd), qEnd, rEnd
		v.progress = progressAt(now)
	case j.mc.Outcome == OutcomeFail:
		v.state, v.started, v.finished, v.updated, v.progress = StateFailed, tp(qEnd), tp(rEnd), rEnd, 1
		v.errCode, v.errMsg = "render_failed", "the render failed"
		v.credits.Charged = price
		settle := rEnd.Add(settleAfter)
		if now.Before(settle) {
			v.credits.RefundState, v.next = RefundPending, settle
		} else {
			v.credits.RefundState, v.credits.Refunded, v.updated = RefundSettled, price, settle
		}
	default:
		v.state, v.started, v.finished, v.updated, v.progress = StateSucceeded, tp(qEnd), tp(rEnd), rEnd, 1
		v.credits.Charged = price
		v.hasOutputs = true
	}
	return v
}

// observe applies the side effect of a GET at now: a known submission
// failure's refund settles once RefundSettleAfter has passed since the
// failure. Only API GETs call it.
func (j *job) observe(now time.Time, settleAfter time.Duration) {
	if j.subFail && j.subSettled == nil && !now.Before(j.created.Add(settleAfter)) {
		j.subSettled = tp(now)
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
