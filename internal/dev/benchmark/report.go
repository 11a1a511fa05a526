package benchmark

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/dev/localpack"
	"github.com/genjobs/genjobs/internal/dev/pipeline"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/schedule"
)

// Targets the issue sets.
const (
	targetGETsFloor  = 1.05
	targetP99        = time.Second
	targetCostFloor  = 1.5
	targetOpsPerSec  = 500.0
	targetDiskRatio  = 0.8
	targetFirstInvok = 50 * time.Millisecond
)

// fmtDuration writes a policy duration compactly: "30 m", "1 h", "25 s".
func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d > time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%d m", d/time.Minute)
	}
	return fmt.Sprintf("%g s", d.Seconds())
}

// fmtLatency writes a latency with a unit that suits it.
func fmtLatency(d time.Duration) string {
	switch {
	case d == Never:
		return "never"
	case d < time.Second:
		return fmt.Sprintf("%.3f s", d.Seconds())
	case d < 2*time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < 2*time.Hour:
		return fmt.Sprintf("%.1f min", d.Minutes())
	}
	return fmt.Sprintf("%.1f h", d.Hours())
}

func fmtMS(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func fmtMiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func fmtDollars(x float64) string {
	if x < 0.01 {
		return fmt.Sprintf("$%.4f", x)
	}
	return fmt.Sprintf("$%.3f", x)
}

// per1000 is the dollars per 1,000 renders of per-render requests.
func (r *Results) per1000(req Requests) float64 { return 1000 * r.Prices.Dollars(req) }

// breakdown lists the non-zero services of a price, largest first.
func (r *Results) breakdown(req Requests) string {
	parts := r.Prices.Breakdown(req)
	names := make([]string, 0, len(parts))
	for k, v := range parts {
		if v > 0 {
			names = append(names, k)
		}
	}
	sort.Slice(names, func(i, j int) bool { return parts[names[i]] > parts[names[j]] })
	out := make([]string, len(names))
	for i, k := range names {
		out[i] = k + " " + fmtDollars(1000*parts[k])
	}
	return strings.Join(out, ", ")
}

type row struct{ section, figure, value, target, verdict string }

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func verdict(met bool, missed string) string {
	if met {
		return "**met**"
	}
	return "**missed** " + missed
}

// rows are the table's rows; the model's only once it has run.
func (r *Results) rows() []row {
	var rows []row
	if len(r.Designs) > 0 {
		rows = append(rows, r.modelRows()...)
	}
	rows = append(rows, r.measuredRows()...)
	return rows
}

// modelRows are sections 1 and 2: observation and cost, from the model.
func (r *Results) modelRows() []row {
	var rows []row
	add := func(section, figure, value, target, v string) {
		rows = append(rows, row{section, figure, value, target, v})
	}
	// 1. Observation.
	const s1 = "1 observation (model)"
	g, fl := r.Genjobs, r.Floor
	ratio := g.GETsPerRender / fl.GETsPerRender
	add(s1, "GETs per render — genjobs / the floor E[1 + ⌈(T − q)/30 s⌉]", fmt.Sprintf("%.2f / %.2f = %.3f×", g.GETsPerRender, fl.GETsPerRender, ratio),
		fmt.Sprintf("≤ %.2f×", targetGETsFloor), verdict(ratio <= targetGETsFloor, fmt.Sprintf("by %.3f×", ratio-targetGETsFloor)))
	add(s1, "GETs per render — "+r.NoOverlap.Strategy, fmt.Sprintf("%.2f (%.3f× the floor)", r.NoOverlap.GETsPerRender, r.NoOverlap.GETsPerRender/fl.GETsPerRender), "—", "reference")
	add(s1, "detection p50 / p99 / max — genjobs, default latencies", fmt.Sprintf("%s / %s / %s", fmtLatency(g.P50), fmtLatency(g.P99), fmtLatency(g.Max)), "—", "finding")
	if at, ok := r.AtTarget(); ok {
		add(s1, fmt.Sprintf("detection p99 — genjobs, %s round trip + %s SQS pickup (medians)", fmtMS(targetRTT), fmtMS(targetPickup)),
			fmt.Sprintf("%s (p50 %s, max %s; %.2f %% of renders with a poll held in vain)", fmtLatency(at.P99), fmtLatency(at.P50), fmtLatency(at.Max), 100*at.InVainShare),
			"< "+fmtLatency(targetP99), verdict(at.P99 < targetP99, "by "+fmtLatency(at.P99-targetP99)))
	}
	add(s1, "renders with a long poll held in vain — genjobs, default latencies",
		fmt.Sprintf("%.2f %% (%d of %d), each detected ≈ %s late", 100*g.InVainShare, int(math.Round(g.InVainShare*float64(len(g.Renders)))), len(g.Renders), fmtDuration(genace.MaxWait)), "—", "finding")
	add(s1, "observe invocations / record writes / SendMessage per render — genjobs",
		fmt.Sprintf("%.2f / %.2f / %.2f", g.InvocationsPerRender, g.WritesPerRender, g.SendsPerRender), "—", "count")

	// 2. AWS cost, design by design.
	const s2 = "2 AWS cost (model × counted requests)"
	floor := r.per1000(r.Designs[len(r.Designs)-1].Low)
	mine := r.per1000(r.Designs[0].Low)
	occ := r.Count.Measured()
	for i, d := range r.Designs {
		low, busy := r.per1000(d.Low), r.per1000(d.Busy)
		value := fmt.Sprintf("%s (%.2f× the floor, %.2f× genjobs); p99 %s; %s", fmtDollars(low), low/floor, low/mine, fmtLatency(d.Outcome.P99), r.breakdown(d.Low))
		if busy != low {
			value += fmt.Sprintf("; at the counted %.1f records per observe invocation %s", occ.Observe, fmtDollars(busy))
		}
		target, v := "—", "reference"
		if i == 0 {
			target = fmt.Sprintf("≤ %.1f× the floor (≤ %s)", targetCostFloor, fmtDollars(targetCostFloor*floor))
			v = verdict(low <= targetCostFloor*floor, fmt.Sprintf("by %s (%.2f×)", fmtDollars(low-targetCostFloor*floor), low/floor))
		}
		add(s2, "$ per 1,000 renders — "+d.Name, value, target, v)
	}
	var beaten []string
	for _, d := range r.Designs[1 : len(r.Designs)-1] {
		if r.per1000(d.Low) <= mine && d.Outcome.P99 <= g.P99+100*time.Millisecond {
			beaten = append(beaten, d.Name)
		}
	}
	add(s2, "genjobs below every rival at equal detection latency (p99 within 100 ms of genjobs')",
		fmt.Sprintf("cheapest rival %s", r.cheapestRival()), "below every rival", verdict(len(beaten) == 0, "by "+strings.Join(beaten, ", ")))
	gr := r.Designs[0].Low
	add(s2, "genjobs per render: SQS Send / Receive / Delete / ChangeVisibility",
		fmt.Sprintf("%.2f / %.2f / %.2f / %.2f", gr.SQSSend, gr.SQSReceive, gr.SQSDelete, gr.SQSChangeVisibility), "—", "count")
	add(s2, "genjobs per render: DynamoDB GetItem / PutItem / TransactWriteItems; RRU / WRU",
		fmt.Sprintf("%.2f / %.2f / %.2f; %.2f / %.2f", gr.DynamoGet, gr.DynamoPut, gr.DynamoTransact, gr.RRU, gr.WRU), "—", "count")
	add(s2, "genjobs per render: Lambda invocations; GB-s",
		fmt.Sprintf("%.2f; %.2f GB-s (observe held %s per render at %d MB)", gr.LambdaInvocations, gr.LambdaGBSeconds, fmtLatency(g.BusyPerRender), r.Functions.ObserveMB), "—", "count")

	return rows
}

// measuredRows are sections 3 and 4: this machine's measurements.
func (r *Results) measuredRows() []row {
	var rows []row
	add := func(section, figure, value, target, v string) {
		rows = append(rows, row{section, figure, value, target, v})
	}
	// 3. Throughput.
	const s3 = "3 throughput (this machine)"
	for i, t := range r.Throughput {
		figure := "end-to-end operations/s, instant renders — " + t.Name
		target, v := "—", "context"
		switch i {
		case 0:
			target = fmt.Sprintf("≥ %.0f ops/s", targetOpsPerSec)
		case 1:
			target = "— (the ratio's denominator)"
		}
		if t.Result == nil {
			add(s3, figure, "not measured ("+t.Skipped+")", target, "—")
			continue
		}
		value := fmt.Sprintf("%.0f ops/s (%.0f actions/s; CPU %s per action, %.2f CPUs busy; %d operations, best of %d%s)", t.OpsPerSecond(), t.ActionsPerSecond(),
			fmtMS(t.CPUPerAction()), t.Utilisation(), t.Result.Operations, t.Runs, t.spread())
		if i == 0 {
			ratio := t.OpsPerSecond() / targetOpsPerSec
			value = fmt.Sprintf("%s — %.2f× the target", value, ratio)
			v = verdict(ratio >= 1, fmt.Sprintf("by %.0f ops/s", targetOpsPerSec-t.OpsPerSecond()))
		}
		if i == 1 {
			v = "denominator"
		}
		add(s3, figure, value, target, v)
	}
	if len(r.Throughput) > 1 && r.Throughput[0].Result != nil && r.Throughput[1].Result != nil {
		disk, shm := r.Throughput[0].OpsPerSecond(), r.Throughput[1].OpsPerSecond()
		ratio := disk / shm
		add(s3, "disk / tmpfs end-to-end operations/s, the first two rows of this section (same run, alternating)",
			fmt.Sprintf("%.2f (%.0f / %.0f ops/s) — %.2f× the target", ratio, disk, shm, ratio/targetDiskRatio),
			fmt.Sprintf("≥ %.1f", targetDiskRatio), verdict(ratio >= targetDiskRatio, fmt.Sprintf("by %.2f", targetDiskRatio-ratio)))
	}

	const s3r = "3 observation (real time, this machine)"
	if l := r.Local; l == nil {
		add(s3r, "GETs per render — real-time genjobs local, defaults", "not measured ("+r.LocalSkipped+")", fmt.Sprintf("≤ %.2f× the floor", targetGETsFloor), "—")
	} else {
		ratio := l.GETsPerRender() / l.Floor()
		add(s3r, fmt.Sprintf("GETs per render — real-time genjobs local, defaults, %d renders of %s (queued %s), delivery's read included", l.Renders, fmtDuration(l.QueueFor+l.RunFor), fmtDuration(l.QueueFor)),
			fmt.Sprintf("%.2f / floor %.0f = %.3f× (%d of %d delivered, %s)", l.GETsPerRender(), l.Floor(), ratio, l.Delivered, l.Renders, l.Elapsed.Round(time.Second)),
			fmt.Sprintf("≤ %.2f×", targetGETsFloor), verdict(ratio <= targetGETsFloor && l.Delivered == l.Renders, fmt.Sprintf("by %.3f×", ratio-targetGETsFloor)))
	}

	// 4. Cold starts.
	const s4 = "4 cold start"
	if len(r.ColdStarts) == 0 {
		add(s4, "bootstrap sizes and first invokes", "not measured ("+r.ColdStartSkipped+")", "first invoke < 50 ms", "—")
	}
	for _, c := range r.ColdStarts {
		add(s4, "bootstrap size — "+c.Function+": linux/"+DeployArch+" (deploy); linux/"+runtime.GOARCH+" (run here)",
			fmt.Sprintf("%s; %s", fmtMiB(c.DeployBytes), fmtMiB(c.HostBytes)), "—", "count")
		if len(c.FirstInvokes) == 0 {
			if c.Skipped != "not invoked" {
				add(s4, "first invoke — "+c.Function, "not measured ("+c.Skipped+")", "< 50 ms", "—")
			}
			continue
		}
		if len(c.PeakRSS) > 0 {
			mb := r.Functions.memoryMB(c.Function)
			peak := slices.Max(c.PeakRSS)
			add(s4, "peak RSS after the first invoke (VmHWM, largest of the starts) — "+c.Function,
				fmt.Sprintf("%s of the template's %d MB", fmtMiB(peak), mb), "fits MemorySize",
				verdict(mb == 0 || peak < int64(mb)<<20, "MemorySize too small"))
		}
		lo, hi := slices.Min(c.FirstInvokes), slices.Max(c.FirstInvokes)
		m := c.Median()
		add(s4, fmt.Sprintf("first invoke, median of %d fresh starts — %s", len(c.FirstInvokes), c.Function),
			fmt.Sprintf("%s (%s–%s)", fmtMS(m), fmtMS(lo), fmtMS(hi)), "< 50 ms",
			verdict(m < targetFirstInvok, fmt.Sprintf("by %s", fmtMS(m-targetFirstInvok))))
	}
	return rows
}

// WriteMarkdown writes the results: the one table of figures, then the
// assumptions and findings behind it.
func (r *Results) WriteMarkdown(w io.Writer) {
	o := r.Options
	mode := ""
	if o.Quick {
		mode = " --quick"
	}
	fmt.Fprintf(w, "# genjobs benchmarks\n\n")
	fmt.Fprintf(w, "`genjobs bench --renders %d --seed %d%s` on %s/%s, %d CPUs, %s. The model rows (1, and the counts and dollars of 2) are deterministic for the seed; throughput (3) and cold starts (4) are measurements of this machine.\n\n",
		r.Workload.Renders, o.Seed, mode, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	if l := r.Load["throughput"]; l != "" {
		fmt.Fprintf(w, "1-minute load average before the throughput runs: %s", l)
		if c := r.Load["cold starts"]; c != "" {
			fmt.Fprintf(w, "; before the cold starts: %s", c)
		}
		fmt.Fprintf(w, " (on %d CPUs; anything above ~1 is other work competing with the measurement).\n\n", runtime.NumCPU())
	}
	fmt.Fprintln(w, "| section | figure | value | target | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, rw := range r.rows() {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", cell(rw.section), cell(rw.figure), cell(rw.value), cell(rw.target), cell(rw.verdict))
	}
	fmt.Fprintln(w)
	r.writeScale(w)
	r.writeNotes(w)
}

// writeScale writes the scale table and the simulation behind it.
func (r *Results) writeScale(w io.Writer) {
	if len(r.Scale) == 0 {
		return
	}
	fmt.Fprintln(w, "### Scale: renders in flight, on paper")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Steady state by Little's law over the model's workload (mean time in flight; renders/s = in flight ÷ that), the stack's batch sizes and MaximumConcurrency from the topology held against template.yaml, genjobs' write and read units per render as counted on the handlers, the default account limit of 1,000 concurrent executions, and DynamoDB's 1,000 WCU/s and 3,000 RCU/s per partition (key). “Needed” assumes full batches of 10: at low load batches are smaller and observe needs more invocations per render. Dollars price the demand as if nothing capped it.")
	fmt.Fprintln(w)
	WriteScaleMarkdown(w, r.Scale)
	fmt.Fprintln(w)
	if s := r.ScaleSim; s != nil {
		fmt.Fprintf(w, "Backed by the virtual-time simulation (`genjobs soak --scale`: the real submit, observe and deliver handlers, embedded queue and event source mappings, bbolt store and the Genace simulator) with %d standard renders dispatched in the first virtual second, no faults; %d invariant violations:\n\n```\n", s.Operations, len(s.Violations))
		s.Scale.WriteScale(w, s.Operations)
		fmt.Fprintln(w, "```")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Measured there: batches fill under load, writes per render by writer, one POST per render, every render delivered and when, renders under observation at once. By construction, so not backing the table: handlers take no virtual time (concurrent invocations are derived from renders under observation and the batch, not counted), the simulator has no rate limit and the store no partitions (nothing pushes back), and the simulation observes with its own short policy instead of 30 s chains, so its GETs and writes per render are not the deployed ones (the model's are).")
		fmt.Fprintln(w)
	}
}

// cheapestRival names the cheapest design besides genjobs and the floor,
// with its cost and p99.
func (r *Results) cheapestRival() string {
	best := -1
	for i := 1; i < len(r.Designs)-1; i++ {
		if best < 0 || r.per1000(r.Designs[i].Low) < r.per1000(r.Designs[best].Low) {
			best = i
		}
	}
	if best < 0 {
		return "none"
	}
	d := r.Designs[best]
	return fmt.Sprintf("%s at %s, p99 %s", d.Name, fmtDollars(r.per1000(d.Low)), fmtLatency(d.Outcome.P99))
}

func (r *Results) writeSensitivity(w io.Writer) {
	fmt.Fprintln(w, "### Sensitivity: genjobs' detection against round trip × SQS pickup (medians; the other latencies at their defaults)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| round trip | SQS pickup | p50 | p99 | max | renders with a poll held in vain | GETs per render |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, s := range r.Sensitivity {
		o := s.Outcome
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %.2f %% | %.2f |\n", fmtMS(s.RoundTrip), fmtMS(s.Pickup), fmtLatency(o.P50), fmtLatency(o.P99), fmtLatency(o.Max), 100*o.InVainShare, o.GETsPerRender)
	}
	fmt.Fprintln(w)
}

func (r *Results) writeNotes(w io.Writer) {
	wl, lat, p := r.Workload, r.Latencies, schedule.DefaultPolicies().Default
	times := slices.Clone(wl.Sample(r.Options.Seed))
	slices.Sort(times)
	r.writeSensitivity(w)
	fmt.Fprintf(w, "![observation](%s) ![cost against latency](%s) ![GETs against the floor](%s)\n\n", PlotFile, CostLatencyFile, GETsFloorFile)
	fmt.Fprintln(w, "## How the figures were made")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- **Workload.** %d renders, log-normal render times (acceptance → remote finish), median %s, σ = ln(10)/1.645 = %.4f so that 5 %% exceed 10 min (this sample: median %s, p95 %s, longest %s). Each job is queued for its first %s (clipped to its render time): that change of state ends a long poll early.\n",
		wl.Renders, fmtLatency(wl.Median), wl.Sigma, fmtLatency(Percentile(times, 0.5)), fmtLatency(Percentile(times, 0.95)), fmtLatency(times[len(times)-1]), fmtLatency(wl.QueueFor))
	fmt.Fprintf(w, "- **Latencies**, each drawn per event from a seeded source (seed %d): round trip Lambda ↔ Genace %s; SQS pickup (SendMessage or a delay running out → the handler has the message) %s; Lambda start %s; DynamoDB request %s. Sources: %s.\n",
		r.Options.Seed, lat.RoundTrip, lat.Pickup, lat.Start, lat.Dynamo, strings.Join(latencySources, "; "))
	fmt.Fprintf(w, "- **Genace.** A GET with wait=N (≤ %s) answers at min(arrival + N, the first change after arrival); a job already finished when the GET arrives never changes again, so the GET is held for all N (\"in vain\").\n", fmtDuration(genace.MaxWait))
	fmt.Fprintf(w, "- **genjobs** plays the observe handler: the first chain starts after the submit's write, an SQS pickup, a Lambda start and the record's GetItem; within a chain long polls of %s are sent %s before the previous one's window ends (every GET counted, an overlapped poll that answers the same change twice included); a changed answer is written at once and the next poll leaves at once; a poll is sent only while it fits the chain (%s, at most %d polls) and the policy says the next look is due at once (while the job is younger than Immediate = %s; after that `schedule.Observation` backs off from %s to %s and the look is a plain read, as observe's `window()` decides). A chain hands over with a write, a SendMessage, an SQS pickup, a Lambda start and a GetItem before the next chain's first poll: a render finishing in that gap is seen by a poll held in vain, ≈ %s late. Detection is the finish → the terminal record written (half a round trip and a DynamoDB write when a poll is outstanding). Without overlap (reference row) the next poll leaves when the answer is back.\n",
		fmtDuration(genace.MaxWait), fmtDuration(observe.DefaultOverlap), fmtDuration(observe.DefaultChain), 1+int(observe.DefaultChain/genace.MaxWait), fmtDuration(p.Immediate), fmtDuration(p.Base), fmtDuration(p.Cap), fmtDuration(genace.MaxWait))
	fmt.Fprintf(w, "- **The floor.** GETs: E[1 + ⌈(T − q)/30 s⌉] — a long poll outstanding at every moment, each held its full 30 s, the queued→running change ending one early; detection half a round trip and a write. Cost (per render, one render per invocation, list prices): three hand-offs by message (dispatch → submit → observe → deliver: SendMessage + ReceiveMessage + DeleteMessage each, 9 SQS requests); one record write of ≤ 1 KB with no index per phase change (accepted, terminal, delivered: 3 WRU); no reads (each message carries what its handler needs); one invocation per function plus one per further 15 min a long poll is held (Lambda's longest run); Lambda GB-s = 128 MB × (render time + %s submit + %s delivery): a long poll held from acceptance to finish. It ignores the application's own record and dispatch, S3 and Genace's POST/GETs (not AWS charges).\n",
		fmtMS(r.Functions.SubmitBusy), fmtMS(r.Functions.DeliverBusy))
	fmt.Fprintf(w, "- **Rivals, same renders, same latencies.** Step Functions Standard: Submit task → loop {Task: the observe Lambda → Choice} → Deliver task → Succeed, 3 + 2 transitions per loop round; the Lambda runs one chain (≤ %s) per task, or one 30 s poll per task; between tasks no write, no message, no GetItem and no transition latency (favours it). Step Functions Express: the same loop, one chain per execution (a 5 min execution cannot hold two 4 min chains), so each further chain is a restart, counted as a request (what restarts it is not priced: favours it); Express duration in 100 ms units at 64 MB, plus the Lambda's own time. Fixed pollers through genjobs' queues: a message delayed by the interval per poll, one invocation, GetItem, GET (no wait), record write and SendMessage each. The equal-latency poller tries intervals of %s.\n",
		fmtDuration(observe.DefaultChain), fmtIntervals())
	fmt.Fprintln(w, "- **By construction** (the model assumes it, so the run cannot contradict it): detection of a render finishing while a poll is outstanding is exactly half a round trip plus a write; the floor's detection is that by definition; Genace answers exactly at a change (no server-side delay); nothing fails (no retries, throttling, duplicate deliveries, lost leases); the policy's jitter and every latency are seeded. Measured, not assumed: GETs, polls held in vain, hand-off gaps and detection percentiles follow from the sampled latencies; requests per action and batch occupancy come from the counting run on the real handlers.")
	r.writeCostNotes(w)
	r.writeThroughputNotes(w)
	fmt.Fprintln(w, "- **Cold start.** Each function built as the Makefile builds it (linux, CGO_ENABLED=0, `-tags lambda.norpc -trimpath -ldflags='-s -w'`), for arm64 (deploy size) and the host architecture (run here). Each start is a fresh `aws-lambda-rie` with a fresh bootstrap and the environment template.yaml gives it (internal/dev/samlocal; dummy credentials, every endpoint on a closed port but Secrets Manager (moto), from whose secret init reads the Genace key as deployed: `coldstart.Load` otherwise only builds clients). The first invoke sends `{\"Records\":[]}` and times the answer: process start, Go runtime, init, `lambda.Start` and an empty batch. sweep is scheduled, not SQS-fed, and its handler queries DynamoDB, so only its size is given.")
}

func fmtIntervals() string {
	s := make([]string, len(matchIntervals))
	for i, d := range matchIntervals {
		s[i] = fmtDuration(d)
	}
	return strings.Join(s, ", ")
}

func (r *Results) writeCostNotes(w io.Writer) {
	pr, pc := r.Count, r.Prices
	occ := pr.Measured()
	sub, obs, del := pr.PerAction(FnSubmit), pr.PerAction(FnObserve), pr.PerAction(FnDeliver)
	fmt.Fprintf(w, "- **AWS requests.** Counted on the real submit, observe and deliver handlers (the pipeline harness: embedded queue, event source mapping, bbolt store, simulator, each store/queue/artifact call counted as the DynamoDB/SQS/S3 adapters would issue it) over %d renders queued %s then running %s: per submit %.0f GetItem, %.0f PutItem, %.0f SendMessage, %.1f WRU; per observe write %.2f WRU (the item weighs %.0f bytes), per GetItem %.0f RRU, %.2f ChangeMessageVisibility per message; per delivery %.0f GetItem, %.0f PutItem, %.0f S3 HeadObject + %.0f PutObject (S3 not priced: the same for every design). The observe function's invocations, writes and messages per render come from the model, each priced at those measured units. Records per invocation: priced at 1 (low traffic, the worst case) and at the counting run's measured %.1f / %.1f / %.1f for submit / observe / deliver (an observe invocation lasts about one chain whichever records share it, so its GB-s are shared too).\n",
		pr.Operations, fmtLatency(countQueueFor), fmtLatency(countRunFor), sub.DynamoGet, sub.DynamoPut, sub.SQSSend, sub.WRU,
		unit(obs.WRU, obs.DynamoPut), obs.ItemBytes/math.Max(obs.DynamoPut, 1), unit(obs.RRU, obs.DynamoGet), obs.SQSChangeVisibility,
		del.DynamoGet, del.DynamoPut, del.S3Head, del.S3Put, occ.Submit, occ.Observe, occ.Deliver)
	g := r.Designs[0].Low
	lambda := r.Prices.Breakdown(g)["Lambda"] / r.Prices.Dollars(g)
	fmt.Fprintf(w, "- **Where genjobs' dollars go.** %.0f %% of genjobs' cost is Lambda, nearly all of it observe holding long polls (%.2f GB-s per render at %d MB, template.yaml; the floor holds them at 128 MB): Lambda bills the wait.\n",
		100*lambda, g.LambdaGBSeconds, r.Functions.ObserveMB)
	fmt.Fprintf(w, "- **Prices** (%s, as of %s; free tiers ignored): SQS $%.2f per million requests; DynamoDB on-demand $%.3f per million WRU and $%.3f per million RRU (after AWS's November 2024 cut); Lambda arm64 $%.10f per GB-s and $%.2f per million requests; Step Functions Standard $%.3f per 1,000 state transitions; Step Functions Express $%.2f per million requests and $%.8f per GB-s ($0.06 per GB-hour, 100 ms and 64 MB units) — \"AWS Step Functions Pricing\", https://aws.amazon.com/step-functions/pricing/; Express runs at most 5 minutes — AWS Compute Blog, \"Building cost-effective AWS Step Functions workflows\", https://aws.amazon.com/blogs/compute/building-cost-effective-aws-step-functions-workflows/; EventBridge Scheduler $%.2f per million invocations.\n",
		pc.Region, pc.AsOf, pc.SQSPerMillion, pc.DynamoWRUPerMillion, pc.DynamoRRUPerMillion, pc.LambdaGBSecond, pc.LambdaPerMillion, pc.SFNPerThousand, pc.ExpressPerMillion, pc.ExpressGBSecond, pc.SchedulerPerMillion)
}

// templatePollers lists each pipeline function's MaximumConcurrency, the
// harness's pollers.
func templatePollers() string {
	var out []string
	for _, name := range []string{FnSubmit, FnObserve, FnDeliver} {
		if f, ok := topology.Stack.Function(name); ok && len(f.Mappings) > 0 {
			out = append(out, fmt.Sprintf("%s %d", name, f.Mappings[0].MaxConcurrency))
		}
	}
	return strings.Join(out, ", ")
}

func (r *Results) writeThroughputNotes(w io.Writer) {
	fmt.Fprintf(w, "- **Throughput.** The same harness with instant renders (simulator QueueFor = RunFor = 0), the template's concurrency (pollers: %s invocations; batch size 10; BATCH_CONCURRENCY 10) unless said otherwise, all dispatches sent at once, timed from the first dispatch to the last delivery; the fastest of the runs the table counts is kept. The policy reads at once (no long poll): with renders that finish on acceptance there is nothing to wait for. CPU is `getrusage` user+system of the whole process — simulator, queue and pollers included — per handler action (3 per operation). The store is opened with bolt.Open, as `genjobs local` opens it: writes that arrive while a commit is under way share the next transaction (group commit), and every commit is fsync'd before its writes return. The artifact store (localpack.Dir, as `genjobs local` opens it) streams each output into one pack file and commits the Puts in groups, at most one commit per %s: the pack fsync'd, then the group's index lines written and fsync'd; no file or folder per output. GOMAXPROCS is its default plus %d (pipeline.RaiseProcs, as `genjobs local` sets it) unless a row says otherwise: a thread in fsync keeps its P until sysmon takes it back (after one or two sysmon ticks of 20 µs to 10 ms, and not while another P is idle or spinning, for up to 10 ms), and with two fsync leaders on 2 CPUs that leaves CPU idle. \"Without fsync\" is measured twice: bbolt's NoSync (bolt.OpenWith) on disk, where the artifact store still fsyncs, and the whole state on tmpfs (%s), where no fsync costs anything. The disk and tmpfs rows run alternately in the same benchmark run, so the ratio compares like with like on a shared machine.", templatePollers(), fmtMS(localpack.CommitSpacing), pipeline.ExtraProcs, tmpfs)
	var disk, shm, noSync, disk2, shm2, realRun, unraised *ThroughputRun
	for i := range r.Throughput {
		t := &r.Throughput[i]
		if t.Result == nil {
			continue
		}
		switch i {
		case 0:
			disk = t
		case 1:
			shm = t
		case 2:
			noSync = t
		case 3:
			disk2 = t
		case 4:
			shm2 = t
		case 5:
			realRun = t
		case 6:
			unraised = t
		}
	}
	writes := r.Count.PerAction(FnSubmit).DynamoPut + r.Count.PerAction(FnObserve).DynamoPut + r.Count.PerAction(FnDeliver).DynamoPut
	if disk != nil {
		fmt.Fprintf(w, " On disk an operation makes %.0f store writes; bbolt runs one write transaction at a time, and group commit lets the writes of concurrent handlers share its fsync: %s per operation at %.0f ops/s with %.2f CPUs busy", writes, fmtMS(time.Duration(float64(time.Second)/disk.OpsPerSecond())), disk.OpsPerSecond(), disk.Utilisation())
		if disk2 != nil {
			fmt.Fprintf(w, ", and twice the pollers reach %.0f ops/s", disk2.OpsPerSecond())
		}
		if noSync != nil {
			fmt.Fprintf(w, "; with bbolt's NoSync %.0f ops/s", noSync.OpsPerSecond())
		}
		if unraised != nil {
			fmt.Fprintf(w, "; with GOMAXPROCS left at its default %.0f ops/s (%.2f CPUs busy)", unraised.OpsPerSecond(), unraised.Utilisation())
		}
		fmt.Fprint(w, ".")
	}
	if shm != nil {
		fmt.Fprintf(w, " On tmpfs the process kept %.2f of %d CPUs busy at %s of CPU per action (handlers, simulator and queue together): %.0f ops/s, where that CPU cost would allow ≈ %.0f ops/s with all %d CPUs busy", shm.Utilisation(), runtime.NumCPU(),
			fmtMS(shm.CPUPerAction()), shm.OpsPerSecond(), float64(runtime.NumCPU())/(3*shm.CPUPerAction().Seconds()), runtime.NumCPU())
		if shm2 != nil {
			fmt.Fprintf(w, "; twice the pollers: %.0f ops/s", shm2.OpsPerSecond())
		}
		fmt.Fprint(w, ". Both figures are the whole process's CPU: on 2 CPUs shared with other work, a busy machine lowers every row; the load average above says how busy it was. In AWS each function's invocations run on their own CPUs up to its MaximumConcurrency and DynamoDB commits in parallel, so neither local cap carries over; the local figure is a floor for the handlers, not a forecast.")
	}
	if realRun != nil {
		if realRun.OpsPerSecond() < 20 {
			fmt.Fprintf(w, " With the default policy (last row) instant renders are slow for another reason: the 202 already reports the job finished, observe's first look still long-polls (its snapshot is fresh), and Genace holds a finished job's long poll for the whole %s — %.1f ops/s.", fmtDuration(schedule.DefaultPolicies().Default.LongPoll), realRun.OpsPerSecond())
		} else {
			fmt.Fprintf(w, " With the default policy (last row, %d operations, ramp-up included) instant renders hold no long poll: observe reads at once when the saved snapshot (here the 202's) already shows success — %.0f ops/s.", realRun.Result.Operations, realRun.OpsPerSecond())
		}
	}
	fmt.Fprintln(w)
}

// spread is "; runs lo–hi ops/s" when there was more than one run.
func (t ThroughputRun) spread() string {
	if len(t.Rates) < 2 {
		return ""
	}
	return fmt.Sprintf("; runs %.0f–%.0f ops/s", slices.Min(t.Rates), slices.Max(t.Rates))
}
