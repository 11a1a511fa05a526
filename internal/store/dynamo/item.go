package dynamo

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genjobs/genjobs/internal/operation"
)

// The operation item's compact form. DynamoDB bills every write by the
// item's size rounded up to a whole WriteUnit (ItemSize), and the record's
// own field names and RFC 3339 times made an observed record about 1.4 KB:
// two units for every write. So the item stores
//   - each field under the short name recordNames gives it (a field with
//     no entry keeps its dynamodbav name);
//   - times as N, nanoseconds since the Unix epoch (11 bytes, not 30);
//   - a SHA-256 in canonical lower-case hex as its 32 bytes (B), not 64
//     characters;
//   - no attribute for a zero value (an empty string, 0, false, a zero
//     time): a missing attribute decodes to the same zero value.
//
// The index attributes (AttrStatusPK, AttrStatusSK, AttrRemoteJobID,
// AttrOperationID) keep their names and string forms, so the indexes and
// their byte order are unchanged. decodeRecord also reads the long form
// written before (long names, times as RFC 3339 strings): a record
// written by an earlier version loads, and its next write stores it
// compact.
var recordNames = map[string]string{
	// operation.Record
	"spec_revision":            "sv",
	"phase":                    "ph",
	"user_id":                  "u",
	"model":                    "m",
	"input":                    "in",
	"input_ref":                "ir",
	"request_sha256":           requestHashName,
	"authorized":               "au",
	"authorized_spec_revision": "asv",
	"budget_credits":           "bc",
	"estimated_credits":        "ec",
	"submission_claim":         "cl",
	"remote":                   "r",
	"settlement":               "se",
	"posts":                    "po",
	"deliveries":               "dl",
	"next_action":              "na",
	"counters":                 "ct",
	"timestamps":               "ts",
	"last_error_category":      "le",
	"parked":                   "pa",
	"last_applied_message_id":  "lm",
	"writer":                   "w",
	"event":                    "ev",
	// operation.Claim and operation.ParkedState (and "at")
	"owner":      "o",
	"message_id": "mi",
	"reason":     "why",
	// operation.Snapshot
	"state":              "s",
	"submission_failure": "sf",
	"progress":           "pg",
	"error_code":         "ecd",
	"credits":            "cr",
	"outputs":            "out",
	"created_at":         "ca",
	"updated_at":         "ua",
	"started_at":         "sa",
	"finished_at":        "fa",
	"observed_at":        "oa",
	// operation.Credits
	"reserved":     "rs",
	"charged":      "ch",
	"refunded":     "rf",
	"refund_state": "rfs",
	// operation.OutputDescriptor and operation.Delivery
	"content_type": "mt",
	"size_bytes":   "sz",
	"sha256":       hashName,
	"index":        "i",
	"key":          "k",
	"stored_at":    "sat",
	// operation.NextAction
	"action": "a",
	"due":    "d",
	// operation.Counters
	"observations":        "ob",
	"rate_limited":        "rl",
	"unauthorized":        "una",
	"window_observations": "wo",
	"read_failures":       "rfl",
	// operation.EventState (and "settlement", "due")
	"event_revision": "evr",
	"type":           "ty",
	"sent":           "snt",
	// operation.Timestamps
	"created":       "c",
	"updated":       "up",
	"accepted":      "acc",
	"remote_failed": "rfd",
}

// hashName is the short name of the outputs' SHA-256 fields and
// requestHashName the record's request digest's: the attributes whose
// value the compact form re-encodes (hex to bytes).
const (
	hashName        = "h"
	requestHashName = "rh"
)

// isHash reports whether the attribute named (short name) holds a SHA-256.
func isHash(short string) bool { return short == hashName || short == requestHashName }

// recordLongNames inverts recordNames, for decoding.
var recordLongNames = func() map[string]string {
	m := make(map[string]string, len(recordNames))
	for long, short := range recordNames {
		if _, dup := m[short]; dup {
			panic("dynamo: two record fields share the short name " + short)
		}
		if _, clash := recordNames[short]; clash {
			panic("dynamo: short name " + short + " is another field's long name")
		}
		m[short] = long
	}
	return m
}()

// encodeTime stores a time as its Unix nanoseconds; a zero time as NULL,
// which compact drops; one outside int64 nanoseconds' range (years
// 1678-2262) as RFC 3339, which decodeTimeS reads.
func encodeTime(t time.Time) (types.AttributeValue, error) {
	switch {
	case t.IsZero():
		return &types.AttributeValueMemberNULL{Value: true}, nil
	case t.Year() < 1678 || t.Year() > 2261:
		return &types.AttributeValueMemberS{Value: t.UTC().Format(time.RFC3339Nano)}, nil
	}
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(t.UnixNano(), 10)}, nil
}

func decodeTimeN(n string) (time.Time, error) {
	ns, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("time %q: %w", n, err)
	}
	return time.Unix(0, ns).UTC(), nil
}

func decodeTimeS(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }

// marshalRecord is the record's attributes in the compact form.
func marshalRecord(rec operation.Record) (map[string]types.AttributeValue, error) {
	item, err := attributevalue.MarshalMapWithOptions(rec, func(o *attributevalue.EncoderOptions) {
		o.EncodeTime = encodeTime
	})
	if err != nil {
		return nil, err
	}
	return compact(item), nil
}

// compact renames m's attributes to their short names and drops the
// zero ones, in nested maps too (list elements stay, so positions hold).
func compact(m map[string]types.AttributeValue) map[string]types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(m))
	for name, v := range m {
		if zero(v) {
			continue
		}
		if short, ok := recordNames[name]; ok {
			name = short
		}
		if isHash(name) {
			v = hashBytes(v)
		}
		out[name] = compactValue(v)
	}
	return out
}

// hashBytes is a hex SHA-256 as its bytes; any other value as it is, so
// hashHex restores exactly the string it was given.
func hashBytes(v types.AttributeValue) types.AttributeValue {
	s, ok := v.(*types.AttributeValueMemberS)
	if !ok || len(s.Value) != 2*sha256.Size {
		return v
	}
	b, err := hex.DecodeString(s.Value)
	if err != nil || hex.EncodeToString(b) != s.Value {
		return v
	}
	return &types.AttributeValueMemberB{Value: b}
}

func hashHex(v types.AttributeValue) types.AttributeValue {
	if b, ok := v.(*types.AttributeValueMemberB); ok {
		return &types.AttributeValueMemberS{Value: hex.EncodeToString(b.Value)}
	}
	return v
}

func compactValue(v types.AttributeValue) types.AttributeValue {
	switch t := v.(type) {
	case *types.AttributeValueMemberM:
		return &types.AttributeValueMemberM{Value: compact(t.Value)}
	case *types.AttributeValueMemberL:
		l := make([]types.AttributeValue, len(t.Value))
		for i, e := range t.Value {
			l[i] = compactValue(e)
		}
		return &types.AttributeValueMemberL{Value: l}
	}
	return v
}

// zero reports a value that decodes to its field's zero value when the
// attribute is missing. An empty map stays: it is a non-nil pointer.
func zero(v types.AttributeValue) bool {
	switch t := v.(type) {
	case *types.AttributeValueMemberNULL:
		return true
	case *types.AttributeValueMemberS:
		return t.Value == ""
	case *types.AttributeValueMemberN:
		return t.Value == "0"
	case *types.AttributeValueMemberBOOL:
		return !t.Value
	}
	return false
}

// expand is compact's inverse for names: short names back to long ones;
// long names (an item in the earlier form) pass unchanged.
func expand(m map[string]types.AttributeValue) map[string]types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(m))
	for name, v := range m {
		if isHash(name) {
			v = hashHex(v)
		}
		if long, ok := recordLongNames[name]; ok {
			name = long
		}
		switch t := v.(type) {
		case *types.AttributeValueMemberM:
			v = &types.AttributeValueMemberM{Value: expand(t.Value)}
		case *types.AttributeValueMemberL:
			l := make([]types.AttributeValue, len(t.Value))
			for i, e := range t.Value {
				if em, ok := e.(*types.AttributeValueMemberM); ok {
					e = &types.AttributeValueMemberM{Value: expand(em.Value)}
				}
				l[i] = e
			}
			v = &types.AttributeValueMemberL{Value: l}
		}
		out[name] = v
	}
	return out
}

// decodeRecord reads an operation item in either form.
func decodeRecord(item map[string]types.AttributeValue) (operation.Record, error) {
	var rec operation.Record
	err := attributevalue.UnmarshalMapWithOptions(expand(item), &rec, func(o *attributevalue.DecoderOptions) {
		o.DecodeTime.N = decodeTimeN
		o.DecodeTime.S = decodeTimeS
	})
	if err != nil {
		return rec, fmt.Errorf("unmarshal record: %w", err)
	}
	return rec, nil
}
