package operator

import (
	"context"
	"fmt"
	"io"
	"os/user"

	"github.com/spf13/pflag"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/console"
	"github.com/genjobs/genjobs/internal/replay"
)

func cmdConsole(local LocalGenace) func(*pflag.FlagSet) RunFunc {
	return func(fs *pflag.FlagSet) RunFunc {
		var sf storeFlags
		sf.register(fs)
		_ = fs.MarkHidden("json") // a page, not a printout
		addr := fs.String("addr", "127.0.0.1:0", "listen address (default: loopback, a free port)")
		allowRemote := fs.Bool("allow-remote", false, "allow an --addr reachable beyond this machine (plain HTTP: its URL's key crosses the network in clear)")
		operator := fs.String("operator", "", "who every replay through the console is audited as (default: your OS user name)")
		var gf genaceFlags
		gf.register(fs)
		return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			if len(args) != 0 {
				return Usagef("console takes no arguments, got %q", args)
			}
			who := *operator
			if !fs.Changed("operator") {
				if u, err := user.Current(); err == nil {
					who = u.Username
				}
			}
			if err := replay.CheckOperator(who); err != nil {
				return Usagef("--operator: %v (the default is your OS user name; pass --operator NAME)", err)
			}
			ln, url, warning, err := console.Listen(*addr, *allowRemote)
			if err != nil {
				return Usagef("%v", err)
			}
			defer ln.Close()
			// Job ids are looked up where replay looks them up: the Genace the
			// flags name, or the simulator a local run saved.
			var reader replay.JobReader
			var afterReplay func()
			var search replay.JobSearcher
			c, key, err := gf.client(ctx)
			if err != nil {
				return err
			}
			if c != nil {
				reader = c
			} else if lg, err := sf.localRun(local); err != nil {
				return err
			} else if lg != nil {
				report := func(err error) {
					if err != nil {
						fmt.Fprintf(stderr, "genjobs console: saving the local run's simulator: %v\n", err)
					}
				}
				defer func() { report(lg.Stop()) }()
				reader, afterReplay = lg.Reader, func() { report(lg.Save()) }
				// "Not submitted" is checked against the jobs the run's
				// simulator holds, as on the command line.
				search = lg.Search
			}
			sf.write = true
			st, err := sf.open(ctx)
			if err != nil {
				return err
			}
			defer st.Close()
			sender, err := replaySender(ctx)
			if err != nil {
				return err
			}
			hint := "Automation carries it out when the sweep next runs."
			if sf.table == "" {
				hint = "To carry it out on this local run: stop the console (it holds the store's lock), then " + sf.resumeCommand() + "."
			}
			srv, err := console.New(console.Config{
				Store:         st,
				Replayer:      &replay.Replayer{Store: st, Sender: sender, Genace: reader, Search: search, Clock: clock.Real{}},
				Clock:         clock.Real{},
				Operator:      who,
				Hosts:         console.Hosts(ln),
				Secrets:       []string{key},
				ScheduledHint: hint,
				AfterReplay:   afterReplay,
			})
			if err != nil {
				return err
			}
			if warning != "" {
				fmt.Fprintln(stderr, warning)
			}
			// The launch URL is the console's key: it goes to the operator's
			// terminal and nowhere else, and works once.
			fmt.Fprintf(stdout, "genjobs console: %s (acting as %s; the URL opens one browser session; Ctrl-C stops it)\n", srv.LaunchURL(url), who)
			if err := console.Serve(ctx, ln, srv); err != nil {
				return err
			}
			fmt.Fprintln(stdout, "genjobs console: stopped")
			return nil
		}
	}
}
