package edm

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestTypeNames(t *testing.T) {
	for typ := TypeString; typ <= TypeInt64; typ++ {
		t.Run(typ.String(), func(t *testing.T) {
			got, err := ParseType(typ.String())
			if err != nil || got != typ {
				t.Fatalf("ParseType(%q) = %v, %v", typ.String(), got, err)
			}
		})
	}
	for _, bad := range []string{"", "edm.string", "Edm.Int16", "Edm.Decimal", "String", " Edm.String"} {
		t.Run("bad/"+bad, func(t *testing.T) {
			if _, err := ParseType(bad); !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("ParseType(%q) error = %v, want ErrInvalidInput", bad, err)
			}
		})
	}
	if s := Type(0).String(); s == "" || s[:4] == "Edm." {
		t.Errorf("invalid type prints as %q", s)
	}
}

func TestConstructors(t *testing.T) {
	ts := time.Date(2024, 1, 2, 3, 4, 5, 123456789, time.FixedZone("x", 3600))
	tests := []struct {
		name string
		got  Value
		want Value
	}{
		{"string", StringValue("a"), Value{Type: TypeString, Str: "a"}},
		{"int32", Int32Value(-7), Value{Type: TypeInt32, Int: -7}},
		{"int64", Int64Value(math.MaxInt64), Value{Type: TypeInt64, Int: math.MaxInt64}},
		{"double", DoubleValue(1.5), Value{Type: TypeDouble, Float: 1.5}},
		{"bool", BoolValue(true), Value{Type: TypeBoolean, Bool: true}},
		{"datetime truncated to tick and UTC", DateTimeValue(ts), Value{Type: TypeDateTime, Time: time.Date(2024, 1, 2, 2, 4, 5, 123456700, time.UTC)}},
		{"guid normalised", GuidValue("{4185404A-5818-48C3-B9BE-F217DF0DBA6F}"), Value{Type: TypeGuid, Str: "4185404a-5818-48c3-b9be-f217df0dba6f"}},
		{"guid kept when invalid", GuidValue("nope"), Value{Type: TypeGuid, Str: "nope"}},
		{"binary", BinaryValue([]byte{1, 2}), Value{Type: TypeBinary, Bin: []byte{1, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.got.Equal(tt.want) {
				t.Fatalf("got %#v, want %#v", tt.got, tt.want)
			}
		})
	}
	if DateTimeValue(ts).Time.Location() != time.UTC {
		t.Error("DateTimeValue did not convert to UTC")
	}
}

func TestValueEqual(t *testing.T) {
	tests := []struct {
		name string
		a, b Value
		want bool
	}{
		{"nan equals nan", DoubleValue(math.NaN()), DoubleValue(math.NaN()), true},
		{"zero sign matters", DoubleValue(0), DoubleValue(math.Copysign(0, -1)), false},
		{"types differ", Int32Value(1), Int64Value(1), false},
		{"nil and empty binary", BinaryValue(nil), BinaryValue([]byte{}), true},
		{"times by instant", DateTimeValue(time.Unix(5, 0)), Value{Type: TypeDateTime, Time: time.Unix(5, 0).In(time.FixedZone("y", 60))}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.Equal(tt.b); got != tt.want {
				t.Fatalf("Equal = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseGuid(t *testing.T) {
	const want = "4185404a-5818-48c3-b9be-f217df0dba6f"
	for _, in := range []string{
		want,
		"4185404A-5818-48C3-B9BE-F217DF0DBA6F",
		"4185404a581848c3b9bef217df0dba6f",
		"{4185404a-5818-48c3-b9be-f217df0dba6f}",
		"(4185404a-5818-48c3-b9be-f217df0dba6f)",
	} {
		t.Run(in, func(t *testing.T) {
			got, err := ParseGuid(in)
			if err != nil || got != want {
				t.Fatalf("ParseGuid = %q, %v", got, err)
			}
		})
	}
	for _, in := range []string{
		"", "4185404a-5818-48c3-b9be-f217df0dba6", "4185404a-5818-48c3-b9be-f217df0dba6g",
		"{4185404a-5818-48c3-b9be-f217df0dba6f)", "4185404a_5818-48c3-b9be-f217df0dba6f",
		"4185404a-581848c3-b9be-f217df0dba6f0", "0x4185404a581848c3b9bef217df0dba6f",
	} {
		t.Run("bad/"+in, func(t *testing.T) {
			if _, err := ParseGuid(in); !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("ParseGuid(%q) error = %v", in, err)
			}
		})
	}
}

func TestAzureError(t *testing.T) {
	tests := []struct {
		err    error
		code   string
		status int
	}{
		{ErrInvalidInput, "InvalidInput", 400},
		{ErrOutOfRangeInput, "OutOfRangeInput", 400},
		{ErrPropertyValueTooLarge, "PropertyValueTooLarge", 400},
		{ErrEntityTooLarge, "EntityTooLarge", 400},
		{ErrTooManyProperties, "TooManyProperties", 400},
		{ErrPropertyNameInvalid, "PropertyNameInvalid", 400},
		{ErrPropertyNameTooLong, "PropertyNameTooLong", 400},
		{ErrPropertiesNeedValue, "PropertiesNeedValue", 400},
		{ErrKeyValueTooLarge, "KeyValueTooLarge", 400},
		{ErrCorrupt, "InternalError", 500},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			wrapped := errors.Join(errors.New("context"), tt.err)
			code, status, ok := AzureError(wrapped)
			if !ok || code != tt.code || status != tt.status {
				t.Fatalf("AzureError = %q, %d, %v", code, status, ok)
			}
		})
	}
	if _, _, ok := AzureError(errors.New("other")); ok {
		t.Error("foreign error mapped")
	}
}
