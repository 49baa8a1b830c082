package edm

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"time"
)

// typeNames holds the OData names; the wire spells types this way in
// "@odata.type" annotations and nowhere else, so one table serves both ways.
var typeNames = [...]string{
	TypeString:   "Edm.String",
	TypeBinary:   "Edm.Binary",
	TypeBoolean:  "Edm.Boolean",
	TypeDateTime: "Edm.DateTime",
	TypeDouble:   "Edm.Double",
	TypeGuid:     "Edm.Guid",
	TypeInt32:    "Edm.Int32",
	TypeInt64:    "Edm.Int64",
}

// String returns the OData type name ("Edm.String", ...) so that it can be
// written straight into an "@odata.type" annotation; invalid types get a
// non-OData spelling so they can never be mistaken for a real annotation.
func (t Type) String() string {
	if t.valid() {
		return typeNames[t]
	}
	return "edm.Type(" + strconv.Itoa(int(t)) + ")"
}

func (t Type) valid() bool { return t >= TypeString && t <= TypeInt64 }

// ParseType maps an "@odata.type" annotation value to a Type. Matching is
// case-sensitive because the service's OData reader treats type names that
// way; an unknown name is the client's fault, hence ErrInvalidInput.
func ParseType(s string) (Type, error) {
	if t, ok := parseTypeName(s); ok {
		return t, nil
	}
	return 0, fmt.Errorf("%w: unknown EDM type %q", ErrInvalidInput, s)
}

// parseTypeName is the allocation-free core of ParseType; the JSON decoder
// calls it with string(bytes), which the compiler does not copy for a switch.
func parseTypeName(s string) (Type, bool) {
	switch s {
	case "Edm.String":
		return TypeString, true
	case "Edm.Binary":
		return TypeBinary, true
	case "Edm.Boolean":
		return TypeBoolean, true
	case "Edm.DateTime":
		return TypeDateTime, true
	case "Edm.Double":
		return TypeDouble, true
	case "Edm.Guid":
		return TypeGuid, true
	case "Edm.Int32":
		return TypeInt32, true
	case "Edm.Int64":
		return TypeInt64, true
	}
	return 0, false
}

// StringValue builds an Edm.String value.
func StringValue(s string) Value { return Value{Type: TypeString, Str: s} }

// Int32Value builds an Edm.Int32 value; the int32 parameter makes an
// out-of-range Int32 unrepresentable at the call site.
func Int32Value(i int32) Value { return Value{Type: TypeInt32, Int: int64(i)} }

// Int64Value builds an Edm.Int64 value.
func Int64Value(i int64) Value { return Value{Type: TypeInt64, Int: i} }

// DoubleValue builds an Edm.Double value. NaN and ±Inf are legal: Azure
// stores them and returns them as the strings "NaN", "Infinity", "-Infinity".
func DoubleValue(f float64) Value { return Value{Type: TypeDouble, Float: f} }

// BoolValue builds an Edm.Boolean value.
func BoolValue(b bool) Value { return Value{Type: TypeBoolean, Bool: b} }

// DateTimeValue builds an Edm.DateTime value. The time is converted to UTC
// and truncated to Azure's 100 ns tick so that what is stored is exactly what
// a later read (and a later comparison in a filter) will see.
func DateTimeValue(t time.Time) Value { return Value{Type: TypeDateTime, Time: TruncateTick(t)} }

// GuidValue builds an Edm.Guid value. A parseable GUID is normalised to the
// lowercase 8-4-4-4-12 form Azure returns, so that equal GUIDs have equal
// strings; anything else is kept verbatim for Validate to reject.
func GuidValue(s string) Value {
	if g, err := ParseGuid(s); err == nil {
		s = g
	}
	return Value{Type: TypeGuid, Str: s}
}

// BinaryValue builds an Edm.Binary value. The slice is not copied: callers
// hand over ownership, which keeps the write path free of extra copies.
func BinaryValue(b []byte) Value { return Value{Type: TypeBinary, Bin: b} }

// Equal reports whether two values store the same thing: same type and same
// payload. Doubles compare by bit pattern except that all NaNs are equal, so
// a value survives a round trip through JSON or the binary form as Equal;
// this is not the comparison $filter uses.
func (v Value) Equal(w Value) bool {
	if v.Type != w.Type {
		return false
	}
	switch v.Type {
	case TypeString, TypeGuid:
		return v.Str == w.Str
	case TypeBinary:
		return bytes.Equal(v.Bin, w.Bin)
	case TypeBoolean:
		return v.Bool == w.Bool
	case TypeDateTime:
		return v.Time.Equal(w.Time)
	case TypeDouble:
		if math.IsNaN(v.Float) && math.IsNaN(w.Float) {
			return true
		}
		return math.Float64bits(v.Float) == math.Float64bits(w.Float)
	case TypeInt32, TypeInt64:
		return v.Int == w.Int
	}
	return true
}
