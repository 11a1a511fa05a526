package benchmark

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/dev/localpack"
	"github.com/genjobs/genjobs/internal/dev/pipeline"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/schedule"
)

// Targets the issue sets.
const (
	targetGETsFloor  = 1.05
	targetOpsPerSec  = 500.0
	targetDiskRatio  = 0.8
	targetFirstInvok = 50 * time.Millisecond
)

// fmtSeconds writes a render's or a poll's length: "95 s", "1 s".
func fmtSeconds(d time.Duration) string { return fmt.Sprintf("%g s", d.Seconds()) }

func fmtMS(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func fmtMiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

type row struct{ section, figure, value, target, verdict string }

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func verdict(met bool, missed string) string {
	if met {
		return "**met**"
	}
	return "**missed** " + missed
}

// rows are the table's rows: every one a measurement of this machine.
func (r *Results) rows() []row {
	var rows []row
	add := func(section, figure, value, target, v string) {
		rows = append(rows, row{section, figure, value, target, v})
	}
	// 1. Requests, counted on the real handlers.
	const s1 = "1 AWS requests (counted on the real handlers)"
	if c := r.Count; c != nil && c.Operations > 0 {
		on := fmt.Sprintf(" — %d renders queued %s then running %s", c.Operations, fmtSeconds(countQueueFor), fmtSeconds(countRunFor))
		p := c.PerRender()
		add(s1, "per render: SQS Send / Receive / Delete / ChangeVisibility"+on,
			fmt.Sprintf("%.2f / %.2f / %.2f / %.2f", p.SQSSend, p.SQSReceive, p.SQSDelete, p.SQSChangeVisibility), "—", "count")
		add(s1, "per render: DynamoDB GetItem / PutItem / TransactWriteItems / Query; RRU / WRU (status index WRU)"+on,
			fmt.Sprintf("%.2f / %.2f / %.2f / %.2f; %.2f / %.2f (%.2f)", p.DynamoGet, p.DynamoPut, p.DynamoTransact, p.DynamoQuery, p.RRU, p.WRU, p.IndexWRU), "—", "count")
		add(s1, "per render: S3 HeadObject / PutObject; Lambda invocations; Genace POSTs / GETs"+on,
			fmt.Sprintf("%.2f / %.2f; %.2f; %.2f / %.2f", p.S3Head, p.S3Put, p.LambdaInvocations,
				float64(c.GenacePOSTs)/float64(c.Operations), float64(c.GenaceGETs)/float64(c.Operations)), "—", "count")
		add(s1, "records per invocation: submit / observe / deliver"+on,
			fmt.Sprintf("%.2f / %.2f / %.2f", c.RecordsPerInvocation(topology.Submit), c.RecordsPerInvocation(topology.Observe), c.RecordsPerInvocation(topology.Deliver)), "—", "count")
	}
	// 2. Throughput.
	const s3 = "2 throughput (this machine)"
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
			fmtMS(t.CPUPerAction()), t.Utilisation(), t.Result.Operations, len(t.Rates), t.spread())
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

	// 3. The real-time run.
	const s3r = "3 observation (real time, this machine)"
	if l := r.Local; l == nil {
		add(s3r, "GETs per render — real-time genjobs local, defaults", "not measured ("+r.LocalSkipped+")", fmt.Sprintf("≤ %.2f× the floor", targetGETsFloor), "—")
	} else {
		ratio := l.GETsPerRender() / l.Floor()
		add(s3r, fmt.Sprintf("GETs per render — real-time genjobs local, defaults, %d renders of %s (queued %s), delivery's read included", l.Renders, fmtSeconds(l.QueueFor+l.RunFor), fmtSeconds(l.QueueFor)),
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
			mb := r.Memory[c.Function]
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
	fmt.Fprintf(w, "`genjobs bench%s` on %s/%s, %d CPUs, %s. Every figure is measured on the real code on this machine: requests counted on the real handlers (1), throughput of the local pipeline (2), a real-time `genjobs local` run (3), cold starts of the real function binaries (4).\n\n",
		mode, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	fmt.Fprintln(w, "The observation, detection-latency, AWS cost and scale figures were removed: they came from a model that replayed its own copy of the observe logic instead of running the handlers, and priced genjobs against a floor and rivals built from genjobs' own design (issue 23). Issue 23's benchmark, which drives the real handlers, replaces them.")
	fmt.Fprintln(w)
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
	fmt.Fprintln(w, "## How the figures were made")
	fmt.Fprintln(w)
	if pr := r.Count; pr != nil {
		sub, obs, del := pr.PerAction(topology.Submit), pr.PerAction(topology.Observe), pr.PerAction(topology.Deliver)
		fmt.Fprintf(w, "- **AWS requests.** Counted on the real submit, observe and deliver handlers (the pipeline harness: embedded queue, event source mappings, bbolt store, simulator; each store, queue and artifact call counted as the DynamoDB, SQS and S3 adapters would issue it, capacity units by the DynamoDB store's own encoding) over %d renders queued %s then running %s, dispatched 5 ms apart so that batches stay small as at low traffic: per submit %.0f GetItem, %.0f PutItem, %.0f SendMessage, %.1f WRU; per observe action %.0f GetItem, %.0f PutItem, %.1f WRU; per delivery %.0f GetItem, %.0f PutItem, %.0f S3 HeadObject + %.0f PutObject. Receives, deletes and invocations are one per batch. These renders are short: one observation message sees them through, so a longer render's extra chains, writes and GETs are not in these figures. Nothing is priced.\n",
			pr.Operations, fmtSeconds(countQueueFor), fmtSeconds(countRunFor), sub.DynamoGet, sub.DynamoPut, sub.SQSSend, sub.WRU,
			obs.DynamoGet, obs.DynamoPut, obs.WRU, del.DynamoGet, del.DynamoPut, del.S3Head, del.S3Put)
	}
	r.writeThroughputNotes(w)
	if l := r.Local; l != nil {
		fmt.Fprintf(w, "- **Real time.** `pipeline.Run`, what `genjobs local` runs, with its defaults (the deployed observation policy, the embedded queue and store) on %d renders the simulator keeps queued %s and running %s, in wall-clock time; GETs are the simulator's own count of job reads, delivery's read for fresh output URLs included. The floor is 1 + ⌈(T − q)/%s⌉ long polls (one outstanding at every moment, the queued→running change ending one early), at least 2, plus delivery's read: arithmetic on the render's length, not a run. One render length only: issue 23 measured 20 renders of 300 s the same way at 13 GETs against a floor of 12 (1.083×).\n",
			l.Renders, fmtSeconds(l.QueueFor), fmtSeconds(l.RunFor), fmtSeconds(schedule.DefaultPolicies().Default.LongPoll))
	}
	fmt.Fprintln(w, "- **Cold start.** Each function built as the Makefile builds it (linux, CGO_ENABLED=0, `-tags lambda.norpc -trimpath -ldflags='-s -w'`), for arm64 (deploy size) and the host architecture (run here). Each start is a fresh `aws-lambda-rie` with a fresh bootstrap and the environment template.yaml gives it (internal/dev/samlocal; dummy credentials, every endpoint on a closed port but Secrets Manager (moto), from whose secret init reads the Genace key as deployed: `coldstart.Load` otherwise only builds clients). The first invoke sends `{\"Records\":[]}` and times the answer: process start, Go runtime, init, `lambda.Start` and an empty batch. sweep is scheduled, not SQS-fed, and its handler queries DynamoDB, so only its size is given.")
}

// templatePollers lists each pipeline function's MaximumConcurrency, the
// harness's pollers.
func templatePollers() string {
	var out []string
	for _, name := range []string{topology.Submit, topology.Observe, topology.Deliver} {
		if f, ok := topology.Stack.Function(name); ok && len(f.Mappings) > 0 {
			out = append(out, fmt.Sprintf("%s %d", name, f.Mappings[0].MaxConcurrency))
		}
	}
	return strings.Join(out, ", ")
}

func (r *Results) writeThroughputNotes(w io.Writer) {
	fmt.Fprintf(w, "- **Throughput.** The same harness with instant renders (simulator QueueFor = RunFor = 0), the template's concurrency (pollers: %s invocations; batch size 10; BATCH_CONCURRENCY 10) unless said otherwise, all dispatches sent at once, timed from the first dispatch to the last delivery; the fastest of the runs the table counts is kept. The policy reads at once (no long poll): with renders that finish on acceptance there is nothing to wait for. CPU is `getrusage` user+system of the whole process — simulator, queue and pollers included — per handler action (3 per operation). The store is opened with bolt.Open, as `genjobs local` opens it: writes that arrive while a commit is under way share the next transaction (group commit), and every commit is fsync'd before its writes return. The artifact store (localpack.Dir, as `genjobs local` opens it) streams each output into one pack file and commits the Puts in groups, at most one commit per %s: the pack fsync'd, then the group's index lines written and fsync'd; no file or folder per output. GOMAXPROCS is its default plus %d (pipeline.RaiseProcs, as `genjobs local` sets it) unless a row says otherwise: a thread in fsync keeps its P until sysmon takes it back (after one or two sysmon ticks of 20 µs to 10 ms, and not while another P is idle or spinning, for up to 10 ms), and with two fsync leaders on 2 CPUs that leaves CPU idle. \"Without fsync\" is measured twice: bbolt's NoSync (bolt.OpenWith) on disk, where the artifact store still fsyncs, and the whole state on tmpfs (%s), where no fsync costs anything. The disk and tmpfs rows run alternately in the same benchmark run, so the ratio compares like with like on a shared machine.", templatePollers(), fmtMS(localpack.CommitSpacing), pipeline.ExtraProcs, tmpfs)
	// The runs in throughput's order, nil where not measured.
	run := func(i int) *ThroughputRun {
		if i < len(r.Throughput) && r.Throughput[i].Result != nil {
			return &r.Throughput[i]
		}
		return nil
	}
	disk, shm, noSync, disk2, shm2, realRun, unraised := run(0), run(1), run(2), run(3), run(4), run(5), run(6)
	writes := r.Count.PerAction(topology.Submit).DynamoPut + r.Count.PerAction(topology.Observe).DynamoPut + r.Count.PerAction(topology.Deliver).DynamoPut
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
			fmt.Fprintf(w, " With the default policy (last row) instant renders are slow for another reason: the 202 already reports the job finished, observe's first look still long-polls (its snapshot is fresh), and Genace holds a finished job's long poll for the whole %s — %.1f ops/s.", fmtSeconds(schedule.DefaultPolicies().Default.LongPoll), realRun.OpsPerSecond())
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
