package sweep_test

import (
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/sweep"
)

// The claim timeout must exceed the submit function's timeout: the error
// names both values; the deployed defaults pass.
func TestConfigCheckNamesBothValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		claim, submit time.Duration
		want          string
	}{
		{2 * time.Minute, time.Minute, ""},
		{61 * time.Second, time.Minute, ""},
		{time.Minute, time.Minute, "SWEEP_CLAIM_TIMEOUT_SECONDS is 1m0s, want more than SUBMIT_TIMEOUT_SECONDS 1m0s"},
		{30 * time.Second, time.Minute, "SWEEP_CLAIM_TIMEOUT_SECONDS is 30s, want more than SUBMIT_TIMEOUT_SECONDS 1m0s"},
	} {
		t.Run(tc.claim.String()+"/"+tc.submit.String(), func(t *testing.T) {
			t.Parallel()
			err := sweep.Config{ClaimTimeout: tc.claim}.Check(tc.submit)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check: %v; want %q", err, tc.want)
			}
		})
	}
}
