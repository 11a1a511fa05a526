// Package metrics writes CloudWatch Embedded Metric Format (EMF) lines:
// one JSON object per data point on stdout, which Lambda ships to
// CloudWatch Logs and CloudWatch extracts as metrics, with no API calls on
// the hot path.
package metrics

import (
	"encoding/json"
	"io"
	"regexp"
	"sync"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
)

// Namespace is the CloudWatch namespace of every genjobs metric.
const Namespace = "genjobs"

// Unit is a CloudWatch unit.
type Unit string

// The units genjobs uses.
const (
	UnitCount        Unit = "Count"
	UnitMilliseconds Unit = "Milliseconds"
	UnitSeconds      Unit = "Seconds"
)

// The metric names; the seed asks for queue age, action duration, remote
// render age and lease renewal failures to be kept apart, so backlog can
// be told apart by cause (workers, network waits, rendering capacity).
const (
	QueueAge             = "QueueAge"
	ActionDuration       = "ActionDuration"
	RemoteRenderAge      = "RemoteRenderAge"
	LeaseRenewalFailures = "LeaseRenewalFailures"
	PostOutcomes         = "PostOutcomes"
	ObservationsPerOp    = "ObservationsPerOperation"
	// DueRefreshes counts observation chains and deliveries that started
	// late enough to write their record's due time first, so the sweep
	// does not re-arm them (worker.KeepDue).
	DueRefreshes         = "DueRefreshes"
	Obsolete             = "ObsoleteMessages"
	RecordFailures       = "RecordFailures"
	Scheduled            = "ScheduledFollowUps"
	UncertainSubmissions = "UncertainSubmissions"
	StaleWrites          = "StaleWritesRejected"
	Reviews              = "ReviewsOpened"
	ReviewsResolved      = "ReviewsResolved"
	Deliveries           = "OutputsDelivered"
	// GenaceUnauthorized counts Genace's refusals of our API key (401 or
	// 403 to a POST or GET): a configuration error that no retry fixes
	// until a person does.
	GenaceUnauthorized = "GenaceUnauthorized"
	// GenaceThrottled counts Genace's 429s (a POST, a GET, a download),
	// each waited out for its Retry-After and counted toward no failure
	// cap: throttling holds every operation alike, so none is parked for
	// it, and GenaceThrottledAlarm tells a person when it lasts an hour.
	GenaceThrottled = "GenaceThrottled"
	// Parked counts operations parked for an operator (worker.Park), by
	// Reason: the failure category that stopped automation (a small,
	// fixed set of words). OperationsParkedAlarm watches it.
	Parked = "OperationsParked"
	// EventsPublished counts completion events a sink accepted, and
	// EventPublishFailures those it did not (internal/notify), by Phase:
	// each failed one is sent again by the sweep, and
	// EventPublishFailuresAlarm tells a person when sends keep failing.
	EventsPublished      = "EventsPublished"
	EventPublishFailures = "EventPublishFailures"
	// FeedReceived counts the records an observe invocation received from
	// its own queue while it ran (observe's feed), RecordsHeld the most it
	// held at once (its batch and the feed's), one point of each per
	// invocation; FeedDeleteFailures counts acknowledged records whose
	// delete failed (they come back and collapse on the revision check).
	FeedReceived       = "FeedRecordsReceived"
	RecordsHeld        = "RecordsHeld"
	FeedDeleteFailures = "FeedDeleteFailures"
)

// Dim is a metric dimension. Only the names in allowedDims are accepted
// and values are coerced to short tokens, so nothing high-cardinality
// (an operation id, a job id, a URL) can become a dimension.
type Dim struct{ Name, Value string }

var allowedDims = map[string]bool{"Function": true, "Action": true, "Outcome": true, "Reason": true, "Model": true, "Route": true, "Phase": true}

var token = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,48}$`)

// Emitter writes EMF lines. It is safe for concurrent use.
type Emitter struct {
	mu       sync.Mutex
	w        io.Writer
	clk      clock.Clock
	function string
}

// New returns an emitter that tags every point with the function's name.
func New(w io.Writer, function string, clk clock.Clock) *Emitter {
	return &Emitter{w: w, clk: clk, function: function}
}

// Discard is an emitter that writes nowhere.
func Discard() *Emitter { return New(io.Discard, "discard", clock.Real{}) }

type emfMetric struct {
	Name string `json:"Name"`
	Unit Unit   `json:"Unit"`
}

type emfDirective struct {
	Namespace  string      `json:"Namespace"`
	Dimensions [][]string  `json:"Dimensions"`
	Metrics    []emfMetric `json:"Metrics"`
}

type emfMeta struct {
	Timestamp         int64          `json:"Timestamp"`
	CloudWatchMetrics []emfDirective `json:"CloudWatchMetrics"`
}

// Put writes one data point.
func (e *Emitter) Put(name string, value float64, unit Unit, dims ...Dim) {
	if e == nil {
		return
	}
	doc := map[string]any{}
	keys := []string{"Function"}
	doc["Function"] = safe(e.function)
	for _, d := range dims {
		if !allowedDims[d.Name] || d.Name == "Function" {
			continue
		}
		if _, dup := doc[d.Name]; !dup {
			keys = append(keys, d.Name)
		}
		doc[d.Name] = safe(d.Value)
	}
	doc[name] = value
	doc["_aws"] = emfMeta{
		Timestamp: e.clk.Now().UnixMilli(),
		CloudWatchMetrics: []emfDirective{{
			Namespace: Namespace, Dimensions: [][]string{keys}, Metrics: []emfMetric{{Name: name, Unit: unit}},
		}},
	}
	line, err := json.Marshal(doc)
	if err != nil {
		return // a map of strings and a float cannot fail to marshal
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.w.Write(append(line, '\n'))
}

// Count writes a count of n.
func (e *Emitter) Count(name string, n float64, dims ...Dim) { e.Put(name, n, UnitCount, dims...) }

// Duration writes d in milliseconds.
func (e *Emitter) Duration(name string, d time.Duration, dims ...Dim) {
	e.Put(name, float64(d)/float64(time.Millisecond), UnitMilliseconds, dims...)
}

func safe(v string) string {
	if token.MatchString(v) {
		return v
	}
	return "other"
}
