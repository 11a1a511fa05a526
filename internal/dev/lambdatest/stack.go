package lambdatest

import (
	"context"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/dev/emulator"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/invoke"
	"github.com/genjobs/genjobs/internal/dev/testenv"
	"github.com/genjobs/genjobs/internal/dev/topology"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/queue"
)

// APIKey is the simulator's key in these tests, and the value of the
// secret the functions read it from. It is distinctive so a test can
// search the function's output for it: it must never appear.
const APIKey = "lambdatest-genace-key-must-never-be-logged"

// Visibility is how long Messages leaves what it received hidden.
const Visibility = 3 * time.Minute

// Stack is an invoke.Stack for one test: every test has its own
// resources, so tests may run in parallel and see only their own writes.
type Stack struct {
	*invoke.Stack
	// QueueURLs maps each action to its queue's URL (the topology's
	// queue for the action, as the stack created it).
	QueueURLs map[message.Action]string

	files invoke.SAMFiles
}

// NewStack stands up the stack, removed on t.Cleanup; sim configures the
// simulator (its APIKey is replaced by APIKey). Without the endpoints
// (.ci/dynamodb-local.sh, .ci/moto.sh) the test skips (fails under
// GENJOBS_REQUIRE_INTEGRATION=1).
func NewStack(t testing.TB, sim genacesim.Config) *Stack {
	t.Helper()
	for _, v := range []string{"AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_SECRETS_MANAGER"} {
		testenv.Endpoint(t, v)
	}
	tmpl, err := invoke.LoadTemplate(Root(t))
	if err != nil {
		t.Fatalf("lambdatest: %v", err)
	}
	st, err := invoke.NewStack(context.Background(), invoke.StackConfig{
		Template: tmpl, Endpoints: invoke.EndpointsFromEnv(), Sim: &sim, APIKey: APIKey, Stem: "genjobs-rie",
	})
	if err != nil {
		t.Fatalf("lambdatest: %v", err)
	}
	t.Cleanup(st.Close)
	s := &Stack{Stack: st, QueueURLs: map[message.Action]string{}}
	if s.files, err = st.WriteSAMFiles(t.TempDir()); err != nil {
		t.Fatalf("lambdatest: %v", err)
	}
	for _, q := range st.Queues {
		if tq, ok := topology.Stack.Queue(q.LogicalID); ok && tq.Action != "" {
			s.QueueURLs[tq.Action] = q.URL
		}
	}
	for _, action := range message.Actions {
		if s.QueueURLs[action] == "" {
			t.Fatalf("lambdatest: the stack has no queue for %s", action)
		}
	}
	return s
}

// Config is the emulator configuration for the function (a folder under
// functions/) on this stack: the template's timeout and memory size, and
// the environment invoke.Stack.Env reads back from SAM's --env-vars file.
func (s *Stack) Config(t testing.TB, function string) emulator.Config {
	t.Helper()
	f, ok := invoke.Lookup(s.Template, function)
	if !ok {
		t.Fatalf("lambdatest: no function %s in the template", function)
	}
	env, err := s.Stack.Env(s.files, f.LogicalID)
	if err != nil {
		t.Fatalf("lambdatest: %v", err)
	}
	return emulator.Config{Function: function, Env: env, Timeout: f.Timeout, MemoryMB: f.MemoryMB}
}

// Messages returns the envelopes waiting on action's queue: it long-polls
// up to wait for the first, then reads on until a one-second poll comes
// back empty, so a test can assert that exactly the expected messages
// were sent. Messages stay hidden for Visibility afterwards (nothing is
// deleted). An undecodable body fails the test: only envelopes may reach
// a queue.
func (s *Stack) Messages(t testing.TB, action message.Action, wait time.Duration) []message.Envelope {
	t.Helper()
	ctx := context.Background()
	var out []message.Envelope
	for {
		msgs, err := s.Queue.Receive(ctx, s.QueueURLs[action], queue.MaxReceive, wait, Visibility)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			return out
		}
		for _, m := range msgs {
			env, err := message.Decode(m.Body)
			if err != nil {
				t.Fatalf("%s queue: message %s: %v (body %s)", action, m.ID, err, m.Body)
			}
			out = append(out, env)
		}
		wait = time.Second
	}
}

// Received returns event (a sample SQS event) with each record passed
// through its queue of this stack (invoke.PassThrough), so it carries a
// receipt handle a function can renew. The records stay in flight.
func (s *Stack) Received(t testing.TB, event []byte) []byte {
	t.Helper()
	out, _, err := invoke.PassThrough(context.Background(), s.Queue, event, s.QueueFor)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
