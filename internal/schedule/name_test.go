package schedule_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/schedule"
)

// Scheduler's rule for a schedule name.
var schedulerName = regexp.MustCompile(`^[0-9A-Za-z_.-]{1,64}$`)

func observe(op string, rev int64, attempt int) message.Envelope {
	return message.Envelope{Action: message.ActionObserveGeneration, OperationID: op, ExpectedRevision: rev, ExpectedRemoteJobID: "job-1", Attempt: attempt}
}

func TestScheduleNameReadable(t *testing.T) {
	t.Parallel()
	got := schedule.ScheduleName("gj-", observe("op-1", 3, 7))
	if got != "gj-observe_op-1_r3_a7" {
		t.Errorf("name = %q", got)
	}
	// Deterministic: a retry of the same envelope finds the same name.
	if again := schedule.ScheduleName("gj-", observe("op-1", 3, 7)); again != got {
		t.Errorf("second call gave %q, first %q", again, got)
	}
	// The job id is not part of the identity: it does not change the name.
	e := observe("op-1", 3, 7)
	e.ExpectedRemoteJobID = "job-2"
	if other := schedule.ScheduleName("gj-", e); other != got {
		t.Errorf("job id changed the name: %q vs %q", other, got)
	}
}

// TestScheduleNameDistinct: distinct (action, operation id, revision,
// attempt) give distinct valid names, including the inputs built to
// collide: ids that sanitise alike, ids too long that share a prefix,
// ids that look like another name's revision and attempt, and a readable
// name made to look like a hashed one.
func TestScheduleNameDistinct(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 120)
	hashedLookalike := schedule.ScheduleName("", observe("a:b", 1, 1)) // ends in _h<hex>
	envs := []message.Envelope{
		observe("op-1", 3, 7),
		observe("op-1", 3, 8),
		observe("op-1", 4, 7),
		observe("op-2", 3, 7),
		observe("op-1", 37, 0),
		observe("op-1_r3", 7, 7),
		observe("op-1_r3_a7", 1, 1),
		observe("op", 13, 7),
		observe("op_r1", 3, 7),
		observe("a:b", 1, 1),
		observe("a_b", 1, 1),
		observe("a.b", 1, 1),
		observe("a-b", 1, 1),
		observe("a::b", 1, 1),
		observe("a:_b", 1, 1),
		observe(long, 1, 1),
		observe(long+"y", 1, 1),
		observe(long[:100]+"z", 1, 1),
		observe(long, 1, 2),
		observe(long, 2, 1),
		observe(strings.Repeat("x", 44), 1, 1), // 64 characters exactly
		observe(strings.Repeat("x", 45), 1, 1), // 65: hashed
		observe(strings.TrimSuffix(hashedLookalike, "_r1_a1"), 1, 1),
		{Action: message.ActionSubmitGeneration, OperationID: "op-1", ExpectedRevision: 3, Attempt: 7},
		{Action: message.ActionDeliverArtifacts, OperationID: "op-1", ExpectedRevision: 3, ExpectedRemoteJobID: "job-1", Attempt: 7},
		{Action: message.ActionSubmitGeneration, OperationID: "a:b", ExpectedRevision: 1, Attempt: 1},
		{Action: message.ActionObserveGeneration, OperationID: "op-1", ExpectedRevision: 3, ExpectedRemoteJobID: "j", Attempt: message.MaxAttempt},
		{Action: message.ActionObserveGeneration, OperationID: long, ExpectedRevision: 1 << 62, ExpectedRemoteJobID: "j", Attempt: message.MaxAttempt},
	}
	for _, prefix := range []string{"", "gj-", "genjobs-prod-eu.", strings.Repeat("p", schedule.MaxNamePrefix)} {
		seen := map[string]message.Envelope{}
		for _, e := range envs {
			if err := e.Validate(); err != nil {
				t.Fatalf("test envelope %+v is invalid: %v", e, err)
			}
			name := schedule.ScheduleName(prefix, e)
			if !schedulerName.MatchString(name) {
				t.Errorf("prefix %q, %+v: name %q breaks Scheduler's rule", prefix, e, name)
			}
			if !strings.HasPrefix(name, prefix) {
				t.Errorf("name %q lost the prefix %q", name, prefix)
			}
			if prev, dup := seen[name]; dup {
				t.Errorf("prefix %q: %+v and %+v share the name %q", prefix, prev, e, name)
			}
			seen[name] = e
		}
	}
}
