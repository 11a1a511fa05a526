package notify

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/genjobs/genjobs/client"
	"github.com/genjobs/genjobs/internal/clock"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
)

// Sink sends events. An error means some may not have arrived: the
// caller sends them all again later (consumers deduplicate on EventID).
type Sink interface {
	Publish(ctx context.Context, events []Event) error
}

// PutEventsAPI is the part of the EventBridge client EventBridge uses.
type PutEventsAPI interface {
	PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

// EventBridge is the Sink on one event bus.
type EventBridge struct {
	client PutEventsAPI
	bus    string
}

// NewEventBridge returns the sink on the bus (a name or an ARN).
func NewEventBridge(client PutEventsAPI, bus string) *EventBridge {
	return &EventBridge{client: client, bus: bus}
}

// putEventsMax is the most entries one PutEvents takes.
const putEventsMax = 10

// Publish implements Sink. PutEvents answers 200 also when it refused
// some entries (FailedEntryCount, an ErrorCode per entry): those make it
// an error too, naming each refused event and its code.
func (e *EventBridge) Publish(ctx context.Context, events []Event) error {
	for chunk := range slices.Chunk(events, putEventsMax) {
		entries := make([]types.PutEventsRequestEntry, len(chunk))
		for i, ev := range chunk {
			detail, err := json.Marshal(ev.Detail)
			if err != nil {
				return fmt.Errorf("put events: encode %s: %w", ev.Detail.EventID, err)
			}
			entries[i] = types.PutEventsRequestEntry{
				EventBusName: aws.String(e.bus), Source: aws.String(Source), DetailType: aws.String(string(ev.DetailType)),
				Detail: aws.String(string(detail)),
			}
		}
		out, err := e.client.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: entries})
		if err != nil {
			return fmt.Errorf("put events on %s: %w", e.bus, err)
		}
		if out.FailedEntryCount == 0 {
			continue
		}
		var refused []string
		for i, r := range out.Entries {
			if r.ErrorCode != nil && i < len(chunk) {
				refused = append(refused, chunk[i].Detail.EventID+" ("+aws.ToString(r.ErrorCode)+")")
			}
		}
		return fmt.Errorf("put events on %s: %d of %d refused: %s", e.bus, out.FailedEntryCount, len(chunk), strings.Join(refused, ", "))
	}
	return nil
}

// File is the Sink of local runs: one JSON line per event, each a
// client.Event as EventBridge hands it to a rule's target, so a local
// consumer reads what a deployed one does.
type File struct {
	Path string
	// Clock stamps each event's time (nil: the wall clock).
	Clock clock.Clock
	mu    sync.Mutex
}

// Publish implements Sink.
func (f *File) Publish(_ context.Context, events []Event) error {
	clk := f.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	var b []byte
	for _, ev := range events {
		// EventBridge's id is new on every put, as here: consumers
		// deduplicate on the detail's event_id.
		line, err := json.Marshal(client.Event{ID: rand.Text(), DetailType: ev.DetailType, Source: Source, Time: clk.Now().UTC(), Detail: ev.Detail})
		if err != nil {
			return fmt.Errorf("events file: encode %s: %w", ev.Detail.EventID, err)
		}
		b = append(append(b, line...), '\n')
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w, err := os.OpenFile(f.Path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("events file: %w", err)
	}
	_, err = w.Write(b)
	return errors.Join(err, w.Close())
}

// Discard is the Sink of a tool whose runs have no consumer (the fault
// simulation, the benchmarks): every event is accepted, so records do not
// stay in the sweep's index for want of one.
type Discard struct{}

// Publish implements Sink.
func (Discard) Publish(context.Context, []Event) error { return nil }
