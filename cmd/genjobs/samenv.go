package main

import (
	"context"
	"fmt"
	"github.com/spf13/pflag"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/genjobs/genjobs/internal/dev/invoke"
	"github.com/genjobs/genjobs/internal/dev/modroot"
	"github.com/genjobs/genjobs/internal/operator"
)

// cmdSAMEnv keeps a local stack up for `sam local invoke` (make sam-env):
// the template's table, queues, bucket and secret in DynamoDB Local and
// moto, the Genace simulator, every sample operation seeded. It writes
// the --env-vars file, --parameter-overrides and rewritten events for
// that stack, prints the sam commands, and removes the stack on Ctrl-C.
func cmdSAMEnv(fs *pflag.FlagSet) operator.RunFunc {
	out := fs.String("out", invoke.SAMLocalDir, "the folder for env.json, parameters and events/, relative to the module root")
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		if len(args) != 0 {
			return usagef("sam-env takes no arguments, got %q", args)
		}
		if filepath.IsAbs(*out) {
			return usagef("--out must be relative to the module root (the sam commands run there)")
		}
		root, err := modroot.Find("")
		if err != nil {
			return err
		}
		tmpl, err := invoke.LoadTemplate(root)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Clean(*out))
		s, err := invoke.PrepareSAMLocal(ctx, root, tmpl, invoke.EndpointsFromEnv(), dir)
		if err != nil {
			return err
		}
		defer s.Close()
		fmt.Fprintf(stderr, "sam-env: stack %s: table %s, queues %s-*, Genace simulator at %s; samples %s seeded\n",
			s.Stack.Prefix, s.Stack.Table, s.Stack.Prefix, s.Stack.SimURL, strings.Join(sampleIDs(), ", "))
		fmt.Fprintf(stdout, "wrote %s/%s and %s/%s", dir, invoke.EnvFileName, dir, invoke.ParametersFileName)
		if len(s.Rewritten) > 0 {
			fmt.Fprintf(stdout, ", and %s/events/ (%s with the seeded job ids)", dir, strings.Join(s.Rewritten, ", "))
		}
		fmt.Fprintf(stdout, "\n\nIn another terminal, from %s:\n\n", root)
		for _, c := range invoke.SAMCommands(tmpl, dir, s.Rewritten) {
			fmt.Fprintln(stdout, "  "+c)
		}
		fmt.Fprintln(stdout, "\nEach event changes the seeded operations; restart make sam-env for fresh ones. Ctrl-C removes the stack.")
		<-ctx.Done()
		fmt.Fprintln(stderr, "sam-env: stopping")
		return nil
	}
}

func sampleIDs() []string { return slices.Sorted(maps.Keys(invoke.Samples)) }
