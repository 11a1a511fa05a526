package dynamo

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/store/storetest"
)

// keptNames are the record fields stored under their own names: the
// index keys, the revision the write condition tests, and names already
// as short as a short one.
var keptNames = []string{AttrOperationID, AttrRemoteJobID, attrRevision, "at"}

// TestEveryFieldHasItsName: a field added to the record must pick a
// short name (or be kept on purpose), and no field's own name may be
// another's short name, which decoding would rename.
func TestEveryFieldHasItsName(t *testing.T) {
	t.Parallel()
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, path string) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || ty == reflect.TypeFor[time.Time]() || seen[ty] {
			return
		}
		seen[ty] = true
		for f := range ty.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("dynamodbav"), ",")
			if _, short := recordLongNames[name]; short {
				t.Errorf("%s.%s is stored as %q, which is another field's short name", path, f.Name, name)
			}
			if _, ok := recordNames[name]; !ok && !slices.Contains(keptNames, name) {
				t.Errorf("%s.%s (%q) has no short name in recordNames", path, f.Name, name)
			}
			walk(f.Type, path+"."+f.Name)
		}
	}
	walk(reflect.TypeFor[operation.Record](), "Record")
}

// TestCompactRoundTrip: the compact form loses nothing, times at the
// edges of the numeric form included, and a non-canonical hash stays a
// string.
func TestCompactRoundTrip(t *testing.T) {
	t.Parallel()
	early := time.Date(1, 2, 3, 4, 5, 6, 7, time.UTC)
	late := time.Date(3000, 1, 1, 0, 0, 0, 1, time.UTC)
	for name, change := range map[string]func(*operation.Record){
		"full":            func(*operation.Record) {},
		"year 1":          func(r *operation.Record) { r.Timestamps.Accepted = &early },
		"year 3000":       func(r *operation.Record) { r.Remote.ObservedAt = late },
		"upper-case hash": func(r *operation.Record) { r.Deliveries[0].SHA256 = strings.Repeat("AB", 32) },
		"short hash":      func(r *operation.Record) { r.Remote.Outputs[0].SHA256 = "abc" },
	} {
		rec := storetest.FullRecord("op-1")
		change(&rec)
		rec = rec.UTC()
		item, err := marshalRecord(rec)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := decodeRecord(item)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got.UTC(), rec) {
			t.Errorf("%s: round trip\n got %+v\nwant %+v", name, got, rec)
		}
	}
}

// TestDecodesLongForm: an item as the store wrote it before the compact
// form (attributevalue's default encoding) decodes to the same record.
func TestDecodesLongForm(t *testing.T) {
	t.Parallel()
	rec := storetest.FullRecord("op-1").UTC()
	item, err := attributevalue.MarshalMap(rec)
	if err != nil {
		t.Fatal(err)
	}
	item[AttrTerminal] = &types.AttributeValueMemberBOOL{Value: false}
	got, err := decodeRecord(item)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.UTC(), rec) {
		t.Errorf("long form decoded as\n%+v\nwant\n%+v", got, rec)
	}
	compact, err := marshalRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if c, l := ItemSize(compact), ItemSize(item); c*10 > l*7 {
		t.Errorf("compact form %d bytes, long form %d: want at least 30%% smaller", c, l)
	}
}

// TestHashesStoredAsBytes: every SHA-256 of the record, the outputs' and
// the intake request's digest, is stored as its 32 bytes, not 64 hex
// characters.
func TestHashesStoredAsBytes(t *testing.T) {
	t.Parallel()
	rec := storetest.FullRecord("op-1").UTC()
	item, err := marshalRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	b, ok := item[requestHashName].(*types.AttributeValueMemberB)
	if !ok || len(b.Value) != 32 {
		t.Fatalf("request digest stored as %#v, want 32 bytes under %q", item[requestHashName], requestHashName)
	}
	outs := item[recordNames["deliveries"]].(*types.AttributeValueMemberL).Value
	if h, ok := outs[0].(*types.AttributeValueMemberM).Value[hashName].(*types.AttributeValueMemberB); !ok || len(h.Value) != 32 {
		t.Fatalf("a delivery's sha256 stored as %#v, want 32 bytes", outs[0])
	}
}
