package benchmark

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/genjobs/genjobs/internal/dev/emulator"
	"github.com/genjobs/genjobs/internal/dev/samlocal"
)

// SecretsEndpoint is the SDK's Secrets Manager endpoint variable: cold
// starts read the Genace key from a secret there (.ci/moto.sh sets it).
const SecretsEndpoint = samlocal.EndpointPrefix + "SECRETS_MANAGER"

// DeployArch is the architecture the functions deploy on.
const DeployArch = "arm64"

// emptySQSEvent is an SQS batch without records: the first invoke
// measures start, init and an empty handler run, and calls no service.
var emptySQSEvent = []byte(`{"Records":[]}`)

// ColdStartConfig says which functions to build and start.
type ColdStartConfig struct {
	// Root is the module root (modroot.Find).
	Root string
	// Functions are folders under functions/ whose bootstrap is built for
	// DeployArch and the host, and measured.
	Functions []string
	// Invoke are the functions (of Functions) started under the emulator.
	Invoke []string
	// Starts is how many fresh starts each invoked function gets.
	Starts int
}

// ColdStart is one function's figures.
type ColdStart struct {
	// Function names the folder under functions/.
	Function string
	// DeployBytes and HostBytes are the bootstrap's sizes for DeployArch
	// and for the host's architecture.
	DeployBytes, HostBytes int64
	// FirstInvokes are the fresh starts' first-invoke times, sending to
	// answer (the emulator starts the bootstrap then); empty when not
	// measured.
	FirstInvokes []time.Duration
	// PeakRSS are the bootstraps' peak RSS (VmHWM) after the first
	// invoke: what Lambda's "Max Memory Used" counts before any record.
	PeakRSS []int64
	// Skipped says why the function was not invoked, if it was not.
	Skipped string
}

// Median is the median first invoke (0 when none).
func (c ColdStart) Median() time.Duration { return median(c.FirstInvokes) }

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// MeasureColdStarts builds each function twice (deploy and host
// architecture, as the Makefile's build does: linux, no cgo,
// -tags lambda.norpc, -trimpath, stripped) and starts the Invoke ones
// cfg.Starts times under the emulator, each start a new emulator and
// bootstrap. Without the emulator, or off linux, sizes are still
// measured and Skipped says why starts were not.
func MeasureColdStarts(ctx context.Context, cfg ColdStartConfig) ([]ColdStart, error) {
	tmp, err := os.MkdirTemp("", "genjobs-bench-bootstrap-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	skip := ""
	if runtime.GOOS != "linux" {
		skip = "not on linux"
	} else if _, err := emulator.Installed(cfg.Root); err != nil {
		skip = err.Error()
	} else if os.Getenv(SecretsEndpoint) == "" {
		skip = SecretsEndpoint + " not set (run under bash .ci/moto.sh run)"
	}
	var envs map[string]map[string]string
	if skip == "" {
		if envs, err = functionEnvs(ctx, cfg.Root, os.Getenv(SecretsEndpoint)); err != nil {
			return nil, err
		}
	}
	var out []ColdStart
	for _, fn := range cfg.Functions {
		c := ColdStart{Function: fn}
		deploy := filepath.Join(tmp, DeployArch, fn, "bootstrap")
		host := filepath.Join(tmp, "host", fn, "bootstrap")
		if c.DeployBytes, err = buildBootstrap(ctx, cfg, fn, DeployArch, deploy); err != nil {
			return nil, err
		}
		if c.HostBytes, err = buildBootstrap(ctx, cfg, fn, runtime.GOARCH, host); err != nil {
			return nil, err
		}
		switch {
		case !slices.Contains(cfg.Invoke, fn):
			c.Skipped = "not invoked"
		case skip != "":
			c.Skipped = skip
		default:
			for range cfg.Starts {
				var first time.Duration
				var rss int64
				// A port found free may be taken before the emulator binds
				// it: start again.
				for attempt := 0; ; attempt++ {
					if first, rss, err = firstInvoke(ctx, cfg.Root, host, fn, envs[fn]); err == nil || attempt == 2 {
						break
					}
				}
				if err != nil {
					return nil, fmt.Errorf("cold start %s: %w", fn, err)
				}
				c.FirstInvokes = append(c.FirstInvokes, first)
				if rss > 0 {
					c.PeakRSS = append(c.PeakRSS, rss)
				}
			}
		}
		out = append(out, c)
	}
	return out, nil
}

func buildBootstrap(ctx context.Context, cfg ColdStartConfig, fn, arch, path string) (int64, error) {
	if err := emulator.Compile(ctx, cfg.Root, "./functions/"+fn, arch, path); err != nil {
		return 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// functionEnvs are each function's environment as template.yaml gives it
// (samlocal, plus what the Lambda runtime adds), by folder under
// functions/, with every AWS endpoint and Genace on a closed port (init
// only builds clients, an empty batch calls nothing) but the Genace key's
// secret, a real one at secretsURL: reading it is part of a cold start.
func functionEnvs(ctx context.Context, root, secretsURL string) (map[string]map[string]string, error) {
	t, err := samlocal.Load(filepath.Join(root, samlocal.TemplateFile))
	if err != nil {
		return nil, err
	}
	dead := "http://127.0.0.1:9"
	endpoints := map[string]string{}
	for _, fn := range t.Functions {
		for name := range fn.Env {
			if strings.HasPrefix(name, samlocal.EndpointPrefix) {
				endpoints[name] = dead
			}
		}
	}
	endpoints[SecretsEndpoint] = secretsURL
	sm := secretsmanager.New(secretsmanager.Options{Region: "us-east-1", BaseEndpoint: aws.String(secretsURL),
		Credentials: credentials.NewStaticCredentialsProvider("bench", "bench", "")})
	site := samlocal.Site{Region: "us-east-1", AccountID: "123456789012", Prefix: "genjobs-bench", SQS: dead}
	l := t.Names(site)
	if err := t.Wire(ctx, l, site, samlocal.Wiring{GenaceURL: dead, APIKey: "bench-key", Secrets: &samlocal.Secrets{Client: sm}, Endpoints: endpoints}); err != nil {
		return nil, err
	}
	f, err := t.EnvFile(l)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, fn := range t.Functions {
		env, err := t.Apply(f, fn.LogicalID)
		if err != nil {
			return nil, err
		}
		maps.Copy(env, fn.Runtime("bench", "bench"))
		out[fn.Dir()] = env
	}
	return out, nil
}

// firstInvoke starts one emulator with a fresh bootstrap, sends the
// empty batch, times the answer and reads the bootstrap's peak RSS (0
// where /proc does not tell it).
func firstInvoke(ctx context.Context, root, bootstrap, name string, env map[string]string) (time.Duration, int64, error) {
	emu, err := emulator.Start(ctx, emulator.Config{Root: root, Bootstrap: bootstrap, Function: name, Env: env,
		Timeout: time.Minute, MemoryMB: 256, Region: "us-east-1"})
	if err != nil {
		return 0, 0, err
	}
	defer emu.Stop()
	ictx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	status, body, err := emu.Invoke(ictx, emptySQSEvent)
	if err != nil {
		return 0, 0, err
	}
	if status != http.StatusOK || bytes.Contains(body, []byte(`"errorType"`)) {
		return 0, 0, fmt.Errorf("invoke answered %d %s\n%s", status, body, emu.Stdout())
	}
	return emu.FirstInvoke(), peakRSS(emu.PID(), bootstrap), nil
}

// peakRSS is the VmHWM, in bytes, of the process running exe: pid itself
// or one below it, found through each thread's children list; 0 when
// /proc does not say.
func peakRSS(pid int, exe string) int64 {
	if path, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && path == exe {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		_, hwm, _ := strings.Cut(string(b), "VmHWM:")
		var kb int64
		_, _ = fmt.Sscan(hwm, &kb) // "  1234 kB"
		return kb << 10
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				if n := peakRSS(c, exe); n > 0 {
					return n
				}
			}
		}
	}
	return 0
}
