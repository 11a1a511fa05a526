package benchmark

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/dev/faultsim"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/store/dynamo"
)

// ScaleInputs are what the scale table is computed from. Everything
// structural comes from the code that declares it: the stack's batch
// sizes and concurrency caps (topology.Stack, held against
// template.yaml), observe's chain (observe.DefaultChain), the floor's
// GETs (FloorGETs), the status index's shards (dynamo.StatusShards), the
// prices (ListPrices) and memory sizes (TemplateFunctions).
type ScaleInputs struct {
	Workload  Workload
	Topology  topology.Topology
	Chain     time.Duration
	Prices    Prices
	Functions Functions
	// Seed draws the render times the per-render means are taken over.
	Seed uint64
	// AccountLimit is the account's concurrent executions (AWS's default
	// per region).
	AccountLimit int
	// PartitionWCU and PartitionRCU are one DynamoDB partition's most
	// write and read units per second.
	PartitionWCU, PartitionRCU float64
	// StatusShards is how many partition keys the status index spreads
	// active operations over.
	StatusShards int
	// PerRender are one render's AWS requests (genjobs' design, from the
	// benchmark's counting run and model): its messages, record writes and
	// write units, the status index's share, and reads.
	PerRender Requests
}

// DefaultScaleInputs are the deployed stack's, on the workload,
// with fns' memory sizes and perRender's requests (the benchmark's).
func DefaultScaleInputs(fns Functions, perRender Requests) ScaleInputs {
	return ScaleInputs{
		Workload: DefaultWorkload(), Topology: topology.Stack, Chain: observe.DefaultChain,
		Prices: ListPrices(), Functions: fns, PerRender: perRender, Seed: 1,
		AccountLimit: 1000, PartitionWCU: 1000, PartitionRCU: 3000, StatusShards: dynamo.StatusShards,
	}
}

// scaleInFlight are the scale table's rows.
var scaleInFlight = []int{1000, 10000, 100000}

// DefaultScaleSim is the renders in flight of the simulation behind the
// scale table in a plain `genjobs bench` (a minute and a half here);
// --scale-sim 100000 runs the table's largest row (about 20 minutes).
const DefaultScaleSim = 10000

// ScaleRow is the steady state of one number of renders in flight: the
// demand each service sees if nothing capped it, against the caps.
type ScaleRow struct {
	InFlight int
	// RendersPerSec is the completion rate at that many in flight
	// (Little's law: in flight over the mean time in flight).
	RendersPerSec float64
	// Lambda concurrency each function needs (full batches) and its
	// MaximumConcurrency; Account is their sum with the sweep's one.
	ObserveNeed, ObserveCap, SubmitNeed, SubmitCap, DeliverNeed, DeliverCap, Account, AccountLimit int
	// LongPolled is how many renders observe can hold long polls for at
	// once: MaximumConcurrency × batch size.
	LongPolled int
	// ObserveBatchNeed is the records each observe invocation must hold
	// for its MaximumConcurrency to cover every render in flight.
	ObserveBatchNeed int
	// SQSPerSec is SQS requests per second (sends, receives and deletes
	// of the event source mappings' batches).
	SQSPerSec float64
	// WCUPerSec and RCUPerSec are DynamoDB units per second, table and
	// status index; IndexWCUPerSec the index's share. Partitions is what
	// the table needs; IndexShardWCU is the busiest index key's load
	// against one partition's PartitionWCU.
	WCUPerSec, RCUPerSec, IndexWCUPerSec float64
	Partitions                           int
	IndexShardWCU                        float64
	// Genace: POSTs and GETs per second, and the long polls held at once.
	PostsPerSec, GetsPerSec float64
	LongPolls               int
	// DollarsPerHour is the demand priced (Lambda, SQS, DynamoDB).
	DollarsPerHour float64
	// Breaks says what gives first, "" when nothing does.
	Breaks string
}

// scaleMeans are per-render means over the workload's render times.
type scaleMeans struct {
	inFlight    float64 // mean time a render is in flight
	observeMsgs float64 // observation messages (one per chain)
	observeGETs float64 // observe's long polls
}

func (in ScaleInputs) means() scaleMeans {
	w := in.Workload
	w.Renders = max(w.Renders, 20000)
	times := w.Sample(in.Seed)
	var m scaleMeans
	for _, t := range times {
		m.inFlight += t.Seconds()
		// The floor's polls (FloorGETs); a chain hands over every Chain.
		m.observeGETs += FloorGETs(t, w.QueueFor)
		m.observeMsgs += math.Max(1, math.Ceil(t.Seconds()/in.Chain.Seconds()))
	}
	n := float64(len(times))
	m.inFlight /= n
	m.observeGETs /= n
	m.observeMsgs /= n
	return m
}

// ScaleTable computes a row per number of renders in flight.
func ScaleTable(in ScaleInputs, inFlight ...int) []ScaleRow {
	m := in.means()
	fn := func(name string) (topology.Function, topology.Mapping) {
		f, _ := in.Topology.Function(name)
		return f, f.Mappings[0]
	}
	_, obs := fn(topology.Observe)
	_, sub := fn(topology.Submit)
	_, del := fn(topology.Deliver)
	p := in.Prices
	rows := make([]ScaleRow, 0, len(inFlight))
	for _, n := range inFlight {
		lambda := float64(n) / m.inFlight
		r := ScaleRow{InFlight: n, RendersPerSec: lambda, AccountLimit: in.AccountLimit, LongPolls: n,
			ObserveCap: obs.MaxConcurrency, SubmitCap: sub.MaxConcurrency, DeliverCap: del.MaxConcurrency,
			LongPolled: obs.MaxConcurrency * obs.BatchSize}
		// Every render in flight is held by one chain; a batch's records
		// chain concurrently, so an invocation holds BatchSize of them.
		r.ObserveNeed = ceilDiv(n, obs.BatchSize)
		r.ObserveBatchNeed = ceilDiv(n, obs.MaxConcurrency)
		busy := func(d time.Duration, b int) int { return int(math.Ceil(lambda * d.Seconds() / float64(b))) }
		r.SubmitNeed = busy(in.Functions.SubmitBusy, sub.BatchSize)
		r.DeliverNeed = busy(in.Functions.DeliverBusy, del.BatchSize)
		r.Account = r.ObserveNeed + r.SubmitNeed + r.DeliverNeed + 1 // the sweep

		// Messages per render: the dispatch, each chain's, the delivery's.
		msgs := 2 + m.observeMsgs
		batches := 1/float64(sub.BatchSize) + m.observeMsgs/float64(obs.BatchSize) + 1/float64(del.BatchSize)
		r.SQSPerSec = lambda * (msgs + 2*batches)

		// Write units and reads per render, as counted on the handlers.
		r.IndexWCUPerSec = lambda * in.PerRender.IndexWRU
		r.WCUPerSec = lambda * in.PerRender.WRU
		r.RCUPerSec = lambda * in.PerRender.RRU
		r.Partitions = max(1, int(math.Ceil(max((r.WCUPerSec-r.IndexWCUPerSec)/in.PartitionWCU, r.RCUPerSec/in.PartitionRCU))))
		r.IndexShardWCU = r.IndexWCUPerSec / float64(in.StatusShards)

		r.PostsPerSec = lambda
		r.GetsPerSec = lambda * (m.observeGETs + 1) // delivery reads fresh URLs once

		hour := 3600.0
		gbs := float64(r.ObserveNeed)*float64(in.Functions.ObserveMB)/1024*hour +
			lambda/float64(sub.BatchSize)*in.Functions.SubmitBusy.Seconds()*float64(in.Functions.SubmitMB)/1024*hour +
			lambda/float64(del.BatchSize)*in.Functions.DeliverBusy.Seconds()*float64(in.Functions.DeliverMB)/1024*hour
		invocations := lambda * batches * hour
		r.DollarsPerHour = gbs*p.LambdaGBSecond + invocations*p.LambdaPerMillion/1e6 +
			r.SQSPerSec*hour*p.SQSPerMillion/1e6 + r.WCUPerSec*hour*p.DynamoWRUPerMillion/1e6 + r.RCUPerSec*hour*p.DynamoRRUPerMillion/1e6

		var breaks []string
		switch {
		case n > r.LongPolled:
			breaks = append(breaks, fmt.Sprintf("observe's MaximumConcurrency %d × batch %d long-polls %d renders at once; %d wait in the queue", obs.MaxConcurrency, obs.BatchSize, r.LongPolled, n-r.LongPolled))
		case r.ObserveBatchNeed > obs.BatchSize/2 && obs.BatchingWindow == 0:
			// Observation messages (a render's first, each chain's
			// handover) trickle in; with no batching window a poller
			// invokes with what is there. Batches fill only from a backlog.
			breaks = append(breaks, fmt.Sprintf("at the edge: observe's %d invocations must each hold %d of %d records, which with no batching window only a backlog gives (observation messages arrive %.1f/s)", obs.MaxConcurrency, r.ObserveBatchNeed, obs.BatchSize, lambda*m.observeMsgs))
		}
		if r.Account > in.AccountLimit {
			breaks = append(breaks, fmt.Sprintf("uncapped, the functions need %d concurrent executions, over the account's %d", r.Account, in.AccountLimit))
		}
		if r.DeliverNeed > r.DeliverCap {
			breaks = append(breaks, fmt.Sprintf("delivery needs %d invocations, capped at %d: %.0f deliveries/s at most", r.DeliverNeed, r.DeliverCap, float64(r.DeliverCap*del.BatchSize)/in.Functions.DeliverBusy.Seconds()))
		}
		if r.SubmitNeed > r.SubmitCap {
			breaks = append(breaks, fmt.Sprintf("submit needs %d invocations, capped at %d", r.SubmitNeed, r.SubmitCap))
		}
		if r.IndexShardWCU > in.PartitionWCU {
			breaks = append(breaks, fmt.Sprintf("each of the status index's %d shards takes %.0f WCU/s, over a partition's %.0f", in.StatusShards, r.IndexShardWCU, in.PartitionWCU))
		}
		r.Breaks = strings.Join(breaks, "; ")
		rows = append(rows, r)
	}
	return rows
}

func ceilDiv(a, b int) int { return (a + b - 1) / max(b, 1) }

// WriteScaleMarkdown writes the scale table and what its columns assume.
func WriteScaleMarkdown(w io.Writer, rows []ScaleRow) {
	fmt.Fprintln(w, "| in flight | renders/s | observe invocations (cap) | observe records/invocation needed | submit (cap) | deliver (cap) | account need / limit | SQS req/s | DynamoDB WCU/s (index) | RCU/s | partitions | index WCU/s per shard | Genace POST/s | GET/s | long polls held | $/hour | breaks first |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range rows {
		breaks := r.Breaks
		if breaks == "" {
			breaks = "nothing"
		}
		fmt.Fprintf(w, "| %d | %.1f | %d (%d) | %d | %d (%d) | %d (%d) | %d / %d | %.0f | %.0f (%.0f) | %.0f | %d | %.0f | %.1f | %.0f | %d | $%.2f | %s |\n",
			r.InFlight, r.RendersPerSec, r.ObserveNeed, r.ObserveCap, r.ObserveBatchNeed, r.SubmitNeed, r.SubmitCap, r.DeliverNeed, r.DeliverCap, r.Account, r.AccountLimit,
			r.SQSPerSec, r.WCUPerSec, r.IndexWCUPerSec, r.RCUPerSec, r.Partitions, r.IndexShardWCU, r.PostsPerSec, r.GetsPerSec, r.LongPolls, r.DollarsPerHour, cell(breaks))
	}
}

// ScaleSimConfig is the fault simulation of inFlight standard renders
// (DefaultWorkload's render times) dispatched at once, with no faults,
// counting the load (faultsim.Config.Scale).
func ScaleSimConfig(inFlight int, seed uint64) faultsim.Config {
	w := DefaultWorkload()
	w.Renders = inFlight
	return faultsim.Config{Seed: seed, Operations: inFlight, Renders: w.Sample(seed), Faults: faultsim.Faults{}, Scale: true,
		Interval: time.Nanosecond} // every creation falls on the first virtual second
}

// RunScaleSimulation runs ScaleSimConfig.
func RunScaleSimulation(ctx context.Context, inFlight int, seed uint64, progress io.Writer) (*faultsim.Result, error) {
	cfg := ScaleSimConfig(inFlight, seed)
	cfg.Progress = progress
	return faultsim.RunContext(ctx, cfg)
}
