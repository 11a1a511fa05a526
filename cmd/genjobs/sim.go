package main

import (
	"context"
	"fmt"
	"github.com/spf13/pflag"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/operator"
)

// simModels are the models the simulator knows besides the default: one
// whose renders fail (refunded automatically) and one slow renderer.
func simModels(runFor time.Duration) map[string]genacesim.ModelConfig {
	return map[string]genacesim.ModelConfig{
		"demo-fail": {Price: 8, QueueFor: time.Second, RunFor: runFor / 2, Outcome: genacesim.OutcomeFail, OutputCount: 1},
		"demo-slow": {Price: 20, QueueFor: 2 * time.Second, RunFor: 4 * runFor, Outcome: genacesim.OutcomeSucceed, OutputCount: 2},
	}
}

// simFlags are the simulator's settings, shared by `sim` and `local`.
type simFlags struct {
	queueFor, runFor, settle, urlTTL time.Duration
	downloadDelay                    time.Duration
	price                            int64
	outputs, rateLimit               int
	seed                             uint64
	faultRate, readFaultRate         float64
}

func (f *simFlags) register(fs *pflag.FlagSet) {
	fs.DurationVar(&f.queueFor, "queue-for", time.Second, "simulated time a job spends queued")
	fs.DurationVar(&f.runFor, "run-for", 4*time.Second, "simulated render time")
	fs.DurationVar(&f.settle, "refund-settle", 2*time.Second, "how long a refund stays pending")
	fs.DurationVar(&f.urlTTL, "url-ttl", 15*time.Minute, "lifetime of signed output URLs")
	fs.Int64Var(&f.price, "price", 10, "credits per render")
	fs.IntVar(&f.outputs, "outputs", 1, "outputs per successful render")
	fs.IntVar(&f.rateLimit, "rate-limit", 0, "POSTs per second before 429 (0: no limit)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed for job ids, images and injected faults")
	fs.Float64Var(&f.faultRate, "fault-rate", 0, "share of POSTs (0..1) answered with a random fault: lost response, 502 with job id, 503, 429")
	fs.Float64Var(&f.readFaultRate, "read-fault-rate", 0, "share of GETs and output downloads (0..1) answered with a fault: a GET 429 (Retry-After 2s), a download 503 or answered after 3s")
	fs.DurationVar(&f.downloadDelay, "download-delay", 0, "answer every output download (not faulted otherwise) after this long")
}

func (f *simFlags) validate() error {
	switch {
	case f.queueFor < 0 || f.runFor < 0 || f.settle < 0 || f.downloadDelay < 0:
		return usagef("durations must not be negative")
	case f.urlTTL <= 0:
		return usagef("--url-ttl must be positive")
	case f.price < 0 || f.outputs < 1 || f.outputs > 16 || f.rateLimit < 0:
		return usagef("--price ≥ 0, --outputs 1..16, --rate-limit ≥ 0")
	case f.faultRate < 0 || f.faultRate > 1 || f.readFaultRate < 0 || f.readFaultRate > 1:
		return usagef("--fault-rate and --read-fault-rate must be between 0 and 1")
	}
	return nil
}

func (f *simFlags) simulator(apiKey string, clk clock.Clock) *genacesim.Simulator {
	sim := genacesim.New(genacesim.Config{
		APIKey:            apiKey,
		DefaultModel:      genacesim.ModelConfig{Price: f.price, QueueFor: f.queueFor, RunFor: f.runFor, OutputCount: f.outputs},
		Models:            simModels(f.runFor),
		RefundSettleAfter: f.settle, SignedURLTTL: f.urlTTL, Seed: int64(f.seed), RateLimitPerSecond: f.rateLimit,
	}, clk)
	f.misbehave(sim)
	return sim
}

// misbehave installs the faults the flags ask for (a saved simulator keeps
// none, so a resumed run takes them from its own flags).
func (f *simFlags) misbehave(sim *genacesim.Simulator) {
	if f.faultRate > 0 || f.readFaultRate > 0 || f.downloadDelay > 0 {
		var mu sync.Mutex // the fault func runs on every request's goroutine
		rnd := rand.New(rand.NewPCG(f.seed, 0x9e3779b97f4a7c15))
		faults := map[genacesim.RequestKind][]genacesim.Fault{
			genacesim.KindPost: {genacesim.AcceptThenDrop(), genacesim.SubmissionFailed(502), genacesim.ServerErrorNoJob(503), genacesim.RateLimited(2 * time.Second)},
			genacesim.KindGet:  {genacesim.RateLimited(2 * time.Second)},
			genacesim.KindFile: {genacesim.ServerErrorNoJob(503), genacesim.DelayResponse(3 * time.Second)},
		}
		sim.SetFaultFunc(func(r genacesim.RequestInfo) genacesim.Fault {
			mu.Lock()
			defer mu.Unlock()
			rate := f.readFaultRate
			if r.Kind == genacesim.KindPost {
				rate = f.faultRate
			}
			switch {
			case rate > 0 && rnd.Float64() < rate:
				return faults[r.Kind][rnd.IntN(len(faults[r.Kind]))]
			case r.Kind == genacesim.KindFile && f.downloadDelay > 0:
				return genacesim.DelayResponse(f.downloadDelay)
			}
			return genacesim.NoFault()
		})
	}
}

func cmdSim(fs *pflag.FlagSet) operator.RunFunc {
	addr := fs.String("addr", "127.0.0.1:8787", "listen address (loopback only)")
	key := fs.String("api-key", "sim-key", "the bearer key the simulator accepts")
	var sf simFlags
	sf.register(fs)
	return func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		if len(args) != 0 {
			return usagef("sim takes no arguments, got %q", args)
		}
		if err := sf.validate(); err != nil {
			return err
		}
		sim := sf.simulator(*key, clock.Real{})
		base, stop, err := sim.Start(*addr)
		if err != nil {
			return err
		}
		defer stop()
		fmt.Fprintf(stdout, "Genace simulator at %s (key %q; models: any, demo-fail, demo-slow)\n", base, *key)
		fmt.Fprintf(stdout, "  curl -s -H 'Authorization: Bearer %s' -d '{\"model\":\"flux-pro-2\",\"input\":{\"prompt\":\"x\"},\"metadata\":{\"operation_id\":\"op-1\"}}' %s/api/v1/jobs\n", *key, base)
		fmt.Fprintf(stdout, "  curl -s -H 'Authorization: Bearer %s' '%s/api/v1/jobs/JOB_ID?wait=10'\n", *key, base)
		fmt.Fprintln(stdout, "Ctrl-C stops it.")
		<-ctx.Done()
		fmt.Fprintf(stdout, "stopped: %d POSTs, %d GETs, %d file downloads\n", sim.TotalPosts(), sim.TotalGets(), sim.FileGets())
		return nil
	}
}
