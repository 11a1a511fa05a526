//go:build integration

package benchmark

import (
	"context"
	"runtime"
	"testing"

	"github.com/genjobs/genjobs/internal/dev/emulator"
	"github.com/genjobs/genjobs/internal/dev/modroot"
	"github.com/genjobs/genjobs/internal/dev/testenv"
)

// One fresh start of the triage function under the emulator: the figure
// `genjobs bench` reports for every SQS-fed function.
func TestColdStartUnderTheEmulator(t *testing.T) {
	root, err := modroot.Find("")
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "linux" {
		testenv.Skip(t, "cold starts are measured on linux")
	}
	if _, err := emulator.Installed(root); err != nil {
		testenv.Skip(t, err.Error())
	}
	testenv.Endpoint(t, SecretsEndpoint)
	cs, err := MeasureColdStarts(context.Background(), ColdStartConfig{Root: root, Functions: []string{"triage"}, Invoke: []string{"triage"}, Starts: 2})
	if err != nil {
		t.Fatal(err)
	}
	c := cs[0]
	if c.DeployBytes < 1<<20 || c.HostBytes < 1<<20 {
		t.Errorf("bootstrap sizes %d and %d bytes", c.DeployBytes, c.HostBytes)
	}
	if len(c.FirstInvokes) != 2 || c.Median() <= 0 {
		t.Errorf("first invokes %v", c.FirstInvokes)
	}
	// A Go bootstrap's resident set is megabytes, never zero and never
	// the emulator's own.
	if len(c.PeakRSS) != 2 || c.PeakRSS[0] < 1<<20 || c.PeakRSS[0] > 128<<20 {
		t.Errorf("peak RSS %v bytes: not the bootstrap's", c.PeakRSS)
	}
	t.Logf("triage: %d / %d bytes, first invokes %v, peak RSS %v", c.DeployBytes, c.HostBytes, c.FirstInvokes, c.PeakRSS)
}
