package edm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
)

func TestValidateKey(t *testing.T) {
	tests := []struct {
		name string
		key  string
		want error
	}{
		{"empty", "", nil},
		{"1024 chars", strings.Repeat("k", 1024), nil},
		{"1025 chars", strings.Repeat("k", 1025), ErrKeyValueTooLarge},
		{"1024 non-ASCII BMP chars", strings.Repeat("日", 1024), nil},
		{"1025 non-ASCII BMP chars", strings.Repeat("日", 1025), ErrKeyValueTooLarge},
		{"512 surrogate pairs", strings.Repeat("😀", 512), nil},
		{"513 surrogate pairs", strings.Repeat("😀", 513), ErrKeyValueTooLarge},
		{"spaces quotes and percent", `a b'c"d%20e~f.g-h_i+j*k`, nil},
		{"slash", "a/b", ErrInvalidInput},
		{"backslash", `a\b`, ErrInvalidInput},
		{"hash", "a#b", ErrInvalidInput},
		{"question mark", "a?b", ErrInvalidInput},
		{"NUL", "a\x00b", ErrInvalidInput},
		{"tab", "a\tb", ErrInvalidInput},
		{"U+001F", "a\x1fb", ErrInvalidInput},
		{"DEL U+007F", "a\x7fb", ErrInvalidInput},
		{"U+0080", "a\u0080b", ErrInvalidInput},
		{"U+009F", "a\u009fb", ErrInvalidInput},
		{"U+00A0 allowed", "a\u00a0b", nil},
		{"U+007E allowed", "a~b", nil},
		{"U+0100 allowed (second byte in C1 range)", "a\u0100b", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateKey(tt.key)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("ValidateKey error = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestValidatePropertyName(t *testing.T) {
	tests := []struct {
		name string
		want error
	}{
		{"a", nil},
		{"_", nil},
		{"_1", nil},
		{"Name9", nil},
		{"Ünïcödé", nil},
		{"日本", nil},
		{"x\u0301", nil},  // combining mark (Mn) after the start
		{"x\u200d", nil},  // zero-width joiner (Cf)
		{"x\u203fy", nil}, // undertie (Pc)
		{"\u2160", nil},   // Roman numeral one (Nl) may start
		{strings.Repeat("n", 255), nil},
		{strings.Repeat("n", 256), ErrPropertyNameTooLong},
		{strings.Repeat("名", 256), ErrPropertyNameTooLong},
		{"", ErrPropertyNameInvalid},
		{"1a", ErrPropertyNameInvalid},
		{"a-b", ErrPropertyNameInvalid},
		{"a b", ErrPropertyNameInvalid},
		{"a.b", ErrPropertyNameInvalid},
		{"odata.etag", ErrPropertyNameInvalid},
		{"a@odata.type", ErrPropertyNameInvalid},
		{"\u0301x", ErrPropertyNameInvalid},    // Mn may not start
		{"\U00010400", ErrPropertyNameInvalid}, // a letter, but a surrogate pair in UTF-16
		{"a\xffb", ErrPropertyNameInvalid},
		{"$x", ErrPropertyNameInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidatePropertyName(tt.name)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("ValidatePropertyName(%q) error = %v, want %v", tt.name, err, tt.want)
			}
		})
	}
}

// withProps returns a valid entity holding n Int32 properties.
func withProps(n int) *Entity {
	e := &Entity{PartitionKey: "pk", RowKey: "rk"}
	for i := 0; i < n; i++ {
		e.Properties = append(e.Properties, Property{Name: fmt.Sprintf("p%03d", i), Value: Int32Value(int32(i))})
	}
	return e
}

// sizedEntity returns a valid entity whose Size is exactly size, built from
// binary properties, so the 1 MiB boundary can be probed byte by byte.
func sizedEntity(size int) *Entity {
	e := &Entity{}
	left := size - e.Size()
	for i := 0; ; i++ {
		name := fmt.Sprintf("b%02d", i)
		overhead := 8 + 2*len(name) + 4
		n := min(MaxBinaryLength, left-overhead)
		e.Properties = append(e.Properties, Property{Name: name, Value: BinaryValue(make([]byte, n))})
		left -= overhead + n
		if left == 0 {
			return e
		}
		if left < overhead {
			panic("cannot reach size")
		}
	}
}

func TestValidateLimits(t *testing.T) {
	tests := []struct {
		name string
		e    *Entity
		want error
	}{
		{"empty entity", &Entity{}, nil},
		{"252 properties", withProps(252), nil},
		{"253 properties", withProps(253), ErrTooManyProperties},
		{"1024-char keys", &Entity{PartitionKey: strings.Repeat("p", 1024), RowKey: strings.Repeat("r", 1024)}, nil},
		{"1025-char PartitionKey", &Entity{PartitionKey: strings.Repeat("p", 1025)}, ErrKeyValueTooLarge},
		{"1025-char RowKey", &Entity{RowKey: strings.Repeat("r", 1025)}, ErrKeyValueTooLarge},
		{"slash in RowKey", &Entity{RowKey: "a/b"}, ErrInvalidInput},
		{"string of 32K UTF-16 units", one("s", StringValue(strings.Repeat("x", 32*1024))), nil},
		{"string of 32K+1 UTF-16 units", one("s", StringValue(strings.Repeat("x", 32*1024+1))), ErrPropertyValueTooLarge},
		{"string of 32K units as 16K surrogate pairs", one("s", StringValue(strings.Repeat("😀", 16*1024))), nil},
		{"string of 32K+2 units as surrogate pairs", one("s", StringValue(strings.Repeat("😀", 16*1024+1))), ErrPropertyValueTooLarge},
		{"string of 32K 3-byte chars", one("s", StringValue(strings.Repeat("日", 32*1024))), nil},
		{"binary of 64 KiB", one("b", BinaryValue(make([]byte, 64*1024))), nil},
		{"binary of 64 KiB + 1", one("b", BinaryValue(make([]byte, 64*1024+1))), ErrPropertyValueTooLarge},
		{"size exactly 1 MiB", sizedEntity(MaxEntitySize), nil},
		{"size 1 MiB + 1", sizedEntity(MaxEntitySize + 1), ErrEntityTooLarge},
		{"3-byte strings: bound over 1 MiB, size under", stringsEntity(5, "日"), nil},
		{"ASCII strings over 1 MiB", stringsEntity(17, "x"), ErrEntityTooLarge},
		{"surrogate pairs over 1 MiB", stringsEntity(17, "😀"), ErrEntityTooLarge},
		{"255-char property name", one(strings.Repeat("n", 255), Int32Value(1)), nil},
		{"256-char property name", one(strings.Repeat("n", 256), Int32Value(1)), ErrPropertyNameTooLong},
		{"invalid property name", one("a-b", Int32Value(1)), ErrPropertyNameInvalid},
		{"user property named PartitionKey", one("PartitionKey", StringValue("x")), ErrPropertyNameInvalid},
		{"user property named Timestamp", one("Timestamp", DateTimeValue(time.Now())), ErrPropertyNameInvalid},
		{"DateTime at 1601-01-01", one("d", DateTimeValue(MinDateTime)), nil},
		{"DateTime a tick before 1601", one("d", DateTimeValue(MinDateTime.Add(-Tick))), ErrOutOfRangeInput},
		{"DateTime year 1", one("d", DateTimeValue(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC))), ErrOutOfRangeInput},
		{"DateTime at the end of 9999", one("d", DateTimeValue(MaxDateTime)), nil},
		{"DateTime in 10000", one("d", Value{Type: TypeDateTime, Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}), ErrOutOfRangeInput},
		{"invalid Guid", one("g", Value{Type: TypeGuid, Str: "nope"}), ErrInvalidInput},
		{"Int32 out of range", one("i", Value{Type: TypeInt32, Int: 1 << 31}), ErrInvalidInput},
		{"invalid type", one("x", Value{}), ErrInvalidInput},
		{"duplicate names (sorted)", &Entity{Properties: []Property{{"a", Int32Value(1)}, {"a", Int32Value(2)}}}, ErrInvalidInput},
		{"duplicate names (unsorted)", &Entity{Properties: []Property{{"b", Int32Value(1)}, {"a", Int32Value(2)}, {"b", Int32Value(3)}}}, ErrInvalidInput},
		{"NaN and infinities are fine", &Entity{Properties: []Property{{"a", DoubleValue(nan())}, {"b", DoubleValue(inf(1))}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.e.Validate()
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Validate error = %v, want %v", err, tt.want)
			}
		})
	}
}

// stringsEntity has n string properties of 32K UTF-16 units each, made of
// the character c (one unit, or two for a surrogate pair).
func stringsEntity(n int, c string) *Entity {
	e := &Entity{PartitionKey: "pk", RowKey: "rk"}
	v := strings.Repeat(c, MaxStringLength/len(utf16.Encode([]rune(c))))
	for i := 0; i < n; i++ {
		e.Properties = append(e.Properties, Property{Name: fmt.Sprintf("s%02d", i), Value: StringValue(v)})
	}
	return e
}

func TestSizeBound(t *testing.T) {
	tests := []struct {
		name string
		e    *Entity
	}{
		{"empty", &Entity{}},
		{"ASCII", one("s", StringValue("hello"))},
		{"2-byte", one("s", StringValue("ñandú"))},
		{"3-byte", one("s", StringValue("日本語"))},
		{"surrogate pairs", &Entity{PartitionKey: "😀", RowKey: "😀😀", Properties: []Property{{"s", StringValue("😀")}}}},
		{"invalid UTF-8, leading bytes only", &Entity{PartitionKey: "\xf0\xf8\xff", Properties: []Property{{"s", StringValue("\xf0\xf0")}}}},
		{"every type", &Entity{PartitionKey: "p", RowKey: "r", Properties: []Property{
			{"a", BinaryValue([]byte{1, 2})}, {"b", BoolValue(true)}, {"c", DoubleValue(1)}, {"d", GuidValue("c9da6455-213d-42c9-9a79-3e9149a57833")},
			{"e", Int32Value(1)}, {"f", Int64Value(1)}, {"g", DateTimeValue(MinDateTime)}}}},
		{"binary near the limit", sizedEntity(MaxEntitySize)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if b, n := tt.e.sizeBound(), tt.e.Size(); b < n {
				t.Fatalf("sizeBound = %d < Size = %d", b, n)
			}
		})
	}
}

func one(name string, v Value) *Entity {
	return &Entity{PartitionKey: "pk", RowKey: "rk", Properties: []Property{{Name: name, Value: v}}}
}

func TestSize(t *testing.T) {
	// the worked example of Azure's published formula: Address (String
	// "Mountain View"), Age (Int32), AmountDue (Double), CustomerCode (Guid),
	// CustomerSince (DateTime), IsActive (Boolean), NumberOfOrders (Int64)
	e := &Entity{PartitionKey: "mypartitionkey", RowKey: "myrowkey", Properties: []Property{
		{"Address", StringValue("Mountain View")},
		{"Age", Int32Value(23)},
		{"AmountDue", DoubleValue(200.23)},
		{"CustomerCode", GuidValue("c9da6455-213d-42c9-9a79-3e9149a57833")},
		{"CustomerSince", DateTimeValue(mustTime("2008-07-10T00:00:00Z"))},
		{"IsActive", BoolValue(true)},
		{"NumberOfOrders", Int64Value(255)},
		{"Pic", BinaryValue([]byte{1, 2, 3})},
	}}
	want := 4 + 2*(14+8) +
		(8 + 2*7 + 2*13 + 4) + (8 + 2*3 + 4) + (8 + 2*9 + 8) + (8 + 2*12 + 16) +
		(8 + 2*13 + 8) + (8 + 2*8 + 1) + (8 + 2*14 + 8) + (8 + 2*3 + 3 + 4)
	if got := e.Size(); got != want {
		t.Fatalf("Size = %d, want %d", got, want)
	}
	if got := (&Entity{PartitionKey: "😀", Properties: []Property{{"s", StringValue("日😀")}}}).Size(); got != 4+2*2+8+2+2*3+4 {
		t.Fatalf("Size with surrogate pairs = %d", got)
	}
}
