package notify_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"github.com/genjobs/genjobs/client"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/notify"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/bolt"
	"github.com/genjobs/genjobs/internal/sweep"
)

var t0 = time.Date(2026, 12, 4, 1, 0, 0, 0, time.UTC)

// flaky refuses its first fails publishes, then appends to the file sink.
type flaky struct {
	fails    atomic.Int32
	attempts atomic.Int32
	file     *notify.File
}

func (f *flaky) Publish(ctx context.Context, evs []notify.Event) error {
	f.attempts.Add(1)
	if f.fails.Add(-1) >= 0 {
		return errors.New("bus unavailable")
	}
	return f.file.Publish(ctx, evs)
}

// marks counts SetEvent calls on a real store.
type marks struct {
	store.Store
	n atomic.Int32
}

func (m *marks) SetEvent(ctx context.Context, rec operation.Record) (operation.Record, error) {
	m.n.Add(1)
	return m.Store.SetEvent(ctx, rec)
}

// A send that fails after the write leaves the event owed; the sweep
// sends it once it is past the horizon, under the same id, marks it sent
// once, and a later run sends nothing. A sink that keeps failing gets the
// event deferred behind the sweep's other work.
func TestUnsentEventResentBySweep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// fails is how many publishes the sink refuses.
		fails int32
		// sent: the sweep's run sent it; attempts: publishes in all.
		sent     bool
		attempts int32
	}{
		{"the writer's send fails, the sweep's works", 1, true, 2},
		{"the sweep's send fails too: deferred", 2, false, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir := t.TempDir()
			db, err := bolt.Open(filepath.Join(dir, "genjobs.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			st := &marks{Store: db}
			sink := &flaky{file: &notify.File{Path: filepath.Join(dir, "events.jsonl")}}
			sink.fails.Store(tt.fails)
			pub := notify.New(sink, st, nil, metrics.Discard())

			rec := operation.Record{OperationID: "op-1", Phase: operation.PhasePrepared, Input: []byte(`{"prompt":"SECRET-PROMPT"}`),
				Timestamps: operation.Timestamps{Created: t0, Updated: t0}}
			rec, err = st.Create(ctx, rec)
			if err != nil {
				t.Fatal(err)
			}
			next := rec.Clone()
			next.Phase, next.Remote = operation.PhaseDelivered, &operation.Snapshot{State: operation.RemoteSucceeded}
			next.Deliveries = []operation.Delivery{{Index: 0, Key: "outputs/op-1/0.png", SizeBytes: 10, SHA256: strings.Repeat("a", 64)}}
			next.Timestamps.Updated = t0.Add(time.Minute)
			written, err := st.Update(ctx, next, rec.Revision)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pub.Send(ctx, written); err == nil {
				t.Fatal("the first send: want the sink's error")
			}
			if got, _ := st.Get(ctx, "op-1"); got.Event == nil || got.Event.Sent {
				t.Fatalf("after a failed send: event %+v, want owed and unsent", got.Event)
			}

			clk := clock.NewManual(t0.Add(10 * time.Minute))
			sw := sweep.New(sweep.Deps{Store: st, Events: pub, Clock: clk, Log: slog.New(slog.DiscardHandler), Metrics: metrics.Discard()},
				sweep.Config{ClaimTimeout: 2 * time.Minute, OverdueAfter: 5 * time.Minute})
			res, err := sw.Sweep(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if res.EventsSent != b2i(tt.sent) || res.EventsFailed != 1-b2i(tt.sent) {
				t.Fatalf("sweep %+v, want sent %t", res, tt.sent)
			}
			got, _ := st.Get(ctx, "op-1")
			if got.Revision != written.Revision || got.Event.Sent != tt.sent {
				t.Fatalf("after the sweep: r%d event %+v, want r%d sent %t", got.Revision, got.Event, written.Revision, tt.sent)
			}
			if !tt.sent && !got.Event.Due.Equal(clk.Now().Add(sweep.EventRetry)) {
				t.Fatalf("deferred to %v, want %v", got.Event.Due, clk.Now().Add(sweep.EventRetry))
			}
			if _, err := sw.Sweep(ctx); err != nil { // at once: nothing due
				t.Fatal(err)
			}
			if n := sink.attempts.Load(); n != tt.attempts {
				t.Fatalf("%d publishes, want %d", n, tt.attempts)
			}
			// Marked sent once, or deferred once: one SetEvent either way.
			if n := st.n.Load(); n != 1 {
				t.Fatalf("%d SetEvent calls, want 1", n)
			}
			lines := readLines(t, sink.file.Path)
			if !tt.sent {
				if len(lines) != 0 {
					t.Fatalf("events file %q, want none", lines)
				}
				return
			}
			if len(lines) != 1 || strings.Contains(lines[0], "SECRET-PROMPT") {
				t.Fatalf("events file %q, want one line without the input", lines)
			}
			var ev client.Event
			if err := json.Unmarshal([]byte(lines[0]), &ev); err != nil || ev.Source != notify.Source || ev.ID == "" || ev.Time.IsZero() {
				t.Fatal(err)
			}
			want := client.EventDetail{EventID: "op-1:r2", OperationID: "op-1", Revision: 2, Phase: client.PhaseDelivered,
				RemoteState: client.RemoteSucceeded, UpdatedAt: t0.Add(time.Minute),
				Outputs: []client.Output{{Index: 0, Key: "outputs/op-1/0.png", SizeBytes: 10, SHA256: strings.Repeat("a", 64)}}}
			if ev.DetailType != operation.EventDelivered || !sameJSON(ev.Detail, want) {
				t.Fatalf("event %+v, want %s %+v", ev, operation.EventDelivered, want)
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func sameJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		out = append(out, sc.Text())
	}
	return out
}

// TestErrorCategoryIsACategory: an event's error_category is the record's
// last error only when that has a category's shape; Genace's own error
// code, kept there after a failed submission, may be any text (and echo
// the prompt), so anything else goes out as the phase.
func TestErrorCategoryIsACategory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ last, want string }{
		{"artifact_copy_failed", "artifact_copy_failed"},
		{"a fox in the snow, 4k", "failed"},
		{"https://files.example/x?X-Amz-Signature=abc", "failed"},
		{"", ""},
	} {
		rec := operation.Record{OperationID: "op-1", Revision: 2, Phase: operation.PhaseFailed, Settlement: operation.SettlementSettled, LastError: tc.last,
			Event: &operation.EventState{Revision: 2, Type: operation.EventFailed, Settlement: operation.SettlementSettled}}
		ev, ok := notify.Of(rec)
		if !ok || ev.Detail.ErrorCategory != tc.want {
			t.Errorf("last error %q: event category %q (%v), want %q", tc.last, ev.Detail.ErrorCategory, ok, tc.want)
		}
	}
}
