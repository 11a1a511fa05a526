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
		pos := args
		if len(pos) != 0 {
			return usagef("invoke takes no arguments, got %q", pos)
		}
		switch {
		case *function == "":
			return usagef("--function is required (one of %s)", names)
		case *eventPath == "":
			return usagef("--event is required, e.g. --event events/%s.json", *function)
		}
		spec, ok := invoke.Lookup(tmpl, *function)
		if !ok {
			return usagef("unknown function %q: want one of %s", *function, names)
		}
		path := *eventPath
		if _, err := os.Stat(path); err != nil && !filepath.IsAbs(path) {
			// Run from a subfolder: the samples are relative to the root.
			if _, rerr := os.Stat(filepath.Join(root, path)); rerr == nil {
				path = filepath.Join(root, path)
			}
		}
		// The event is checked before the services: a typo in a file name
		// deserves its own error, whatever else is missing.
		ev, err := invoke.ReadEvent(path)
		if err != nil {
			return err
		}
		if err := invoke.CheckPairing(spec, ev); err != nil {
			return err
		}
		ep := invoke.EndpointsFromEnv()
		if err := ep.Check(); err != nil {
			return err
		}

		sess, err := invoke.Prepare(ctx, invoke.Options{Root: root, Template: tmpl, Function: *function, EventPath: path, Endpoints: ep, Progress: stderr})
		if err != nil {
			return err
		}
		defer sess.Close()
		res, err := sess.Invoke(ctx)
		if res != nil {
			if werr := writeInvokeResult(stdout, res, *asJSON); werr != nil {
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

func writeInvokeResult(w io.Writer, res *invoke.Result, asJSON bool) error {
	if !asJSON {
		return res.WriteText(w)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		return errors.Join(errors.New("write the report"), err)
	}
	return nil
}
