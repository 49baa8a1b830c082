package edm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"
)

func TestBinaryRoundTrip(t *testing.T) {
	full := &Entity{PartitionKey: "pk 日本", RowKey: "", Timestamp: mustTime("2024-01-02T03:04:05.1234567Z"), Properties: []Property{
		{"Bin", BinaryValue([]byte{0, 1, 255})},
		{"BinEmpty", BinaryValue(nil)},
		{"Bool", BoolValue(true)},
		{"BoolF", BoolValue(false)},
		{"Date", DateTimeValue(MinDateTime)},
		{"DateMax", DateTimeValue(MaxDateTime)},
		{"DateZero", Value{Type: TypeDateTime}},
		{"Dbl", DoubleValue(-1.5)},
		{"DblNaN", DoubleValue(math.NaN())},
		{"DblNegZero", DoubleValue(math.Copysign(0, -1))},
		{"Guid", GuidValue("4185404a-5818-48c3-b9be-f217df0dba6f")},
		{"I32", Int32Value(math.MinInt32)},
		{"I64", Int64Value(math.MinInt64)},
		{"I64max", Int64Value(math.MaxInt64)},
		{"Str", StringValue("")},
	}}
	tests := []struct {
		name string
		e    *Entity
	}{
		{"empty", &Entity{}},
		{"keys only", &Entity{PartitionKey: "p", RowKey: "r"}},
		{"every type", full},
		{"unsorted properties", &Entity{Properties: []Property{{"b", Int32Value(1)}, {"a", Int32Value(2)}}}},
		{"nanosecond timestamp", &Entity{Timestamp: time.Unix(1, 1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := MarshalBinary(tt.e)
			if b[0] != binaryVersion {
				t.Fatalf("version byte %d", b[0])
			}
			got, err := UnmarshalBinary(b)
			if err != nil {
				t.Fatal(err)
			}
			if d := sameEntity(got, tt.e); d != "" {
				t.Fatal(d)
			}
			if got.Timestamp.IsZero() != tt.e.Timestamp.IsZero() {
				t.Fatal("Timestamp presence changed")
			}
			if n := testing.AllocsPerRun(20, func() { _ = MarshalBinary(tt.e) }); n != 1 {
				t.Errorf("MarshalBinary allocates %.0f times", n)
			}
		})
	}
	t.Run("AppendBinary appends", func(t *testing.T) {
		b := AppendBinary([]byte("xyz"), full)
		if string(b[:3]) != "xyz" {
			t.Fatal("prefix lost")
		}
		if _, err := UnmarshalBinary(b[3:]); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("does not alias the input", func(t *testing.T) {
		b := MarshalBinary(full)
		got, err := UnmarshalBinary(b)
		if err != nil {
			t.Fatal(err)
		}
		for i := range b {
			b[i] = 0
		}
		if d := sameEntity(got, full); d != "" {
			t.Fatal(d)
		}
	})
}

func TestBinaryRoundTripRandom(t *testing.T) {
	r := newRand(7)
	for i := 0; i < 5000; i++ {
		e := randEntity(r)
		got, err := UnmarshalBinary(MarshalBinary(e))
		if err != nil {
			t.Fatal(err)
		}
		if d := sameEntity(got, e); d != "" {
			t.Fatalf("entity %d: %s", i, d)
		}
	}
}

func TestUnmarshalBinaryCorrupt(t *testing.T) {
	good := MarshalBinary(&Entity{PartitionKey: "p", RowKey: "r", Timestamp: mustTime("2024-01-02T03:04:05Z"), Properties: []Property{
		{"s", StringValue("x")}, {"b", BoolValue(true)}, {"d", DoubleValue(1)}, {"t", DateTimeValue(MinDateTime)},
		{"i", Int32Value(5)}, {"bin", BinaryValue([]byte{1})},
	}})
	t.Run("every truncation", func(t *testing.T) {
		for n := 0; n < len(good); n++ {
			if _, err := UnmarshalBinary(good[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("prefix of %d bytes: %v", n, err)
			}
		}
	})
	prop := func(typ byte, payload ...byte) []byte {
		b := []byte{binaryVersion, 0, 0, 0, 1, 1, 'x', typ}
		return append(b, payload...)
	}
	tests := []struct {
		name string
		b    []byte
	}{
		{"nil", nil},
		{"unknown version", append([]byte{2}, good[1:]...)},
		{"version zero", append([]byte{0}, good[1:]...)},
		{"unknown flag", append([]byte{binaryVersion, 2}, good[2:]...)},
		{"trailing byte", append(append([]byte{}, good...), 0)},
		{"key longer than input", []byte{binaryVersion, 0, 10, 'a'}},
		{"overlong varint", []byte{binaryVersion, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"huge property count", []byte{binaryVersion, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}},
		{"unknown type", prop(9, 0)},
		{"type zero", prop(0, 0)},
		{"boolean 2", prop(byte(TypeBoolean), 2)},
		{"int32 out of range", prop(byte(TypeInt32), binary.AppendVarint(nil, math.MaxInt32+1)...)},
		{"short double", prop(byte(TypeDouble), 1, 2, 3)},
		{"nanoseconds of a second or more", prop(byte(TypeDateTime), append(binary.AppendVarint(nil, 0), binary.AppendUvarint(nil, 1e9)...)...)},
		{"binary longer than input", prop(byte(TypeBinary), 5, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if e, err := UnmarshalBinary(tt.b); !errors.Is(err, ErrCorrupt) || e != nil {
				t.Fatalf("UnmarshalBinary = %v, %v", e, err)
			}
		})
	}
}

func TestRestampMatchesReencoding(t *testing.T) {
	e := &Entity{PartitionKey: "old", RowKey: "keys", Properties: []Property{
		{Name: "A", Value: Value{Type: TypeString, Str: "x"}},
		{Name: "B", Value: Value{Type: TypeInt64, Int: -5}},
	}}
	ts := time.Date(2026, 11, 23, 22, 0, 0, 123456700, time.UTC)
	for _, withTS := range []bool{false, true} {
		in := *e
		if withTS {
			in.Timestamp = ts.Add(-time.Hour)
		}
		got, err := Restamp(nil, MarshalBinary(&in), "p", "r", ts)
		if err != nil {
			t.Fatal(err)
		}
		want := *e
		want.PartitionKey, want.RowKey, want.Timestamp = "p", "r", ts
		if !bytes.Equal(got, MarshalBinary(&want)) {
			t.Fatalf("Restamp (timestamp before: %v) = %x, want %x", withTS, got, MarshalBinary(&want))
		}
	}
	// Every replica stamps every write it applies: one allocation.
	big := *e
	big.Properties = append(big.Properties, Property{Name: "Payload", Value: Value{Type: TypeString, Str: string(make([]byte, 1000))}})
	b := MarshalBinary(&big)
	if n := testing.AllocsPerRun(50, func() { _, _ = Restamp(nil, b, "partition-key", "row-key", ts) }); n != 1 && !raceEnabled {
		t.Errorf("Restamp of a 1 KB entity: %.0f allocations, want 1", n)
	}
	for _, bad := range [][]byte{nil, {9, 0}, {binaryVersion, 0, 50, 'a'}} {
		if _, err := Restamp(nil, bad, "p", "r", ts); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Restamp(%x) = %v, want ErrCorrupt", bad, err)
		}
	}
}

// TestUnmarshalBinaryOwned: the variant that keeps the caller's buffer
// decodes every input as UnmarshalBinary does, aliases that buffer for its
// strings instead of copying it, and so allocates once less.
func TestUnmarshalBinaryOwned(t *testing.T) {
	r := newRand(13)
	for i := 0; i < 2000; i++ {
		e := randEntity(r)
		b := MarshalBinary(e)
		got, err := UnmarshalBinaryOwned(b)
		if err != nil {
			t.Fatalf("entity %d: %v", i, err)
		}
		if d := sameEntity(got, e); d != "" {
			t.Fatalf("entity %d: %s", i, d)
		}
		for n := 0; n < len(b); n += 1 + n/3 {
			want, wantErr := UnmarshalBinary(b[:n])
			got, gotErr := UnmarshalBinaryOwned(b[:n])
			if (wantErr == nil) != (gotErr == nil) || (want == nil) != (got == nil) {
				t.Fatalf("entity %d, prefix %d: owned %v, %v; copied %v, %v", i, n, got, gotErr, want, wantErr)
			}
		}
	}
	e := &Entity{PartitionKey: "pk", RowKey: "rk", Timestamp: mustTime("2024-01-02T03:04:05Z"),
		Properties: []Property{{"Name", StringValue("some name")}, {"Bin", BinaryValue([]byte{1, 2})}}}
	b := MarshalBinary(e)
	got, err := UnmarshalBinaryOwned(b)
	if err != nil {
		t.Fatal(err)
	}
	b[bytes.Index(b, []byte("some name"))] = 'S'
	if got.Properties[0].Value.Str != "Some name" {
		t.Fatalf("the string does not alias the buffer: %q", got.Properties[0].Value.Str)
	}
	b[bytes.LastIndexByte(b, 1)] = 9
	if got.Properties[1].Value.Bin[0] != 1 {
		t.Fatal("a Binary value changed with the buffer")
	}
	copied := testing.AllocsPerRun(50, func() { _, _ = UnmarshalBinary(b) })
	owned := testing.AllocsPerRun(50, func() { _, _ = UnmarshalBinaryOwned(b) })
	if owned != copied-1 {
		t.Errorf("UnmarshalBinaryOwned allocates %.0f times, UnmarshalBinary %.0f", owned, copied)
	}
}
