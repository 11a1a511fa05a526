package invoke

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/events"

	"github.com/genjobs/genjobs/internal/message"
)

// EventKind says which event source an event file imitates.
type EventKind string

// The event kinds the functions receive.
const (
	// KindSQS is an SQS event source mapping batch ({"Records": [...]}).
	KindSQS EventKind = "sqs"
	// KindScheduled is an EventBridge (CloudWatch Events) or EventBridge
	// Scheduler event, what a `Type: Schedule` event invokes with.
	KindScheduled EventKind = "scheduled"
	// KindOther is any other JSON object.
	KindOther EventKind = "other"
)

// Event is one event file, read and checked.
type Event struct {
	Path    string              // the file as given
	Raw     []byte              // the file's content
	Kind    EventKind           // the event source it imitates
	Records []events.SQSMessage // an SQS event's records
	// Warnings are oddities the event source would never produce (a
	// stale md5OfBody, say). The invocation still runs: Lambda does not
	// check them either.
	Warnings []string
}

// ReadEvent reads and checks an event file: it must exist and hold one
// JSON object; an SQS event must have 1 to 10 records from aws:sqs, each
// with a message id and a body.
func ReadEvent(path string) (*Event, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("event file %s does not exist (the samples are in events/)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("read event %s: %w", path, err)
	}
	return ParseEvent(path, raw)
}

// ParseEvent checks raw as ReadEvent does; path only names it in errors.
func ParseEvent(path string, raw []byte) (*Event, error) {
	ev := &Event{Path: path, Raw: raw}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("event %s is not a JSON object: %s", path, jsonError(raw, err))
	}
	if doc == nil {
		return nil, fmt.Errorf("event %s is not a JSON object: null", path)
	}
	switch {
	case doc["Records"] != nil:
		ev.Kind = KindSQS
		var sqsEv events.SQSEvent
		var fields []map[string]json.RawMessage
		if err := json.Unmarshal(raw, &sqsEv); err != nil {
			return nil, fmt.Errorf("event %s: Records is not a list of SQS records: %s", path, jsonError(raw, err))
		}
		if err := json.Unmarshal(doc["Records"], &fields); err != nil {
			return nil, fmt.Errorf("event %s: Records is not a list of SQS records: %v", path, err)
		}
		if n := len(sqsEv.Records); n == 0 || n > 10 {
			return nil, fmt.Errorf("event %s has %d records; the SQS event source mapping delivers 1 to 10", path, n)
		}
		for i, r := range sqsEv.Records {
			if r.EventSource != "aws:sqs" || r.MessageId == "" {
				return nil, fmt.Errorf("event %s: record %d is not an SQS record (eventSource %q, messageId %q)", path, i, r.EventSource, r.MessageId)
			}
			if _, ok := fields[i]["body"]; !ok {
				return nil, fmt.Errorf("event %s: record %s has no body", path, r.MessageId)
			}
			if r.Md5OfBody != md5Hex(r.Body) {
				ev.Warnings = append(ev.Warnings, fmt.Sprintf("record %s: md5OfBody %s is not the body's MD5 %s (recompute it after editing a body)", r.MessageId, r.Md5OfBody, md5Hex(r.Body)))
			}
		}
		ev.Records = sqsEv.Records
	case isScheduled(doc):
		ev.Kind = KindScheduled
	default:
		ev.Kind = KindOther
	}
	return ev, nil
}

// isScheduled recognises EventBridge's scheduled event ("detail-type":
// "Scheduled Event", from aws.events or aws.scheduler).
func isScheduled(doc map[string]json.RawMessage) bool {
	var detailType, source string
	_ = json.Unmarshal(doc["detail-type"], &detailType)
	_ = json.Unmarshal(doc["source"], &source)
	return detailType == "Scheduled Event" && (source == "aws.events" || source == "aws.scheduler")
}

// OperationIDs lists the operations the event's record bodies name, in
// order, without repeats; bodies that are not envelopes name none.
func (ev *Event) OperationIDs() []string {
	var ids []string
	seen := map[string]bool{}
	for _, r := range ev.Records {
		env, err := message.Decode([]byte(r.Body))
		if err != nil || seen[env.OperationID] {
			continue
		}
		seen[env.OperationID] = true
		ids = append(ids, env.OperationID)
	}
	return ids
}

// jsonError says where JSON went wrong, with the line number.
func jsonError(raw []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var off int64 = -1
	switch {
	case errors.As(err, &syn):
		off = syn.Offset
	case errors.As(err, &typ):
		off = typ.Offset
	}
	if off < 0 || off > int64(len(raw)) {
		return err.Error()
	}
	line := 1 + bytes.Count(raw[:off], []byte("\n"))
	return fmt.Sprintf("line %d: %v", line, err)
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}
