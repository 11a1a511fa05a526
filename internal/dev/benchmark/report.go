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

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/schedule"
)

// Targets the issue sets.
const (
	targetGETsRatio  = 0.25
	targetP50        = time.Second
	targetP99        = 5 * time.Second
	targetCostRatio  = 1.0 / 3
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

// detectionVerdict judges p50 and p99 of a genjobs outcome.
func (r *Results) detectionVerdict(o Outcome) string {
	var miss []string
	if o.P50 >= targetP50 {
		miss = append(miss, fmt.Sprintf("p50 by %s", fmtLatency(o.P50-targetP50)))
	}
	if o.P99 >= targetP99 {
		miss = append(miss, fmt.Sprintf("p99 by %s (%.0f× the target)", fmtLatency(o.P99-targetP99), float64(o.P99)/float64(targetP99)))
	}
	if len(miss) == 0 {
		return verdict(true, "")
	}
	return verdict(false, strings.Join(miss, ", "))
}

func (r *Results) getsVerdict(o Outcome) (string, string) {
	limit := targetGETsRatio * r.Fixed.GETsPerRender
	target := fmt.Sprintf("≤ ¼ of the fixed poller's (≤ %.2f)", limit)
	if o.GETsPerRender <= limit {
		return target, verdict(true, "")
	}
	return target, verdict(false, fmt.Sprintf("by %.2f GETs per render", o.GETsPerRender-limit))
}

func (r *Results) rows() []row {
	var rows []row
	add := func(section, figure, value, target, v string) {
		rows = append(rows, row{section, figure, value, target, v})
	}
	// 1. Observation efficiency.
	const s1 = "1 observation (model)"
	genjobs := append([]Outcome{r.Real}, r.Variants...)
	for i, o := range genjobs {
		name := o.Strategy
		if i > 0 {
			name += " (variant)"
		}
		t, v := r.getsVerdict(o)
		add(s1, "GETs per render — "+name, fmt.Sprintf("%.2f (%.3f× the fixed poller's)", o.GETsPerRender, o.GETsPerRender/r.Fixed.GETsPerRender), t, v)
		add(s1, "detection p50 / p99 / max — "+name, fmt.Sprintf("%s / %s / %s", fmtLatency(o.P50), fmtLatency(o.P99), fmtLatency(o.Max)),
			"p50 < 1 s, p99 < 5 s", r.detectionVerdict(o))
	}
	for _, o := range []Outcome{r.Fixed, r.Backoff} {
		add(s1, "GETs per render — "+o.Strategy, fmt.Sprintf("%.2f", o.GETsPerRender), "—", "reference")
		add(s1, "detection p50 / p99 / max — "+o.Strategy, fmt.Sprintf("%s / %s / %s", fmtLatency(o.P50), fmtLatency(o.P99), fmtLatency(o.Max)), "—", "reference")
	}
	add(s1, "long polls held in vain (job finished between two looks) — genjobs, default policy",
		fmt.Sprintf("%d of %d renders (%.2f %%), each detected ≈ %s late", int(math.Round(r.Real.InVainPerRender*float64(len(r.Real.Renders)))),
			len(r.Real.Renders), 100*r.Real.InVainPerRender, fmtDuration(schedule.DefaultPolicies().Default.LongPoll)), "—", "finding")
	add(s1, "sensitivity: "+r.Batching.Strategy,
		fmt.Sprintf("GETs %.2f; p50 / p99 %s / %s; in vain %.2f %% of renders", r.Batching.GETsPerRender, fmtLatency(r.Batching.P50),
			fmtLatency(r.Batching.P99), 100*r.Batching.InVainPerRender), "—", "finding")
	add(s1, "budget check: "+r.Unbounded.Strategy,
		fmt.Sprintf("GETs %.2f; %d renders stalled (MaxObservations %d × %s long polls ≈ %s)", r.Unbounded.GETsPerRender, r.Unbounded.Stalled,
			operation.DefaultBudgets.MaxObservations, fmtDuration(schedule.DefaultPolicies().Default.LongPoll),
			fmtLatency(time.Duration(operation.DefaultBudgets.MaxObservations)*schedule.DefaultPolicies().Default.LongPoll)), "—", "finding")

	// 2. AWS requests and dollars.
	const s2 = "2 AWS cost"
	g := r.PerRender[r.Real.Strategy]
	add(s2, "SQS requests per render — genjobs, default policy: Send / Receive / Delete / ChangeVisibility",
		fmt.Sprintf("%.2f / %.2f / %.2f / %.2f", g.SQSSend, g.SQSReceive, g.SQSDelete, g.SQSChangeVisibility), "—", "count")
	add(s2, "DynamoDB per render — genjobs, default policy: GetItem / PutItem / TransactWriteItems; RRU / WRU",
		fmt.Sprintf("%.2f / %.2f / %.2f; %.2f / %.2f", g.DynamoGet, g.DynamoPut, g.DynamoTransact, g.RRU, g.WRU), "—", "count")
	add(s2, "EventBridge Scheduler schedules per render — genjobs, default policy", fmt.Sprintf("%.4f", g.Schedules), "—", "count")
	add(s2, "Lambda per render — genjobs, default policy: invocations; GB-s (long polls charged)",
		fmt.Sprintf("%.2f; %.2f GB-s (observe held %s per render)", g.LambdaInvocations, g.LambdaGBSeconds, fmtLatency(r.Real.BusyPerRender)), "—", "count")
	sf := r.StepFunctions
	add(s2, "Step Functions poller per render: state transitions; Lambda invocations; GB-s",
		fmt.Sprintf("%.1f; %.2f; %.3f GB-s", sf.SFNTransitions, sf.LambdaInvocations, sf.LambdaGBSeconds), "—", "count")
	sfn := r.per1000(sf)
	limit := targetCostRatio * sfn
	for _, o := range genjobs {
		req := r.PerRender[o.Strategy]
		c := r.per1000(req)
		add(s2, "$ per 1,000 renders — "+o.Strategy, fmt.Sprintf("%s (%.3f× Step Functions; %s)", fmtDollars(c), c/sfn, r.breakdown(req)),
			fmt.Sprintf("≤ ⅓ of Step Functions (≤ %s)", fmtDollars(limit)), verdict(c <= limit, fmt.Sprintf("by %s", fmtDollars(c-limit))))
	}
	add(s2, "$ per 1,000 renders — Step Functions Standard poller (Wait 5 s loop)", fmt.Sprintf("%s (%s)", fmtDollars(sfn), r.breakdown(sf)), "—", "reference")
	for _, o := range []Outcome{r.Fixed, r.Backoff} {
		req := r.PerRender[o.Strategy]
		add(s2, "$ per 1,000 renders — "+o.Strategy+" through genjobs' queues", fmt.Sprintf("%s (%s)", fmtDollars(r.per1000(req)), r.breakdown(req)), "—", "reference")
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
		add(s3, "disk / tmpfs end-to-end operations/s, the two rows above (same run, alternating)",
			fmt.Sprintf("%.2f (%.0f / %.0f ops/s) — %.2f× the target", ratio, disk, shm, ratio/targetDiskRatio),
			fmt.Sprintf("≥ %.1f", targetDiskRatio), verdict(ratio >= targetDiskRatio, fmt.Sprintf("by %.2f", targetDiskRatio-ratio)))
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
	r.writeNotes(w)
}

func (r *Results) writeNotes(w io.Writer) {
	wl, ov, p := r.Workload, r.Overheads, schedule.DefaultPolicies().Default
	times := slices.Clone(wl.Sample(r.Options.Seed))
	slices.Sort(times)
	over := func(d time.Duration) float64 {
		i, _ := slices.BinarySearch(times, d)
		return 100 * float64(len(times)-i) / float64(len(times))
	}
	fmt.Fprintf(w, "![observation](%s)\n\n", PlotFile)
	fmt.Fprintln(w, "## How the figures were made")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- **Workload.** %d renders, log-normal render times (acceptance → remote finish), median %s, σ = ln(10)/1.645 = %.4f so that 5 %% exceed 10 min. This sample: median %s, p95 %s, %.2f %% over 15 min, %.2f %% over 30 min, %.2f %% over 1 h, longest %s. Each job is queued for its first %s (clipped to its render time): that state change ends a long poll early, as in the simulator.\n",
		wl.Renders, fmtLatency(wl.Median), wl.Sigma, fmtLatency(Percentile(times, 0.5)), fmtLatency(Percentile(times, 0.95)),
		over(15*time.Minute), over(30*time.Minute), over(time.Hour), fmtLatency(times[len(times)-1]), fmtLatency(wl.QueueFor))
	fmt.Fprintf(w, "- **Event model** (one for all strategies). An observation starts %s (SQS delivery) after its message is sent or its delay runs out; its GET reaches Genace %s later (half the %s Lambda + GET round trip) and its snapshot is saved %s after the answer — the detection time for a terminal snapshot, and when the next message leaves. A GET with `wait` answers at min(wait, next state change); a job already finished when the GET arrives never changes again, so Genace (and the simulator) hold it for the whole wait. GETs per render count observations only (delivery's one GET for fresh URLs is the same for every strategy).\n",
		fmtMS(ov.SQSLatency), fmtMS(ov.RoundTrip/2), fmtMS(ov.RoundTrip), fmtMS(ov.RoundTrip/2))
	fmt.Fprintf(w, "- **Strategies.** genjobs: the real `schedule.Observation` over `schedule.DefaultPolicies()` (long poll %s back to back while the job is younger than Immediate = %s, then %s×%g→%s ±%.0f %%, jitter seeded), observe's `window()` rule (a long poll only when the previous snapshot is at most %s old, whole seconds), the first observation right after acceptance, and observe's budgets (MaxObservations %d, Polling %s). Fixed: a GET %s after acceptance and every %s after each answer, no long poll. Backoff: 1 s, then doubling to a 60 s cap, no long poll.\n",
		fmtDuration(p.LongPoll), fmtDuration(p.Immediate), fmtDuration(p.Base), p.Multiplier, fmtDuration(p.Cap), 100*p.Jitter, fmtDuration(p.LongPoll),
		operation.DefaultBudgets.MaxObservations, fmtDuration(operation.DefaultBudgets.Polling), fmtDuration(5*time.Second), fmtDuration(5*time.Second))
	fmt.Fprintf(w, "- **Back-to-back window and p99.** A render is detected at the long poll's answer (%s) while it is younger than Immediate; past it, it is observed with backed-off delays (%s doubling to %s) and plain reads, so its detection waits for the next look (minutes). p99 therefore stays at the long poll's answer only while fewer than 1 %% of renders outlast Immediate:",
		fmtLatency(r.Real.P50), fmtDuration(p.Base), fmtDuration(p.Cap))
	genjobs := append([]Outcome{r.Real}, r.Variants...)
	imms := append([]time.Duration{p.Immediate}, r.VariantImmediates...)
	for i, o := range genjobs {
		sep := ";"
		if i == len(genjobs)-1 {
			sep = "."
		}
		def := ""
		if i == 0 {
			def = " (the default)"
		}
		fmt.Fprintf(w, " Immediate %s%s: %.2f %% outlast it, p99 %s, %.2f GETs per render, %s per 1,000 renders%s", fmtDuration(imms[i]), def, over(imms[i]),
			fmtLatency(o.P99), o.GETsPerRender, fmtDollars(r.per1000(r.PerRender[o.Strategy])), sep)
	}
	if r.Real.P99 < targetP99 && r.Real.P50 < targetP50 {
		fmt.Fprintf(w, " The default meets both detection targets; its GETs stay %.3f× the fixed poller's.", r.Real.GETsPerRender/r.Fixed.GETsPerRender)
	} else {
		fmt.Fprint(w, " The default misses the detection targets.")
		for i, o := range r.Variants {
			if o.P99 < targetP99 && o.P50 < targetP50 && o.GETsPerRender <= targetGETsRatio*r.Fixed.GETsPerRender {
				d := strings.ReplaceAll(fmtDuration(r.VariantImmediates[i]), " ", "")
				fmt.Fprintf(w, " Recommendation: Immediate %s, which meets them (`OBSERVE_POLICIES={\"default\":{\"immediate\":\"%s\"}}` sets it without a release).", fmtDuration(r.VariantImmediates[i]), d)
				break
			}
		}
	}
	fmt.Fprintf(w, " Watching back to back for the whole polling budget (%s) is no better: %d renders hit MaxObservations (%d observations ≈ %s of %s long polls) and are parked for review.\n",
		fmtDuration(operation.DefaultBudgets.Polling), r.Unbounded.Stalled, operation.DefaultBudgets.MaxObservations,
		fmtLatency(time.Duration(operation.DefaultBudgets.MaxObservations)*p.LongPoll), fmtDuration(p.LongPoll))
	fmt.Fprintf(w, "- **Long polls held in vain.** Genace holds a long poll until the job changes from what it is when the GET arrives, so a render that finishes in the gap between two looks (~%s: the answer's way back, SQS, the next GET's way out) makes the next long poll wait out its whole %s: %.2f %% of renders here. A batching window on the observe queue's event source mapping widens that gap: with %s, a lone message waits for it before the invocation and %.2f %% of renders are caught, which sets p99 = %s (instead of %s). The observe mapping needs MaximumBatchingWindowInSeconds 0. (observe also reads at once when the saved snapshot already shows success; in the model no look follows a terminal snapshot.)\n",
		fmtMS(ov.SQSLatency+ov.RoundTrip), fmtDuration(p.LongPoll), 100*r.Real.InVainPerRender, fmtDuration(batchingWindow), 100*r.Batching.InVainPerRender,
		fmtLatency(r.Batching.P99), fmtLatency(r.Real.P99))
	r.writeCostNotes(w)
	r.writeThroughputNotes(w)
	fmt.Fprintln(w, "- **Cold start.** Each function built as the Makefile builds it (linux, CGO_ENABLED=0, `-tags lambda.norpc -trimpath -ldflags='-s -w'`), for arm64 (deploy size) and the host architecture (run here). Each start is a fresh `aws-lambda-rie` with a fresh bootstrap and the environment template.yaml gives it (internal/dev/samlocal; dummy credentials, every endpoint on a closed port but a local secret source, from which init reads the Genace key as deployed: `coldstart.Load` otherwise only builds clients). The first invoke sends `{\"Records\":[]}` and times the answer: process start, Go runtime, init, `lambda.Start` and an empty batch. sweep is scheduled, not SQS-fed, and its handler queries DynamoDB, so only its size is given.")
}

func (r *Results) writeCostNotes(w io.Writer) {
	pr, pc := r.Count, r.Prices
	batch := func(fn string) float64 {
		f := pr.Functions[fn]
		if f.Batches == 0 {
			return 0
		}
		return float64(f.Actions) / float64(f.Batches)
	}
	sub, obs, del := pr.PerAction(FnSubmit), pr.PerAction(FnObserve), pr.PerAction(FnDeliver)
	fmt.Fprintf(w, "- **AWS requests.** Counted on the real submit, observe and deliver handlers (the pipeline harness: embedded queue, event source mapping, bbolt store, simulator, each store/queue/artifact call counted as the DynamoDB/SQS/S3 adapters would issue it) over %d renders queued %s then running %s (%.2f observations per render: one that finds the job running, one that finds it finished): per submit %.0f GetItem, %.0f PutItem, %.0f SendMessage, %.1f WRU; per observation %.0f GetItem (strongly consistent, %.0f RRU), %.0f PutItem (%.1f WRU; the item weighs %.0f bytes), %.0f SendMessage; per delivery %.0f GetItem, %.0f PutItem, %.0f SendMessage, %.0f S3 HeadObject + %.0f PutObject (not priced: the same for both designs). WRU follow DynamoDB's rules: the larger of the old and new item per KB, plus the sparse status index's put/delete (both when the due time moves). ChangeMessageVisibility: %.0f (visibility 6 min covers a 25 s long poll). Receives, deletes (DeleteMessageBatch) and invocations are priced at one per action — a render's chain is usually alone in its batch; this trickled run measured %.1f / %.1f / %.1f messages per batch for submit / observe / deliver, so busy periods cost less. The event source mapping's empty long-poll receives are a fixed cost per queue, not per render. Observations per render, their running time (long polls are billed while held) and schedules (delays over 900 s) come from the model; submit %s and delivery %s of running time (%d / %d MB, template.yaml).\n",
		pr.Operations, fmtLatency(countQueueFor), fmtLatency(countRunFor), float64(pr.Functions[FnObserve].Actions)/float64(pr.Operations), sub.DynamoGet, sub.DynamoPut, sub.SQSSend, sub.WRU, obs.DynamoGet, obs.RRU, obs.DynamoPut, obs.WRU, obs.ItemBytes/math.Max(obs.DynamoPut, 1), obs.SQSSend,
		del.DynamoGet, del.DynamoPut, del.SQSSend, del.S3Head, del.S3Put, obs.SQSChangeVisibility, batch(FnSubmit), batch(FnObserve), batch(FnDeliver),
		fmtMS(r.Functions.SubmitBusy), fmtMS(r.Functions.DeliverBusy), r.Functions.ObserveMB, r.Functions.DeliverMB)
	g := r.PerRender[r.Real.Strategy]
	lambda := r.Prices.Breakdown(g)["Lambda"] / r.Prices.Dollars(g)
	small := r.Functions
	small.ObserveMB = 128
	fmt.Fprintf(w, "- **Where genjobs' dollars go.** %.0f %% of the default policy's cost is Lambda, nearly all of it observe holding long polls (%.1f GB-s per render at %d MB): Lambda bills the wait. The same queues with a fixed 5 s poller would cost %s per 1,000 renders, less than genjobs' %s, but detect at p50 %s instead of %s; Step Functions pays for the same polls in state transitions (%s). Were observe given 128 MB (if it fits), genjobs would cost %s per 1,000 renders.\n",
		100*lambda, g.LambdaGBSeconds, r.Functions.ObserveMB, fmtDollars(r.per1000(r.PerRender[r.Fixed.Strategy])), fmtDollars(r.per1000(g)),
		fmtLatency(r.Fixed.P50), fmtLatency(r.Real.P50), fmtDollars(r.per1000(r.StepFunctions)), fmtDollars(r.per1000(PerRender(r.Count, r.Real, small))))
	fmt.Fprintf(w, "- **Prices** (%s, as of %s; free tiers ignored): SQS $%.2f per million requests (64 KB chunks); DynamoDB on-demand $%.3f per million WRU and $%.3f per million RRU — AWS halved on-demand prices in November 2024 (from $1.25 and $0.25), these are the new ones; Lambda arm64 $%.10f per GB-s and $%.2f per million requests; Step Functions Standard $%.3f per 1,000 state transitions; EventBridge Scheduler $%.2f per million invocations.\n",
		pc.Region, pc.AsOf, pc.SQSPerMillion, pc.DynamoWRUPerMillion, pc.DynamoRRUPerMillion, pc.LambdaGBSecond, pc.LambdaPerMillion, pc.SFNPerThousand, pc.SchedulerPerMillion)
	fmt.Fprintf(w, "- **Step Functions poller.** Submit (Lambda task) → Wait 5 s → GetStatus (Lambda task) → Choice → back to Wait until terminal → Deliver (Lambda task) → Succeed: 3 transitions per poll plus Submit, Deliver and Succeed. Its polls per render are the fixed 5 s poller's (%.2f) on the same workload; its tasks cost genjobs' Lambda prices (a GetStatus is one %s round trip at %d MB); it pays DynamoDB only for the record, the submit and the delivery (the execution holds the polling state, which favours it) and no SQS (StartExecution starts it).\n",
		r.Fixed.GETsPerRender, fmtMS(r.Overheads.RoundTrip), r.Functions.ObserveMB)
}

func (r *Results) writeThroughputNotes(w io.Writer) {
	fmt.Fprintf(w, "- **Throughput.** The same harness with instant renders (simulator QueueFor = RunFor = 0), the template's concurrency (pollers: submit 5, observe 10, deliver 5 invocations; batch size 10; BATCH_CONCURRENCY 10) unless said otherwise, all dispatches sent at once, timed from the first dispatch to the last delivery; the fastest of the runs the table counts is kept. The policy reads at once (no long poll): with renders that finish on acceptance there is nothing to wait for. CPU is `getrusage` user+system of the whole process — simulator, queue and pollers included — per handler action (3 per operation). The store is opened with bolt.Open, as `genjobs local` opens it: writes that arrive while a commit is under way share the next transaction (group commit), and every commit is fsync'd before its writes return. The artifact directory fsyncs each output file and, grouped across concurrent Puts, its folder and the parents of folders it made. \"Without fsync\" is measured twice: bbolt's NoSync (bolt.OpenWith) on disk, where the artifact store still fsyncs, and the whole state on tmpfs (%s), where no fsync costs anything. The disk and tmpfs rows run alternately in the same benchmark run, so the ratio compares like with like on a shared machine.", tmpfs)
	var disk, shm, noSync, disk2, shm2, realRun *ThroughputRun
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
