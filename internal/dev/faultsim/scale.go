package faultsim

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/operation"
)

// renderQueueFor is how long a standard render stays queued (clipped to
// its render time): the simulator's default.
const renderQueueFor = 2 * time.Second

// renderModels gives every render of Config.Renders its own model, so
// each job takes exactly its render time.
func renderModels(renders []time.Duration) map[string]genacesim.ModelConfig {
	out := make(map[string]genacesim.ModelConfig, len(renders))
	for i, t := range renders {
		q := min(renderQueueFor, t)
		out[renderModel(i)] = genacesim.ModelConfig{Price: 10, QueueFor: q, RunFor: (t - q).Round(100 * time.Millisecond), Outcome: genacesim.OutcomeSucceed, OutputCount: 1}
	}
	return out
}

func renderModel(i int) string { return fmt.Sprintf("render-%06d", i) }

// Scale is the load a run put on its services (Config.Scale), on its
// virtual clock. Handlers take no virtual time, so how many invocations
// overlap follows from PeakObserving instead (ObserveInvocationsNeeded).
type Scale struct {
	// Functions are each function's invocations and batch sizes.
	Functions map[string]*FunctionScale `json:"functions"`
	// SQS requests: sends, receives (one per invocation), batch deletes
	// (one per invocation that acknowledged anything) and renewals.
	SQSSend, SQSReceive, SQSDelete, SQSChangeVisibility int64
	// Writes counts successful record writes, WritesBy by writer.
	Writes   int64            `json:"writes"`
	WritesBy map[string]int64 `json:"writes_by"`
	// Posts and Gets count the Genace requests the handlers made.
	Posts, Gets int64
	// Peak* are the most of each in one virtual second.
	PeakPostsPerSec, PeakGetsPerSec, PeakWritesPerSec, PeakSQSPerSec int64
	// PeakObserving is the most renders accepted at once: each holds one
	// long poll of a deployed observe chain.
	PeakObserving int64 `json:"peak_observing"`
	// Delivered counts operations delivered, LastDelivered the last one's
	// time from the start.
	Delivered     int64         `json:"delivered"`
	LastDelivered time.Duration `json:"last_delivered"`
	// DeliveredP50 and DeliveredP99 are the delivery times from creation.
	DeliveredP50, DeliveredP99 time.Duration
}

// FunctionScale is one function's invocations by batch size.
type FunctionScale struct {
	Invocations int64 `json:"invocations"`
	Records     int64 `json:"records"`
	// Batches counts invocations by records in the batch (index: records).
	Batches []int64 `json:"batches"`
}

// Mean is the mean records per invocation.
func (f *FunctionScale) Mean() float64 {
	if f == nil || f.Invocations == 0 {
		return 0
	}
	return float64(f.Records) / float64(f.Invocations)
}

// Quantile is the nearest-rank q-quantile of records per invocation.
func (f *FunctionScale) Quantile(q float64) int {
	if f == nil || f.Invocations == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(f.Invocations)))
	var seen int64
	for n, c := range f.Batches {
		if seen += c; seen >= max(rank, 1) {
			return n
		}
	}
	return len(f.Batches) - 1
}

// ObserveInvocationsNeeded is how many observe invocations a deployed
// stack holds at once to long-poll PeakObserving renders, at the p50
// batch size the run measured.
func (s *Scale) ObserveInvocationsNeeded() int64 {
	b := int64(max(1, s.Functions[topology.Observe].Quantile(0.5)))
	return (s.PeakObserving + b - 1) / b
}

// scaleCounters collects Scale while a run goes on.
type scaleCounters struct {
	mu        sync.Mutex
	s         Scale
	perSec    map[int64]*[4]int64 // posts, gets, writes, sqs per virtual second
	observing int64
	created   map[string]time.Duration
	delivered []time.Duration
}

const (
	secPosts = iota
	secGets
	secWrites
	secSQS
)

func newScaleCounters() *scaleCounters {
	return &scaleCounters{s: Scale{Functions: map[string]*FunctionScale{}, WritesBy: map[string]int64{}}, perSec: map[int64]*[4]int64{}, created: map[string]time.Duration{}}
}

// tick counts one event of kind at virtual offset at. Callers hold mu.
func (c *scaleCounters) tick(kind int, at time.Duration) {
	sec := int64(at / time.Second)
	p := c.perSec[sec]
	if p == nil {
		p = &[4]int64{}
		c.perSec[sec] = p
	}
	p[kind]++
}

// The hooks below are nil-safe: a run without Config.Scale has none.

func (c *scaleCounters) invocation(fn string, records int, acked bool, at time.Duration) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.s.Functions[fn]
	if f == nil {
		f = &FunctionScale{}
		c.s.Functions[fn] = f
	}
	f.Invocations++
	f.Records += int64(records)
	for len(f.Batches) <= records {
		f.Batches = append(f.Batches, 0)
	}
	f.Batches[records]++
	c.s.SQSReceive++
	c.tick(secSQS, at)
	if acked {
		c.s.SQSDelete++
		c.tick(secSQS, at)
	}
}

// count adds one to the figure field picks and ticks kind at at.
func (c *scaleCounters) count(field func(*Scale) *int64, kind int, at time.Duration) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	*field(&c.s)++
	c.tick(kind, at)
}

// observing reports whether a deployed observe chain long-polls s.
func observing(s State) bool { return s.Phase == operation.PhaseAccepted }

// write counts a successful write that moved an operation from before
// (had: there was one) to after.
func (c *scaleCounters) write(writer, id string, before State, had bool, after State, at time.Duration) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s.Writes++
	c.s.WritesBy[writer]++
	c.tick(secWrites, at)
	if !had {
		c.created[id] = at
	}
	was, is := had && observing(before), observing(after)
	switch {
	case is && !was:
		c.observing++
		c.s.PeakObserving = max(c.s.PeakObserving, c.observing)
	case was && !is:
		c.observing--
	}
	if after.Phase == operation.PhaseDelivered && (!had || before.Phase != operation.PhaseDelivered) {
		c.s.Delivered++
		c.s.LastDelivered = max(c.s.LastDelivered, at)
		c.delivered = append(c.delivered, at-c.created[id])
	}
}

// result finishes the figures.
func (c *scaleCounters) result() *Scale {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.s
	s.WritesBy = maps.Clone(s.WritesBy)
	for _, p := range c.perSec {
		s.PeakPostsPerSec = max(s.PeakPostsPerSec, p[secPosts])
		s.PeakGetsPerSec = max(s.PeakGetsPerSec, p[secGets])
		s.PeakWritesPerSec = max(s.PeakWritesPerSec, p[secWrites])
		s.PeakSQSPerSec = max(s.PeakSQSPerSec, p[secSQS])
	}
	d := slices.Sorted(slices.Values(c.delivered))
	if n := len(d); n > 0 {
		s.DeliveredP50 = d[max(0, int(math.Ceil(0.5*float64(n)))-1)]
		s.DeliveredP99 = d[max(0, int(math.Ceil(0.99*float64(n)))-1)]
	}
	return &s
}

// WriteScale prints the scale figures of a run.
func (s *Scale) WriteScale(w io.Writer, operations int) {
	if s == nil {
		return
	}
	fmt.Fprintf(w, "scale: %d operations\n", operations)
	for _, fn := range slices.Sorted(maps.Keys(s.Functions)) {
		f := s.Functions[fn]
		fmt.Fprintf(w, "  %-8s %d invocations, records per invocation mean %.2f p50 %d p99 %d\n", fn, f.Invocations, f.Mean(), f.Quantile(0.5), f.Quantile(0.99))
	}
	per := func(n int64) float64 { return float64(n) / float64(max(operations, 1)) }
	sqs := s.SQSSend + s.SQSReceive + s.SQSDelete + s.SQSChangeVisibility
	fmt.Fprintf(w, "  SQS %d requests (%.2f per render: send %d, receive %d, delete %d, change visibility %d), peak %d/s\n", sqs, per(sqs), s.SQSSend, s.SQSReceive, s.SQSDelete, s.SQSChangeVisibility, s.PeakSQSPerSec)
	var by []string
	for _, k := range slices.Sorted(maps.Keys(s.WritesBy)) {
		by = append(by, fmt.Sprintf("%s %.2f", k, per(s.WritesBy[k])))
	}
	fmt.Fprintf(w, "  store %d writes (%.2f per render: %s), peak %d/s\n", s.Writes, per(s.Writes), strings.Join(by, ", "), s.PeakWritesPerSec)
	fmt.Fprintf(w, "  Genace %d POSTs (peak %d/s), %d GETs (%.2f per render, peak %d/s)\n", s.Posts, s.PeakPostsPerSec, s.Gets, per(s.Gets), s.PeakGetsPerSec)
	fmt.Fprintf(w, "  peak renders under observation %d: deployed, that many long polls held at once, in %d observe invocations at the measured p50 batch\n", s.PeakObserving, s.ObserveInvocationsNeeded())
	fmt.Fprintf(w, "  delivered %d of %d, the last at +%s; from creation p50 %s p99 %s\n", s.Delivered, operations, s.LastDelivered.Round(time.Second), s.DeliveredP50.Round(time.Second), s.DeliveredP99.Round(time.Second))
}

// since is the virtual time since the run's start.
func (w *world) since() time.Duration { return w.clk.Now().Sub(simStart) }
