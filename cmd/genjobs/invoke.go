package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/genjobs/genjobs/internal/dev/invoke"
	"github.com/genjobs/genjobs/internal/dev/modroot"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operator"
	"github.com/genjobs/genjobs/internal/stack"
)

// cmdInvoke runs one function under the Lambda Runtime Interface Emulator
// with a sample event, as `sam local invoke` does, against DynamoDB Local
// and moto (whose endpoints `make invoke` exports) and the Genace
// simulator. The report goes to stdout, progress to stderr.
func cmdInvoke(fs *pflag.FlagSet) operator.RunFunc {
	var fns []string
	for _, f := range stack.Functions {
		fns = append(fns, f.Name)
	}
	function := fs.String("function", "", "the function to run: one of template.yaml's functions ("+strings.Join(fns, ", ")+")")
	eventPath := fs.String("event", "", "the event file, e.g. events/submit.json")
	keep := fs.Bool("keep", false, "keep the emulator, table, queues, bucket, secret and simulator until Ctrl-C, and print how to reach them")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	timeout := fs.Duration("timeout", 0, "the function's timeout in place of the template's (observe's feed receives nothing within "+observe.DefaultFeedMargin.String()+" of the deadline)")
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		root, err := modroot.Find("")
		if err != nil {
			return err
		}
		tmpl, err := invoke.LoadTemplate(root)
		if err != nil {
			return err
		}
		names := strings.Join(invoke.FunctionNames(tmpl), ", ")
		if len(args) != 0 {
			return usagef("invoke takes no arguments, got %q", args)
		}
		switch {
		case *function == "":
			return usagef("--function is required (one of %s)", names)
		case *eventPath == "":
			return usagef("--event is required, e.g. --event events/%s.json", *function)
		case *timeout < 0:
			return usagef("--timeout is %s, want a positive duration", *timeout)
		}
		if _, ok := invoke.Lookup(tmpl, *function); !ok {
			return usagef("unknown function %q: want one of %s", *function, names)
		}
		path := *eventPath
		if _, err := os.Stat(path); err != nil && !filepath.IsAbs(path) {
			// Run from a subfolder: the samples are relative to the root.
			if _, rerr := os.Stat(filepath.Join(root, path)); rerr == nil {
				path = filepath.Join(root, path)
			}
		}
		// Prepare checks the event before the services: a typo in a file
		// name deserves its own error, whatever else is missing.
		sess, err := invoke.Prepare(ctx, invoke.Options{Root: root, Template: tmpl, Function: *function, EventPath: path, Endpoints: invoke.EndpointsFromEnv(), Progress: stderr, Timeout: *timeout})
		if err != nil {
			return err
		}
		defer sess.Close()
		res, err := sess.Invoke(ctx)
		switch {
		case res != nil && *asJSON:
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if werr := enc.Encode(res); werr != nil {
				return errors.Join(errors.New("write the report"), werr)
			}
		case res != nil:
			if werr := res.WriteText(stdout); werr != nil {
				return werr
			}
		}
		if err != nil {
			return err
		}
		if *keep {
			if err := sess.WriteKeep(stderr); err != nil {
				return err
			}
			<-ctx.Done()
			fmt.Fprintln(stderr, "invoke: stopping")
		}
		return res.Err()
	}
}
