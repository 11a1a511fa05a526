//go:build integration

package main

import (
	"strings"
	"testing"

	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/dev/testenv"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store/dynamo"
)

func TestOperatorCommandsAgainstDynamoDB(t *testing.T) {
	endpoint := testenv.Endpoint(t, "AWS_ENDPOINT_URL_DYNAMODB")
	client, table := handlertest.DynamoTable(t)
	st := dynamo.New(client, table)
	rec := handlertest.Prepared("op-cli")
	rec.Phase, rec.RemoteJobID = operation.PhaseUncertain, ""
	rec.Parked = &operation.ParkedState{Reason: "post_outcome_unknown", At: handlertest.Start}
	handlertest.Create(t, st, rec)

	flags := []string{"--table", table, "--dynamodb-endpoint", endpoint}
	code, out, errOut := genjobs(t, append([]string{"plan", "op-cli"}, flags...)...)
	if code != 0 || !strings.Contains(out, "next action   reconcile") || !strings.Contains(out, "--job-id ID") {
		t.Fatalf("plan: %d %s %s", code, out, errOut)
	}
	url, key, c := genaceFor(t)
	job := createJob(t, c, "op-cli")
	code, out, errOut = genjobs(t, append([]string{"replay", "op-cli", "--action", "reconcile", "--operator", "grace", "--job-id", job,
		"--genace-url", url, "--genace-key", key}, flags...)...)
	if code != 0 || !strings.Contains(out, "uncertain r1 → accepted r2 (audited)") {
		t.Fatalf("replay: %d %s %s", code, out, errOut)
	}
	code, out, _ = genjobs(t, append([]string{"audit", "op-cli"}, flags...)...)
	if code != 0 || !strings.Contains(out, "grace") || !strings.Contains(out, "attach-job") {
		t.Fatalf("audit: %d %s", code, out)
	}
	got := handlertest.Get(t, st, "op-cli")
	if got.Phase != operation.PhaseAccepted || got.RemoteJobID != job {
		t.Fatalf("record %s %q", got.Phase, got.RemoteJobID)
	}
	// Another operation can never take the same job.
	other := handlertest.Prepared("op-cli-2")
	other.Phase = operation.PhaseUncertain
	handlertest.Create(t, st, other)
	code, _, errOut = genjobs(t, append([]string{"replay", "op-cli-2", "--action", "reconcile", "--operator", "grace", "--job-id", job,
		"--genace-url", url, "--genace-key", key, "--force-unverified", "--reason", "test"}, flags...)...)
	if code != 1 || !strings.Contains(errOut, "held by operation op-cli") {
		t.Fatalf("a second operation attached job %s: %d %s", job, code, errOut)
	}
}
