package edm

import "time"

// Type is an EDM property type supported by Azure Table storage.
type Type uint8

// The EDM types of Azure Table storage. The zero Type is invalid.
const (
	TypeString Type = iota + 1
	TypeBinary
	TypeBoolean
	TypeDateTime
	TypeDouble
	TypeGuid
	TypeInt32
	TypeInt64
)

// Value is one typed property value. Only the field matching Type is used:
// Str for String and Guid, Bin for Binary, Bool for Boolean, Int for Int32
// and Int64, Float for Double, Time (UTC) for DateTime.
type Value struct {
	Type  Type
	Str   string
	Bin   []byte
	Bool  bool
	Int   int64
	Float float64
	Time  time.Time
}

// Property is a named user property.
type Property struct {
	Name  string
	Value Value
}

// Entity is one table entity. Timestamp is set by the server (zero until
// stored); Properties are the user properties, in no particular order.
type Entity struct {
	PartitionKey string
	RowKey       string
	Timestamp    time.Time
	Properties   []Property
}
