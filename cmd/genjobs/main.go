// Command genjobs runs the genjobs pipeline locally (local, sim) and is the
// operator's tool: review what automation parked, plan and replay one
// operation at a time with an audit trail.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// usageError is a bad command line: exit status 2, with usage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

type command struct {
	name, args, summary string
	run                 func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	// dev marks developer tooling (local stack, emulator, simulation,
	// benchmarks); the rest are the operator's commands, listed first.
	dev bool
}

func commands() []command {
	return []command{
		{"reviews", "", "list open review records", cmdReviews, false},
		{"plan", "OPERATION_ID", "show the next action for one operation and every precondition checked", cmdPlan, false},
		{"replay", "OPERATION_ID --action A --operator NAME [--job-id ID [--force-unverified --reason TEXT] | --confirmed-not-submitted] [--genace-url URL --genace-key K]", "carry out the planned action on one operation, with an audit entry", cmdReplay, false},
		{"audit", "OPERATION_ID", "print the operation's audit trail", cmdAudit, false},
		{"local", "[--workload FILE] [--report FILE] [--timeout D] [--genace-url URL] [--table T --dynamodb-endpoint URL]", "run the whole pipeline locally on embedded defaults (the demo without --workload)", cmdLocal, true},
		{"invoke", "--function NAME --event FILE [--keep] [--json]", "run one function under the Lambda runtime emulator with a sample event, against local services (make invoke)", cmdInvoke, true},
		{"sam-env", "[--out DIR]", "keep local services up for `sam local invoke`, write its --env-vars file and --parameter-overrides, print the sam commands (make sam-env)", cmdSAMEnv, true},
		{"soak", "[--operations N] [--seed N] [--faults all|none|LIST] [--trace OPS] [--unrecorded-dispatch] [--json FILE] [--quiet]", "run the deterministic fault-injection simulation and check the invariants (exit 1 on any violation)", cmdSoak, true},
		{"bench", "[--out DIR] [--renders N] [--seed S] [--quick]", "run the comparative benchmarks: print the table, write DIR/results.md and DIR/observation.png", cmdBench, true},
		{"sim", "[--addr HOST:PORT] [--api-key K] [--run-for D] [--fault-rate F] ...", "serve the Genace simulator over HTTP until Ctrl-C", cmdSim, true},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: genjobs COMMAND [flags]")
	for _, dev := range []bool{false, true} {
		fmt.Fprintln(w)
		if dev {
			fmt.Fprintln(w, "Local runs and developer tooling (never touch a deployed stack):")
		} else {
			fmt.Fprintln(w, "Operator commands (recovery of parked operations; the production table with --table):")
		}
		for _, c := range commands() {
			if c.dev == dev {
				fmt.Fprintf(w, "  %-8s %s\n           %s\n", c.name, c.args, c.summary)
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "reviews, plan, replay and audit take the store flags: --db PATH (the embedded store file, default", defaultDB+";")
	fmt.Fprintln(w, "env GENJOBS_DB) or --table NAME (DynamoDB; env TABLE_NAME) with --dynamodb-endpoint URL")
	fmt.Fprintln(w, "(env AWS_ENDPOINT_URL_DYNAMODB) for DynamoDB Local; and --json for machine-readable output.")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		var ue *usageError
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &ue):
			fmt.Fprintf(stderr, "genjobs %s: %v\nusage: genjobs %s %s\n", c.name, err, c.name, c.args)
			return 2
		default:
			fmt.Fprintf(stderr, "genjobs %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "genjobs: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// parse parses flags that may come before or after positional arguments
// (operators type `plan op-1 --json` as often as `plan --json op-1`).
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%v", err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if strings.HasPrefix(args[0], "-") && args[0] != "-" {
			continue
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
