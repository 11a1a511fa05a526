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
	if code != 0 || !strings.Contains(out, "next action   reconcile") || !strings.Contains(out, "--job-id ID") ||
		!strings.Contains(out, "--operator NAME --table "+table+" --dynamodb-endpoint "+endpoint) {
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

// On the deployed store too, acknowledge appends its audit entry without
// writing the terminal record, and settle_outside closes a refund Genace
// never settled.
func TestAcknowledgeAndSettleOutsideAgainstDynamoDB(t *testing.T) {
	endpoint := testenv.Endpoint(t, "AWS_ENDPOINT_URL_DYNAMODB")
	client, table := handlertest.DynamoTable(t)
	st := dynamo.New(client, table)
	done := handlertest.Prepared("op-ack")
	done.Phase, done.RemoteJobID = operation.PhaseDelivered, "job_ack"
	handlertest.Create(t, st, done)
	refund := handlertest.Prepared("op-refund")
	refund.Phase, refund.RemoteJobID, refund.Settlement = operation.PhaseFailed, "job_refund", operation.SettlementUnresolved
	refund.Remote = &operation.Snapshot{State: operation.RemoteFailed, Credits: operation.Credits{Charged: 12, RefundState: operation.RefundNone}}
	refund.Parked = &operation.ParkedState{Reason: "refund_state none with 12 charged after the accounting budget", At: handlertest.Start}
	refund.LastError = operation.CategoryRefundUnresolved
	handlertest.Create(t, st, refund)

	flags := []string{"--table", table, "--dynamodb-endpoint", endpoint}
	for _, op := range []string{"frank", "grace"} {
		if code, out, errOut := genjobs(t, append([]string{"replay", "op-ack", "--action", "acknowledge", "--operator", op}, flags...)...); code != 0 {
			t.Fatalf("acknowledge by %s: %d %s %s", op, code, out, errOut)
		}
	}
	code, out, _ := genjobs(t, append([]string{"audit", "op-ack"}, flags...)...)
	if code != 0 || strings.Count(out, "acknowledged") != 2 || !strings.Contains(out, "frank") || !strings.Contains(out, "grace") {
		t.Errorf("audit of two acknowledgements: %d\n%s", code, out)
	}
	if got := handlertest.Get(t, st, "op-ack"); got.Revision != 1 {
		t.Errorf("acknowledging wrote the terminal record: r%d", got.Revision)
	}
	code, out, errOut := genjobs(t, append([]string{"replay", "op-refund", "--action", "settle_outside", "--operator", "acct", "--reason", "credit note CN-9"}, flags...)...)
	if code != 0 {
		t.Fatalf("settle_outside: %d %s %s", code, out, errOut)
	}
	if got := handlertest.Get(t, st, "op-refund"); !got.Terminal() || got.Settlement != operation.SettlementSettled {
		t.Errorf("after settle_outside: %s/%s", got.Phase, got.Settlement)
	}
	code, out, _ = genjobs(t, append([]string{"audit", "op-refund"}, flags...)...)
	if code != 0 || !strings.Contains(out, "credit note CN-9") || !strings.Contains(out, "12") {
		t.Errorf("audit of settle_outside: %d\n%s", code, out)
	}
}
