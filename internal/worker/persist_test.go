package worker_test

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/worker"
)

// scripted is a store whose Update answers from a script: a record to
// stand in the way (a conflict), an error, or nil (written).
type scripted struct {
	answers []any
	writes  []operation.Record
}

func (s *scripted) Update(_ context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	s.writes = append(s.writes, rec)
	var a any
	if len(s.answers) > 0 {
		a, s.answers = s.answers[0], s.answers[1:]
	}
	switch a := a.(type) {
	case operation.Record:
		return operation.Record{}, &store.ConflictError{OperationID: rec.OperationID, Expected: expected, Current: &a}
	case error:
		return operation.Record{}, a
	}
	rec.Revision = expected + 1
	return rec, nil
}

// instant is a clock whose waits end at once.
type instant struct{ clock.Clock }

func (instant) After(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch
}

func TestPersist(t *testing.T) {
	t.Parallel()
	at := func(rev int64, model string) operation.Record {
		return operation.Record{OperationID: "op-1", Revision: rev, Model: model}
	}
	// setModel rewrites the model unless it already is the one wanted.
	setModel := func(m string) worker.Mutation {
		return func(cur operation.Record) (operation.Record, error) {
			if cur.Model == m {
				return cur, worker.ErrNothingToWrite
			}
			cur.Model = m
			return cur, nil
		}
	}
	throttled := errors.New("throttled")
	for _, tc := range []struct {
		name       string
		answers    []any
		resends    int
		mutate     worker.Mutation
		wantRev    int64
		wantModel  string
		wantErr    error
		wantWrites int
		wantStale  int
	}{
		{"written", nil, 0, setModel("b"), 4, "b", nil, 1, 0},
		{"conflict: re-applied to the record as it stands", []any{at(5, "c")}, 0, setModel("b"), 6, "b", nil, 2, 1},
		{"conflict: nothing left to write", []any{at(5, "b")}, 0, setModel("b"), 5, "b", nil, 1, 1},
		{"conflict: a decision for one revision is dropped", []any{at(5, "c")}, 0, worker.OnlyAt(3, at(3, "b")), 5, "c", worker.ErrMovedOn, 1, 1},
		{"no verdict, no retry", []any{throttled}, 0, setModel("b"), 3, "a", throttled, 1, 0},
		{"no verdict, retried", []any{throttled, throttled}, 7, setModel("b"), 4, "b", nil, 3, 0},
		{"no verdict, sent again once", []any{throttled, throttled}, 1, setModel("b"), 3, "a", throttled, 2, 0},
		{"conflicts beyond the attempts", []any{at(4, "c"), at(5, "c"), at(6, "c"), at(7, "c"), at(8, "c"), at(9, "c"), at(10, "c"), at(11, "c")},
			0, setModel("b"), 11, "c", store.ErrConflict, 8, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := &scripted{answers: tc.answers}
			var mout bytes.Buffer
			clk := clock.NewManual(handlertest.Start)
			p := worker.Persister{Store: st, Clock: instant{clk}, Metrics: metrics.New(&mout, "test", clk), Action: "act", Resends: tc.resends, Backoff: 100 * time.Millisecond}
			got, err := p.Persist(context.Background(), at(3, "a"), "m-1", tc.mutate)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if got.Revision != tc.wantRev || got.Model != tc.wantModel {
				t.Errorf("record r%d %q, want r%d %q", got.Revision, got.Model, tc.wantRev, tc.wantModel)
			}
			if len(st.writes) != tc.wantWrites {
				t.Errorf("%d writes, want %d", len(st.writes), tc.wantWrites)
			}
			for _, w := range st.writes {
				if w.LastAppliedMessageID != "m-1" {
					t.Errorf("write not stamped with the message: %+v", w)
				}
			}
			if n := strings.Count(mout.String(), `"`+metrics.StaleWrites+`":1`); n != tc.wantStale {
				t.Errorf("%d stale writes counted, want %d:\n%s", n, tc.wantStale, mout.String())
			}
		})
	}
}

// zoned is a clock that tells the time in another zone than UTC, as
// clock.Real does on a host whose local zone is not UTC.
type zoned struct{ clock.Clock }

var cet = time.FixedZone("CET", 3600)

func (z zoned) Now() time.Time { return z.Clock.Now().In(cet) }

// TestPersistedTimesAreUTC: the clock keeps the host's zone (and its
// monotonic reading); what a store keeps is in UTC, whichever store.
func TestPersistedTimesAreUTC(t *testing.T) {
	t.Parallel()
	for _, kind := range handlertest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := handlertest.OpenStore(t, kind)
			clk := zoned{clock.NewManual(handlertest.Start)}
			now := clk.Now()
			rec := handlertest.Prepared("op-utc-" + kind)
			rec.Timestamps = operation.Timestamps{Created: now, Updated: now}
			rec = handlertest.Create(t, st, rec)
			p := worker.Persister{Store: st, Clock: clk, Metrics: metrics.Discard(), Action: "test"}
			if _, err := p.Persist(ctx, rec, "m-1", func(cur operation.Record) (operation.Record, error) {
				n, err := operation.ClaimSubmission(cur, "w", "m-1", now)
				n.Schedule = &operation.NextAction{Action: "submit_generation", Due: now.Add(time.Minute)}
				return n, err
			}); err != nil {
				t.Fatal(err)
			}
			got, err := st.Get(ctx, rec.OperationID)
			if err != nil {
				t.Fatal(err)
			}
			if n := nonUTC(reflect.ValueOf(got), "record"); len(n) > 0 || got.Claim == nil || got.Schedule == nil {
				t.Errorf("record kept times not in UTC: %v (claim %v, schedule %v)", n, got.Claim, got.Schedule)
			}
			rv := review.ForRecord("r-utc", review.SourceHandler, &got, now)
			if _, err := st.PutReview(ctx, rv); err != nil {
				t.Fatal(err)
			}
			if err := st.ResolveReview(ctx, rv.ID, "test", "resolved", now); err != nil {
				t.Fatal(err)
			}
			kept, err := st.GetReview(ctx, rv.ID)
			if err != nil {
				t.Fatal(err)
			}
			if n := nonUTC(reflect.ValueOf(kept), "review"); len(n) > 0 || kept.ClosedAt.IsZero() {
				t.Errorf("review kept times not in UTC: %v (closed at %v)", n, kept.ClosedAt)
			}
		})
	}
}

// nonUTC lists the set times under v that are not in UTC.
func nonUTC(v reflect.Value, path string) []string {
	if t, ok := v.Interface().(time.Time); ok {
		if !t.IsZero() && t.Location() != time.UTC {
			return []string{path + "=" + t.String()}
		}
		return nil
	}
	var out []string
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			out = nonUTC(v.Elem(), path)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				out = append(out, nonUTC(v.Field(i), path+"."+v.Type().Field(i).Name)...)
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			out = append(out, nonUTC(v.Index(i), path)...)
		}
	}
	return out
}
