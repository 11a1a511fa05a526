package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/genjobs/genjobs/client"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/intake"
	"github.com/genjobs/genjobs/internal/operation"
)

// sigV4Identity accepts a request only when re-signing it (its signed
// headers, its body's sha256, its time) with c for lambda in region gives
// its Authorization (the client's own tests hold the details).
func sigV4Identity(c aws.Credentials, region string) intake.Identity {
	return func(r *http.Request) (string, error) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		sum := sha256.Sum256(body)
		at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
		_, signed, _ := strings.Cut(r.Header.Get("Authorization"), "SignedHeaders=")
		signed, _, _ = strings.Cut(signed, ",")
		cp := r.Clone(context.Background())
		cp.Header, cp.URL.Host = http.Header{}, r.Host
		for _, h := range strings.Split(signed, ";") {
			if vs := r.Header.Values(h); len(vs) > 0 {
				cp.Header[http.CanonicalHeaderKey(h)] = vs
			}
		}
		if err != nil || v4.NewSigner().SignHTTP(context.Background(), c, cp, hex.EncodeToString(sum[:]), "lambda", region, at) != nil ||
			cp.Header.Get("Authorization") != r.Header.Get("Authorization") {
			return "", errors.New("bad signature")
		}
		return "arn:aws:iam::123456789012:user/cli", nil
	}
}

// TestCreateAndStatusCommands drive the real intake handler with the
// credentials of the environment (so the test is not parallel).
func TestCreateAndStatusCommands(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDCLITEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "cli-test-secret")
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	st := handlertest.OpenStore(t, "bolt")
	out := &handlertest.Outbox{}
	svc, err := intake.New(intake.Deps{Store: st, Sender: out, Catalog: intake.Catalog{"flux-pro-2": 12}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler(sigV4Identity(aws.Credentials{AccessKeyID: "AKIDCLITEST", SecretAccessKey: "cli-test-secret"}, "eu-west-1")))
	defer srv.Close()
	t.Setenv("GENJOBS_API_URL", srv.URL)
	input := filepath.Join(t.TempDir(), "input.json")
	if err := os.WriteFile(input, []byte(`{"prompt": "a lighthouse"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	create := []string{"create", "--operation-id", "op-cli", "--user-id", "user-1", "--model", "flux-pro-2", "--budget", "50"}

	for _, c := range []struct {
		name    string
		args    []string
		code    int
		stdout  string // a part of it
		stderr  string
		noInput bool
	}{
		{"create", append(create, "--input", "@"+input), 0, "created op-cli: prepared (revision 1, spec revision 1, terminal false)", "", false},
		{"create again, as JSON", append(create, "--input", `{"prompt":"a lighthouse"}`, "--json"), 0, `"phase": "prepared"`, "", false},
		{"create, another request", append(create, "--input", `{"prompt":"a lighthouse at dusk"}`), 1, "", "409 operation_id_conflict (operation_id)", true},
		{"create, bad budget", []string{"create", "--operation-id", "op-2", "--user-id", "user-1", "--model", "flux-pro-2", "--input", "{}", "--budget", "0"},
			1, "", "400 invalid_field (budget_credits)", false},
		{"create, no input", create, 2, "", "--input is required", false},
		{"create, input not JSON", append(create, "--input", "prompt"), 2, "", "--input is not JSON", false},
		{"create, no such file", append(create, "--input", "@/nonexistent/input.json"), 2, "", "--input: open", false},
		{"create, bad URL", append(create, "--input", "{}", "--url", "ftp://x"), 2, "", `endpoint "ftp://x"`, false},
		{"status", []string{"status", "op-cli"}, 0, "op-cli: prepared (revision 1", "", false},
		{"status, not found", []string{"status", "op-none"}, 1, "", "404 not_found", false},
		{"status, no id", []string{"status"}, 2, "", "want exactly one OPERATION_ID", false},
	} {
		code, stdout, stderr := genjobs(t, c.args...)
		if code != c.code || !strings.Contains(stdout, c.stdout) || !strings.Contains(stderr, c.stderr) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d with %q / %q", c.name, code, stdout, stderr, c.code, c.stdout, c.stderr)
		}
		if strings.Contains(stdout+stderr, "lighthouse") {
			t.Errorf("%s: the input is printed", c.name)
		}
	}
	if out.Len() != 1 {
		t.Fatalf("%d dispatches, want 1", out.Len())
	}

	// --wait returns once the operation ends.
	rec, _ := st.Get(context.Background(), "op-cli")
	next := rec.Clone()
	next.Phase, next.Schedule = operation.PhaseRejected, nil
	if _, err := st.Update(context.Background(), next, rec.Revision); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := genjobs(t, "status", "op-cli", "--wait", "--json")
	var got client.Status
	if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || got.Phase != client.PhaseRejected || !got.Terminal {
		t.Fatalf("status --wait: exit %d %s %s", code, stdout, stderr)
	}
	if code, _, stderr := genjobs(t, "status", "op-cli", "--url", ""); code != 2 || !strings.Contains(stderr, "--url (or GENJOBS_API_URL) is required") {
		t.Fatalf("no URL: exit %d %s", code, stderr)
	}
}
