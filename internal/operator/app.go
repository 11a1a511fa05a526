package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/genjobs/genjobs/client"
)

// appCommands are the application's side, on the deployed intake API
// through the public client (what a service that buys renders does).
func appCommands() []Command {
	return []Command{
		{"create", "", "create an operation through the intake API (retried safely: --operation-id is the idempotency key)",
			"genjobs create --url https://ID.lambda-url.eu-west-1.on.aws --operation-id order-42 --user-id user-7 --model flux-pro-2 --input @input.json --budget 50",
			cmdCreate, false, true},
		{"status", "OPERATION_ID", "print an operation's status from the intake API; --wait until it ends or is parked for a person",
			"genjobs status order-42 --wait", cmdStatus, false, true},
	}
}

// apiFlags are the flags of the commands on the intake API.
type apiFlags struct {
	url, region string
	json        bool
}

func (a *apiFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&a.url, "url", os.Getenv("GENJOBS_API_URL"), "the intake API's URL, the function URL (env GENJOBS_API_URL)")
	fs.StringVar(&a.region, "region", "", "the region to sign for (default: the function URL's, else AWS_REGION or the shared config)")
	fs.BoolVar(&a.json, "json", false, "print the status as JSON")
}

func (a *apiFlags) client() (*client.Client, error) {
	if a.url == "" {
		return nil, Usagef("--url (or GENJOBS_API_URL) is required")
	}
	var opts []client.Option
	if a.region != "" {
		opts = append(opts, client.WithRegion(a.region))
	}
	c, err := client.New(a.url, opts...)
	if err != nil {
		return nil, Usagef("%v", err)
	}
	return c, nil
}

func cmdCreate(fs *pflag.FlagSet) RunFunc {
	var a apiFlags
	var req client.CreateRequest
	var input string
	a.register(fs)
	fs.StringVar(&req.OperationID, "operation-id", "", "the operation's id, the idempotency key (required)")
	fs.StringVar(&req.UserID, "user-id", "", "the user it is bought for (required)")
	fs.StringVar(&req.Model, "model", "", "a model of the deployment's catalog (required)")
	fs.StringVar(&input, "input", "", "the request for Genace: a JSON object, or @FILE (required)")
	fs.Int64Var(&req.BudgetCredits, "budget", 0, "the credits the user authorizes (required)")
	return func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		for flag, v := range map[string]string{"operation-id": req.OperationID, "user-id": req.UserID, "model": req.Model, "input": input} {
			if v == "" {
				return Usagef("--%s is required", flag)
			}
		}
		if len(args) > 0 {
			return Usagef("no arguments expected, got %q", args)
		}
		if file, ok := strings.CutPrefix(input, "@"); ok {
			b, err := os.ReadFile(file)
			if err != nil {
				return Usagef("--input: %v", err)
			}
			input = string(b)
		}
		if !json.Valid([]byte(input)) {
			return Usagef("--input is not JSON")
		}
		req.Input = json.RawMessage(input)
		c, err := a.client()
		if err != nil {
			return err
		}
		st, created, err := c.Create(ctx, req)
		if err != nil {
			return err
		}
		return a.print(stdout, st, map[bool]string{true: "created", false: "exists"}[created])
	}
}

func cmdStatus(fs *pflag.FlagSet) RunFunc {
	var a apiFlags
	var wait bool
	a.register(fs)
	fs.BoolVar(&wait, "wait", false, "poll until the operation is terminal or parked for an operator")
	return func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		if len(args) != 1 {
			return Usagef("want exactly one OPERATION_ID")
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		get := c.Get
		if wait {
			get = func(ctx context.Context, id string) (client.Status, error) {
				return c.Wait(ctx, id, client.WaitOptions{})
			}
		}
		st, err := get(ctx, args[0])
		if err != nil {
			return err
		}
		return a.print(stdout, st, "")
	}
}

// print writes st as JSON, or as a few lines for people.
func (a *apiFlags) print(w io.Writer, st client.Status, verb string) error {
	if a.json {
		return printJSON(w, st)
	}
	if verb != "" {
		verb += " "
	}
	fmt.Fprintf(w, "%s%s: %s (revision %d, spec revision %d, terminal %t), %s, budget %d credits (estimate %d)\n",
		verb, st.OperationID, st.Phase, st.Revision, st.SpecRevision, st.Terminal, st.Model, st.BudgetCredits, st.EstimatedCredits)
	if r := st.Remote; r != nil {
		fmt.Fprintf(w, "  genace job %s: %s, credits charged %d, refunded %d\n", r.JobID, dash(string(r.State)), r.Credits.Charged, r.Credits.Refunded)
	}
	if r := st.OperatorReview; r != nil {
		fmt.Fprintf(w, "  parked for an operator: %s\n", r.Reason)
	}
	for _, o := range st.Outputs {
		fmt.Fprintf(w, "  output %d: %s (%d bytes, sha256 %s)\n", o.Index, o.Key, o.SizeBytes, o.SHA256)
	}
	return nil
}
