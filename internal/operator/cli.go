// Package operator is the operator's side of the genjobs command: review
// what automation parked, plan and replay one operation at a time with an
// audit trail, on the embedded store of a local run or on the deployed
// DynamoDB table; and the application's create and status, on the
// deployed intake API through the public client. It links none of the
// local tooling (internal/dev): the genjobs command adds the local runs
// and developer tools as Commands of its own, and a local run's simulator
// only through LocalGenace.
package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/genjobs/genjobs/internal/store/bolt"
)

// UsageError is a bad command line: exit status 2, with the command's usage.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

// Usagef returns a UsageError.
func Usagef(format string, args ...any) error { return &UsageError{msg: fmt.Sprintf(format, args...)} }

// ErrInterrupted ends a command stopped by Ctrl-C (or SIGTERM): exit
// status 130, as shells report an interrupted program.
var ErrInterrupted = errors.New("interrupted")

// RunFunc runs a command with its flags parsed: args are the positional
// arguments.
type RunFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// Command is one genjobs command.
type Command struct {
	Name, Args, Summary, Example string
	// Define registers the command's flags and returns what runs it.
	Define func(fs *pflag.FlagSet) RunFunc
	// Dev marks developer tooling (local stack, emulator, simulation,
	// benchmarks); the rest are the operator's commands, listed first.
	Dev bool
	// App marks the application's side (the intake API), listed between.
	App bool
}

// Commands are the operator's commands, then the application's; local reaches a local run's
// simulator for replay and the console (nil: none).
func Commands(local LocalGenace) []Command {
	return append([]Command{
		{"reviews", "", "list open review records", "genjobs reviews", cmdReviews, false, false},
		{"plan", "OPERATION_ID", "show the next action for one operation and every precondition checked",
			"genjobs plan demo-lost-response", cmdPlan, false, false},
		{"replay", "OPERATION_ID", "carry out the planned action on one operation, with an audit entry",
			"genjobs replay demo-lost-response --action reconcile --operator alice --job-id job_123", cmdReplay(local), false, false},
		{"audit", "OPERATION_ID", "print the operation's audit trail", "genjobs audit demo-lost-response", cmdAudit, false, false},
		{"console", "", "serve the reviews, each operation's timeline and plan, and replay as a web page on this machine (prints its one-time URL; replays are audited as --operator)",
			"genjobs console\n  genjobs console --operator alice --table genjobs-prod --addr 127.0.0.1:8080", cmdConsole(local), false, false},
	}, appCommands()...)
}

const (
	groupOperator = "operator"
	groupApp      = "app"
	groupDev      = "dev"
)

// NewRoot builds the command tree of cmds; every command's flags are
// pflag flags, accepted before or after positional arguments.
func NewRoot(ctx context.Context, stdout, stderr io.Writer, cmds []Command) *cobra.Command {
	root := &cobra.Command{
		Use:   "genjobs",
		Short: "drive and recover Genace render jobs: the operator's tool and the local pipeline",
		Long: `genjobs is the operator's tool for the genjobs pipeline (review what automation
parked, plan and replay one operation at a time with an audit trail) and runs
the whole pipeline on this machine against a Genace simulator.

reviews, plan, replay, audit and console take the store flags: --db PATH (the embedded
store file, default ` + DefaultDB + `; env GENJOBS_DB) or --table NAME (DynamoDB;
env TABLE_NAME) with --dynamodb-endpoint URL for DynamoDB Local; and --json.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return Usagef("a command is required")
		},
	}
	root.SetContext(ctx)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddGroup(
		&cobra.Group{ID: groupOperator, Title: "Operator commands (recovery of parked operations; the production table with --table):"},
		&cobra.Group{ID: groupApp, Title: "Application commands (the deployed intake API, as a service that buys renders uses it):"},
		&cobra.Group{ID: groupDev, Title: "Local runs and developer tooling (never touch a deployed stack):"},
	)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return Usagef("%v", err) })
	for _, c := range cmds {
		use := c.Name
		if c.Args != "" {
			use += " " + c.Args
		}
		cmd := &cobra.Command{Use: use, Short: c.Summary, Example: "  " + c.Example, GroupID: groupOperator}
		if c.Dev {
			cmd.GroupID = groupDev
		} else if c.App {
			cmd.GroupID = groupApp
		}
		runIt := c.Define(cmd.Flags())
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			return runIt(cmd.Context(), args, stdout, stderr)
		}
		root.AddCommand(cmd)
	}
	return root
}

// Run executes one command line of cmds and returns the exit status: 0
// on success and on --help, 1 when the command failed, 2 on a usage error
// (with the command's usage on stderr).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, cmds []Command) int {
	root := NewRoot(ctx, stdout, stderr, cmds)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	name := "genjobs"
	if cmd != nil && cmd != root {
		name = "genjobs " + cmd.Name()
	}
	if errors.Is(err, ErrInterrupted) || ctx.Err() != nil && errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "%s: interrupted; the state is kept\n", name)
		return 130
	}
	var ue *UsageError
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
