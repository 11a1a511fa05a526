package operation

import (
	"reflect"
	"testing"
	"time"
)

// TestUTCCoversEveryTime fills every time a record can hold with a time in
// another zone and checks that UTC leaves none out, so a field added later
// cannot be persisted in the writer's zone.
func TestUTCCoversEveryTime(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.FixedZone("CET", 3600))
	var rec Record
	fill(reflect.ValueOf(&rec).Elem(), at)
	orig := rec.Clone()
	got := rec.UTC()
	var set, kept int
	walk(reflect.ValueOf(got), func(v time.Time) {
		set++
		if v.Location() == time.UTC && v.Equal(at) {
			kept++
		}
	})
	if set < 14 || kept != set {
		t.Fatalf("%d of %d times in UTC at the same instant, want all (at least 14)", kept, set)
	}
	if !reflect.DeepEqual(rec, orig) {
		t.Fatal("UTC changed the record it was called on")
	}
}

// fill sets every time under v to at, allocating what it must go through.
func fill(v reflect.Value, at time.Time) {
	if v.Type() == reflect.TypeOf(time.Time{}) {
		v.Set(reflect.ValueOf(at))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		fill(v.Elem(), at)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), at)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		if v.Len() == 0 {
			v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		}
		for i := range v.Len() {
			fill(v.Index(i), at)
		}
	}
}

// walk calls fn with every time under v.
func walk(v reflect.Value, fn func(time.Time)) {
	if t, ok := v.Interface().(time.Time); ok {
		fn(t)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			walk(v.Elem(), fn)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				walk(v.Field(i), fn)
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			walk(v.Index(i), fn)
		}
	}
}
