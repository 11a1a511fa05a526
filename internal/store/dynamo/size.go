package dynamo

import (
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// WriteUnit is the item size one write request unit covers: a write costs
// ceil(max(old, new item size) / WriteUnit) units, at least one.
const WriteUnit = 1024

// ItemSize is an item's size as DynamoDB bills it ("DynamoDB item sizes
// and formats", Amazon DynamoDB Developer Guide): the UTF-8 bytes of each
// attribute name plus its value; a string or binary its bytes, a number 1
// byte per two significant digits (leading and trailing zeros trimmed)
// plus 1, a Boolean or null 1, a list or map 3 plus 1 per element plus
// the elements (a map's nested names included), a set its elements.
func ItemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name) + valueSize(v)
	}
	return n
}

// WriteUnits is what a write that replaces an item of size old (0: none)
// by one of size new costs.
func WriteUnits(old, new int) int {
	return max(1, (max(old, new)+WriteUnit-1)/WriteUnit)
}

func valueSize(v types.AttributeValue) int {
	switch t := v.(type) {
	case *types.AttributeValueMemberS:
		return len(t.Value)
	case *types.AttributeValueMemberN:
		return numberSize(t.Value)
	case *types.AttributeValueMemberB:
		return len(t.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberM:
		return 3 + len(t.Value) + ItemSize(t.Value)
	case *types.AttributeValueMemberL:
		n := 3 + len(t.Value)
		for _, e := range t.Value {
			n += valueSize(e)
		}
		return n
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range t.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, s := range t.Value {
			n += numberSize(s)
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, b := range t.Value {
			n += len(b)
		}
		return n
	}
	return 0
}

// numberSize is 1 byte per two significant digits, plus 1.
func numberSize(s string) int {
	s = strings.TrimLeft(s, "+-")
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		s = s[:i]
	}
	s = strings.ReplaceAll(s, ".", "")
	s = strings.Trim(s, "0")
	return (utf8.RuneCountInString(s)+1)/2 + 1
}

// IndexItemSize is the size of item's entry in StatusIndex, which projects
// keys only: the table's key and the index's key attributes. Zero when
// the item is not in the index.
func IndexItemSize(item map[string]types.AttributeValue) int {
	if _, in := item[AttrStatusPK]; !in {
		return 0
	}
	n := 0
	for _, name := range []string{AttrPK, AttrSK, AttrStatusPK, AttrStatusSK} {
		if v, ok := item[name]; ok {
			n += len(name) + valueSize(v)
		}
	}
	return n
}

// IndexWriteUnits is what replacing item old (nil: none) by new costs in
// StatusIndex. DynamoDB writes an index only when the item enters or
// leaves it or an index key or projected attribute changes; the index
// projects keys only, so a write that keeps the item's index key costs
// nothing there, and one that moves it costs a delete of the old entry
// and a put of the new.
func IndexWriteUnits(old, new map[string]types.AttributeValue) int {
	o, n := IndexItemSize(old), IndexItemSize(new)
	if o > 0 && n > 0 && indexKey(old) == indexKey(new) {
		return 0
	}
	units := 0
	for _, size := range []int{o, n} {
		if size > 0 { // WriteUnits(0, 0) is one unit, not none
			units += WriteUnits(0, size)
		}
	}
	return units
}

func indexKey(item map[string]types.AttributeValue) [2]string {
	return [2]string{sValue(item, AttrStatusPK), sValue(item, AttrStatusSK)}
}
