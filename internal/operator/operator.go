package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/spf13/pflag"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/genjobs/genjobs/internal/clock"
	appconfig "github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/queue"
	"github.com/genjobs/genjobs/internal/replay"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/secret"
	"github.com/genjobs/genjobs/internal/store"
)

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func cmdReviews(fs *pflag.FlagSet) RunFunc {
	var sf storeFlags
	sf.register(fs)
	return func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		pos := args
		if len(pos) != 0 {
			return Usagef("reviews takes no arguments, got %q", pos)
		}
		st, err := sf.open(ctx)
		if err != nil {
			return err
		}
		defer st.Close()
		rs, err := st.OpenReviews(ctx)
		if err != nil {
			return err
		}
		if sf.json {
			if rs == nil {
				rs = []review.Record{}
			}
			return printJSON(stdout, rs)
		}
		if len(rs) == 0 {
			fmt.Fprintln(stdout, "no open reviews")
			return nil
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "REVIEW\tOPERATION\tLOCAL PHASE\tREMOTE STATE\tJOB\tRECOMMENDED\tCATEGORY\tSOURCE\tCREATED")
		for _, r := range rs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, dash(r.OperationID), dash(string(r.Phase)), dash(string(r.RemoteState)),
				dash(r.RemoteJobID), r.Recommended, dash(r.ErrorCategory), r.Source, r.CreatedAt.Format(time.RFC3339))
		}
		return tw.Flush()
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneOperation(pos []string) (string, error) {
	if len(pos) != 1 {
		return "", Usagef("want exactly one OPERATION_ID, got %d arguments", len(pos))
	}
	return pos[0], nil
}

// openOne parses a command line naming one operation and opens the store
// the flags name.
func openOne(ctx context.Context, sf *storeFlags, args []string) (string, store.Store, error) {
	id, err := oneOperation(args)
	if err != nil {
		return "", nil, err
	}
	st, err := sf.open(ctx)
	if err != nil {
		return "", nil, err
	}
	return id, st, nil
}

func cmdPlan(fs *pflag.FlagSet) RunFunc {
	var sf storeFlags
	sf.register(fs)
	return func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		id, st, err := openOne(ctx, &sf, args)
		if err != nil {
			return err
		}
		defer st.Close()
		plan, err := (&replay.Replayer{Store: st}).Plan(ctx, id)
		if err != nil {
			return err
		}
		if sf.json {
			return printJSON(stdout, plan)
		}
		writePlan(stdout, plan, sf.addressed())
		return nil
	}
}

func writePlan(w io.Writer, p replay.Plan, store string) {
	fmt.Fprintf(w, "operation     %s (revision %d)\n", p.OperationID, p.Revision)
	fmt.Fprintf(w, "local phase   %s", p.Phase)
	if p.Settlement != "" {
		fmt.Fprintf(w, " (settlement %s)", p.Settlement)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "remote state  %s\n", dash(string(p.RemoteState)))
	fmt.Fprintf(w, "remote job    %s\n", dash(p.RemoteJobID))
	for i, k := range p.KnownJobs {
		label := ""
		if i == 0 {
			label = "known jobs"
		}
		fmt.Fprintf(w, "%-13s %s (%s)\n", label, k.JobID, strings.Join(k.Sources, "; "))
	}
	fmt.Fprintf(w, "next action   %s: %s\n", p.Recommendation.Action, p.Recommendation.Reason)
	fmt.Fprintf(w, "replay would  %s\n", p.Recommendation.Effect)
	if p.Cost != "" {
		fmt.Fprintf(w, "cost          %s\n", p.Cost)
	}
	fmt.Fprintln(w, "checks")
	for _, c := range p.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %-16s %s\n", mark, c.Name, c.Detail)
	}
	// The command runs as printed on this store, whatever run is newest
	// by then.
	cmd := fmt.Sprintf("%s replay %s --action %s --operator NAME %s", Self(), p.OperationID, p.Recommendation.Action, store)
	switch {
	case p.Recommendation.Action == operation.ActionAcknowledge:
		fmt.Fprintf(w, "to acknowledge (audited; the record is not written): %s\n", cmd)
	case !p.Ready:
		fmt.Fprintln(w, "not ready: a check failed; replay will refuse")
	case p.Needs != "":
		fmt.Fprintf(w, "to replay: %s and %s\n", cmd, p.Needs)
	default:
		fmt.Fprintf(w, "to replay: %s\n", cmd)
	}
}

func cmdReplay(local LocalGenace) func(*pflag.FlagSet) RunFunc {
	return func(fs *pflag.FlagSet) RunFunc {
		var sf storeFlags
		sf.register(fs)
		action := fs.String("action", "", "the action the plan computes (required)")
		operator := fs.String("operator", "", "who decides (required)")
		jobID := fs.String("job-id", "", "reconcile: attach this Genace job (looked up on Genace first) and observe it")
		notSubmitted := fs.Bool("confirmed-not-submitted", false, "reconcile: Genace has no job for this operation; back to prepared")
		force := fs.Bool("force-unverified", false, "reconcile --job-id: attach although Genace does not confirm the job names this operation (audited; needs --reason)")
		reason := fs.String("reason", "", "how you know, for a decision on your word (one line, kept in the audit entry; no URLs): required with --force-unverified, --confirmed-not-submitted, settle_outside and a dispatch after a confirmation")
		var gf genaceFlags
		gf.register(fs)
		return func(ctx context.Context, args []string, stdout, _ io.Writer) error {
			id, err := oneOperation(args)
			if err != nil {
				return err
			}
			if *action == "" {
				return Usagef("--action is required (run %s plan %s to see it)", Self(), id)
			}
			a, err := operation.ParseAction(*action)
			if err != nil {
				return Usagef("%v", err)
			}
			if *operator == "" {
				return Usagef("--operator is required: every replay is audited")
			}
			if err := replay.CheckOperator(*operator); err != nil {
				return Usagef("--operator: %v", err)
			}
			var reader replay.JobReader
			var search replay.JobSearcher
			if *jobID != "" {
				c, key, err := gf.client(ctx)
				if err != nil {
					return err
				}
				if key != "" && strings.Contains(*reason, key) {
					return Usagef("--reason contains the Genace API key; it would be kept in the audit trail")
				}
				if c != nil {
					reader = c
				}
			}
			if reader == nil && (*jobID != "" || *notSubmitted) {
				// A local run's Genace is the simulator it saved: look the
				// job up there, and keep what the lookup changed; it can be
				// searched, so "not submitted" is checked against it.
				lr, err := sf.localRun(local)
				if err != nil {
					return err
				}
				if lr != nil {
					defer func() { _ = lr.Stop() }()
					if *jobID != "" {
						reader = lr.Reader
					} else {
						search = lr.Search
					}
				}
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
			r := &replay.Replayer{Store: st, Sender: sender, Genace: reader, Search: search, Clock: clock.Real{}}
			req := replay.Request{OperationID: id, Action: a, Operator: *operator, JobID: *jobID,
				ConfirmedNotSubmitted: *notSubmitted, ForceUnverified: *force, Reason: *reason}
			res, err := r.Replay(ctx, req)
			if err != nil {
				return err
			}
			if sf.json {
				return printJSON(stdout, struct {
					replay.Result
					Phase    operation.Phase `json:"phase"`
					Revision int64           `json:"revision"`
				}{res, res.After.Phase, res.After.Revision})
			}
			if !res.Changed {
				fmt.Fprintf(stdout, "%s: %s by %s at revision %d; nothing changed on the record (audited)\n", id, res.Decision, res.Entry.Operator, res.After.Revision)
			} else {
				fmt.Fprintf(stdout, "%s: %s by %s: %s r%d → %s r%d (audited)\n", id, res.Decision, res.Entry.Operator,
					res.Before.Phase, res.Before.Revision, res.After.Phase, res.After.Revision)
			}
			switch {
			case res.Sent != nil && res.SendErr != "":
				fmt.Fprintf(stdout, "follow-up %s not sent (%s); it stays scheduled on the record\n", res.Sent.Action, res.SendErr)
			case res.Sent != nil && sender == nil && sf.table == "":
				fmt.Fprintf(stdout, "follow-up %s scheduled on the record; to carry it out on this local run: %s\n", res.Sent.Action, sf.resumeCommand())
			case res.Sent != nil && sender == nil:
				fmt.Fprintf(stdout, "follow-up %s scheduled on the record (no queue configured to send it now)\n", res.Sent.Action)
			case res.Sent != nil:
				fmt.Fprintf(stdout, "follow-up %s sent via %s\n", res.Sent.Action, res.Route)
			}
			if res.Entry.Verification != "" && res.Entry.Verification != replay.Verified {
				fmt.Fprintf(stdout, "job %s attached UNVERIFIED (%s); reason audited: %s\n", res.Entry.RemoteJobID, res.Entry.Verification, res.Entry.Reason)
			}
			if res.Decision == replay.DecisionConfirmedNotSubmitted {
				if next, err := r.Plan(ctx, id); err == nil && next.Cost != "" {
					fmt.Fprintf(stdout, "next: %s plan %s: %s\n", Self(), id, next.Cost)
				}
			}
			if res.Entry.Credits != 0 {
				fmt.Fprintf(stdout, "audited: %d credits, reason: %s\n", res.Entry.Credits, dash(res.Entry.Reason))
			}
			if len(res.Closed) > 0 {
				fmt.Fprintf(stdout, "closed reviews: %s\n", strings.Join(res.Closed, ", "))
			}
			for _, k := range res.Kept {
				fmt.Fprintf(stdout, "left open: review %s (%s)\n", k.ID, k.Why)
			}
			return nil
		}
	}
}

// genaceFlags name the Genace endpoint replay verifies a --job-id on.
type genaceFlags struct {
	url, key string
}

func (g *genaceFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&g.url, "genace-url", os.Getenv(appconfig.EnvGenaceURL), "Genace base URL to look a --job-id up on (env "+appconfig.EnvGenaceURL+")")
	fs.StringVar(&g.key, "genace-key", os.Getenv(appconfig.EnvGenaceKey), "Genace API key (env "+appconfig.EnvGenaceKey+", or the secret named by "+appconfig.EnvGenaceKeySecret+")")
}

// client returns a Genace client and its key, or nil when no URL is
// configured: replay then refuses an unverified --job-id unless forced.
func (g *genaceFlags) client(ctx context.Context) (*genace.Client, string, error) {
	if g.url == "" {
		return nil, "", nil
	}
	key := g.key
	if key == "" {
		secretID := os.Getenv(appconfig.EnvGenaceKeySecret)
		if secretID == "" {
			return nil, "", Usagef("--genace-url needs --genace-key (or %s, or %s)", appconfig.EnvGenaceKey, appconfig.EnvGenaceKeySecret)
		}
		awsCfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, "", err
		}
		if key, err = secret.APIKey(ctx, "", secretID, secretsmanager.NewFromConfig(awsCfg)); err != nil {
			return nil, "", err
		}
	}
	c, err := genace.New(g.url, key, nil)
	if err != nil {
		return nil, "", fmt.Errorf("genace client: %w", err)
	}
	return c, key, nil
}

// replaySender sends follow-ups through SQS when the deployment's queue
// URLs are in the environment; otherwise the follow-up stays scheduled on
// the record.
func replaySender(ctx context.Context) (replay.Sender, error) {
	if os.Getenv(appconfig.EnvDispatchQueueURL) == "" {
		return nil, nil
	}
	// Replay sends each follow-up at once, whichever action it is.
	cfg, err := appconfig.Load(os.Getenv, appconfig.Spec{FollowUps: appconfig.AtOnce(message.Actions...)})
	if err != nil {
		return nil, err
	}
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, err
	}
	return schedule.NewDispatcher(cfg.DispatchConfig(), queue.NewSQS(sqs.NewFromConfig(awsCfg)), nil, clock.Real{})
}

func cmdAudit(fs *pflag.FlagSet) RunFunc {
	var sf storeFlags
	sf.register(fs)
	return func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		id, st, err := openOne(ctx, &sf, args)
		if err != nil {
			return err
		}
		defer st.Close()
		if _, err := st.Get(ctx, id); err != nil {
			return fmt.Errorf("operation %s: %w", id, err)
		}
		entries, err := st.Audit(ctx, id)
		if err != nil {
			return err
		}
		if sf.json {
			if entries == nil {
				entries = []review.AuditEntry{}
			}
			return printJSON(stdout, entries)
		}
		if len(entries) == 0 {
			fmt.Fprintf(stdout, "%s: no audit entries\n", id)
			return nil
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "AT\tOPERATOR\tACTION\tDECISION\tFROM\tTO\tREVISION\tJOB\tVERIFICATION\tCREDITS\tREASON")
		for _, e := range entries {
			credits := "-"
			if e.Credits != 0 {
				credits = strconv.FormatInt(e.Credits, 10)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s r%d\t%s\tr%d\t%s\t%s\t%s\t%s\n", e.At.Format(time.RFC3339), e.Operator, e.Action, dash(e.Decision),
				e.FromPhase, e.FromRevision, e.ToPhase, e.Revision, dash(e.RemoteJobID), dash(e.Verification), credits, dash(e.Reason))
		}
		return tw.Flush()
	}
}
