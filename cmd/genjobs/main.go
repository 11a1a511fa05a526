// Command genjobs runs the genjobs pipeline locally (local, sim) and is the
// operator's tool: review what automation parked, plan and replay one
// operation at a time with an audit trail.
package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/genjobs/genjobs/internal/store/bolt"
)

// usageError is a bad command line: exit status 2, with the command's usage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// errInterrupted ends a command stopped by Ctrl-C (or SIGTERM): exit
// status 130, as shells report an interrupted program.
var errInterrupted = errors.New("interrupted")

// runFunc runs a command with its flags parsed: args are the positional
// arguments.
type runFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

type command struct {
	name, args, summary, example string
	// define registers the command's flags and returns what runs it.
	define func(fs *pflag.FlagSet) runFunc
	// dev marks developer tooling (local stack, emulator, simulation,
	// benchmarks); the rest are the operator's commands, listed first.
	dev bool
}

func commands() []command {
	return []command{
		{"reviews", "", "list open review records", "genjobs reviews", cmdReviews, false},
		{"plan", "OPERATION_ID", "show the next action for one operation and every precondition checked",
			"genjobs plan demo-lost-response", cmdPlan, false},
		{"replay", "OPERATION_ID", "carry out the planned action on one operation, with an audit entry",
			"genjobs replay demo-lost-response --action reconcile --operator alice --job-id job_123", cmdReplay, false},
		{"audit", "OPERATION_ID", "print the operation's audit trail", "genjobs audit demo-lost-response", cmdAudit, false},
		{"console", "", "serve the reviews, each operation's timeline and plan, and replay as a web page on this machine (prints its one-time URL; replays are audited as --operator)",
			"genjobs console\n  genjobs console --operator alice --table genjobs-prod --addr 127.0.0.1:8080", cmdConsole, false},
		{"local", "", "run the whole pipeline locally on embedded defaults (the demo without --workload)",
			"genjobs local\n  genjobs local --workload ops.jsonl --timeout 5m\n  genjobs local --resume", cmdLocal, true},
		{"invoke", "", "run one function under the Lambda runtime emulator with a sample event, against local services (make invoke)",
			"make invoke   (or, with the services' endpoints exported: genjobs invoke --function submit --event events/submit.json)", cmdInvoke, true},
		{"sam-env", "", "keep local services up for `sam local invoke`, write its --env-vars file and --parameter-overrides, print the sam commands (make sam-env)",
			"make sam-env", cmdSAMEnv, true},
		{"soak", "", "run the deterministic fault-injection simulation and check the invariants (exit 1 on any violation)",
			"genjobs soak --operations 10000 --seed 42", cmdSoak, true},
		{"bench", "", "run the comparative benchmarks: print the table, write DIR/results.md and its plots",
			"genjobs bench --out bench", cmdBench, true},
		{"sim", "", "serve the Genace simulator over HTTP until Ctrl-C", "genjobs sim --addr 127.0.0.1:8787 --api-key sim-key", cmdSim, true},
	}
}

const (
	groupOperator = "operator"
	groupDev      = "dev"
)

// newRoot builds the command tree; every command's flags are pflag flags,
// accepted before or after positional arguments.
func newRoot(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "genjobs",
		Short: "drive and recover Genace render jobs: the operator's tool and the local pipeline",
		Long: `genjobs is the operator's tool for the genjobs pipeline (review what automation
parked, plan and replay one operation at a time with an audit trail) and runs
the whole pipeline on this machine against a Genace simulator.

reviews, plan, replay, audit and console take the store flags: --db PATH (the embedded
store file, default ` + defaultDB + `; env GENJOBS_DB) or --table NAME (DynamoDB;
env TABLE_NAME) with --dynamodb-endpoint URL for DynamoDB Local; and --json.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("a command is required")
		},
	}
	root.SetContext(ctx)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddGroup(
		&cobra.Group{ID: groupOperator, Title: "Operator commands (recovery of parked operations; the production table with --table):"},
		&cobra.Group{ID: groupDev, Title: "Local runs and developer tooling (never touch a deployed stack):"},
	)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usagef("%v", err) })
	for _, c := range commands() {
		use := c.name
		if c.args != "" {
			use += " " + c.args
		}
		cmd := &cobra.Command{Use: use, Short: c.summary, Example: "  " + c.example, GroupID: groupOperator}
		if c.dev {
			cmd.GroupID = groupDev
		}
		runIt := c.define(cmd.Flags())
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			return runIt(cmd.Context(), args, stdout, stderr)
		}
		root.AddCommand(cmd)
	}
	return root
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the exit status: 0 on success
// and on --help, 1 when the command failed, 2 on a usage error (with the
// command's usage on stderr).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(ctx, stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	name := "genjobs"
	if cmd != nil && cmd != root {
		name = "genjobs " + cmd.Name()
	}
	if errors.Is(err, errInterrupted) || ctx.Err() != nil && errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "%s: interrupted; the state is kept\n", name)
		return 130
	}
	var ue *usageError
	if errors.As(err, &ue) || cmd == nil || cmd == root || strings.HasPrefix(err.Error(), "unknown command") {
		fmt.Fprintf(stderr, "%s: %v\n\n", name, err)
		if cmd == nil {
			cmd = root
		}
		fmt.Fprint(stderr, cmd.UsageString())
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	if errors.Is(err, bolt.ErrLocked) {
		fmt.Fprintln(stderr, lockedHint)
	}
	return 1
}

// lockedHint is what an operator does about a store another process has
// open: on a local run's store that is most often the console.
const lockedHint = "The store is in use by another genjobs process: most often a running `genjobs console` on it, which holds it " +
	"for as long as it runs, or a `genjobs local` run still going. Use the console's pages meanwhile, or stop that " +
	"process (Ctrl-C in its terminal) and run this command again."
