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
