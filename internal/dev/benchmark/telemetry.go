package benchmark

import (
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Telemetry is what a virtual run's handlers wrote to CloudWatch Logs:
// their log lines as deployed (JSON at INFO, the template's
// ApplicationLogLevel) and their EMF lines, which CloudWatch turns into
// custom metrics.
type Telemetry struct {
	mu sync.Mutex
	// Bytes are each function's log bytes, EMF lines included.
	Bytes map[string]int64
	// Series are the distinct custom metrics the EMF lines made: metric
	// name and dimension values, a Model's value written "*" (the run
	// names a model per render; a deployment has its catalog's).
	Series map[string]bool
}

func newTelemetry() *Telemetry {
	return &Telemetry{Bytes: map[string]int64{}, Series: map[string]bool{}}
}

// requestIDBytes is what lambdacontext's handler adds to each log line:
// ,"requestId":"<uuid>".
const requestIDBytes = 51

// Log is fn's logger as coldstart builds it (lambdacontext's JSON format),
// writing into t.
func (t *Telemetry) Log(fn string) *slog.Logger {
	return slog.New(slog.NewJSONHandler(telemetryWriter{t, fn, false},
		&slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: lambdacontext.ReplaceAttr}))
}

// EMF is the writer of fn's metrics emitter.
func (t *Telemetry) EMF(fn string) io.Writer { return telemetryWriter{t, fn, true} }

type telemetryWriter struct {
	t   *Telemetry
	fn  string
	emf bool
}

// Write takes one line: slog's handler and the emitter write a line each.
func (w telemetryWriter) Write(p []byte) (int, error) {
	var series []string
	n := len(p)
	if w.emf {
		series = emfSeries(p)
	} else {
		n += requestIDBytes
	}
	w.t.mu.Lock()
	defer w.t.mu.Unlock()
	w.t.Bytes[w.fn] += int64(n)
	for _, s := range series {
		w.t.Series[s] = true
	}
	return len(p), nil
}

// emfSeries names the metrics of one EMF line, "Name{Dim=value,...}".
func emfSeries(line []byte) []string {
	var meta struct {
		AWS struct {
			CloudWatchMetrics []struct {
				Dimensions [][]string
				Metrics    []struct{ Name string }
			}
		} `json:"_aws"`
	}
	var doc map[string]any
	if json.Unmarshal(line, &meta) != nil || json.Unmarshal(line, &doc) != nil {
		return nil
	}
	var out []string
	for _, d := range meta.AWS.CloudWatchMetrics {
		for _, keys := range d.Dimensions {
			var dims []string
			for _, k := range keys {
				v, _ := doc[k].(string)
				if k == "Model" {
					v = "*"
				}
				dims = append(dims, k+"="+v)
			}
			slices.Sort(dims)
			for _, m := range d.Metrics {
				out = append(out, m.Name+"{"+strings.Join(dims, ",")+"}")
			}
		}
	}
	return out
}
