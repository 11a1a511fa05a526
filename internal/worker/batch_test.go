package worker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/store"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want Class
	}{
		{&message.DecodeError{Field: "action", Problem: "x"}, ClassPermanent},
		{fmt.Errorf("load op: %w", store.ErrNotFound), ClassPermanent},
		{MarkPermanent(errors.New("wrong queue")), ClassPermanent},
		{fmt.Errorf("wrapped: %w", MarkPermanent(errors.New("x"))), ClassPermanent},
		{errors.New("throttled"), ClassRetry},
		{fmt.Errorf("update: %w", store.ErrConflict), ClassRetry},
		{context.DeadlineExceeded, ClassRetry},
	}
	for _, tt := range tests {
		if got := Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}

func TestRunReportsOnlyFailedRecordsAndRunsConcurrently(t *testing.T) {
	t.Parallel()
	ev := events.SQSEvent{}
	for i := range 10 {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: fmt.Sprintf("m%d", i)})
	}
	var inFlight, peak atomic.Int32
	var permanent atomic.Int32
	r := Runner{Concurrency: 4, OnPermanent: func(context.Context, events.SQSMessage, error) { permanent.Add(1) }}
	resp := r.Run(context.Background(), ev, func(_ context.Context, m events.SQSMessage) error {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		inFlight.Add(-1)
		switch m.MessageId {
		case "m1":
			return errors.New("transient")
		case "m2":
			return &message.DecodeError{Problem: "bad"}
		case "m3":
			panic("boom")
		}
		return nil
	})
	var ids []string
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	sort.Strings(ids)
	if fmt.Sprint(ids) != "[m1 m2 m3]" {
		t.Fatalf("failures = %v, want [m1 m2 m3]", ids)
	}
	if permanent.Load() != 1 {
		t.Fatalf("OnPermanent ran %d times, want 1", permanent.Load())
	}
	if p := peak.Load(); p < 2 || p > 4 {
		t.Fatalf("peak concurrency %d, want 2..4", p)
	}
}
