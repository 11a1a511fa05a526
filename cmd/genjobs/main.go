// Command genjobs runs the genjobs pipeline locally (local, sim) and is the
// operator's tool: review what automation parked, plan and replay one
// operation at a time with an audit trail; and create and status on the
// intake API, as an application would. Those commands are
// internal/operator's, which links no local tooling; this command adds
// the local runs and developer tools.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/genjobs/genjobs/internal/operator"
)

// usagef is operator.Usagef: exit status 2, with the command's usage.
var usagef = operator.Usagef

func commands() []operator.Command {
	return append(operator.Commands(localGenace), []operator.Command{
		{Name: "local", Summary: "run the whole pipeline locally on embedded defaults (the demo without --workload)",
			Example: "genjobs local\n  genjobs local --workload ops.jsonl --timeout 5m\n  genjobs local --resume", Define: cmdLocal, Dev: true},
		{Name: "invoke", Summary: "run one function under the Lambda runtime emulator with a sample event, against local services (make invoke)",
			Example: "make invoke   (or, with the services' endpoints exported: genjobs invoke --function submit --event events/submit.json)", Define: cmdInvoke, Dev: true},
		{Name: "sam-env", Summary: "keep local services up for `sam local invoke`, write its --env-vars file and --parameter-overrides, print the sam commands (make sam-env)",
			Example: "make sam-env", Define: cmdSAMEnv, Dev: true},
		{Name: "soak", Summary: "run the deterministic fault-injection simulation and check the invariants (exit 1 on any violation)",
			Example: "genjobs soak --operations 10000 --seed 42", Define: cmdSoak, Dev: true},
		{Name: "bench", Summary: "run the benchmarks measured on the real code (requests, throughput, a real-time run, cold starts): print the table and write DIR/results.md",
			Example: "genjobs bench --out bench", Define: cmdBench, Dev: true},
		{Name: "sim", Summary: "serve the Genace simulator over HTTP until Ctrl-C", Example: "genjobs sim --addr 127.0.0.1:8787 --api-key sim-key", Define: cmdSim, Dev: true},
	}...)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line (operator.Run).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return operator.Run(ctx, args, stdout, stderr, commands())
}
