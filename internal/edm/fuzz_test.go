package edm

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzDecodeJSON checks that no body makes the decoder panic or return an
// error outside its contract, and that whatever it accepts survives an
// encode/decode cycle unchanged at both metadata levels that carry types.
func FuzzDecodeJSON(f *testing.F) {
	f.Add(benchEntityJSON())
	f.Add([]byte(`{"PartitionKey":"p","RowKey":"r","a":1,"b":"x","c":true,"d":1.5,"e":null}`))
	f.Add([]byte(`{"n@odata.type":"Edm.Int64","n":"-9223372036854775808","g":"{4185404A-5818-48C3-B9BE-F217DF0DBA6F}","g@odata.type":"Edm.Guid"}`))
	f.Add([]byte(`{"d":"NaN","d@odata.type":"Edm.Double","t":"2024-01-02T03:04:05.5+02:00","t@odata.type":"Edm.DateTime","b":"aGk=","b@odata.type":"Edm.Binary"}`))
	f.Add([]byte("\xEF\xBB\xBF{\"\\u00e9\\ud83d\\ude00\":\"\\ud800\",\"odata.x\":[{\"a\":[]}],\"Timestamp\":5}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecodeBinary(t, data)
		e, hasPK, hasRK, err := DecodeJSONKeys(data)
		if err != nil {
			if e != nil || !errors.Is(err, ErrInvalidInput) && !errors.Is(err, ErrTooManyProperties) {
				t.Fatalf("DecodeJSONKeys = %v, %v", e, err)
			}
			return
		}
		if !hasPK && e.PartitionKey != "" || !hasRK && e.RowKey != "" {
			t.Fatal("absent key has a value")
		}
		_ = e.Validate()
		_ = e.Size()
		for _, l := range levels {
			out := AppendJSON(nil, e, EncodeOptions{Metadata: l.m, Table: "t", Account: "a", BaseURL: base, Element: true})
			if !json.Valid(out) {
				t.Fatalf("%s: invalid JSON %q", l.name, out)
			}
			if l.m == NoMetadata { // types are lost by design
				continue
			}
			back, err := DecodeJSON(out)
			if err != nil {
				t.Fatalf("%s: re-decoding %q: %v", l.name, out, err)
			}
			if d := sameEntity(back, e); d != "" {
				t.Fatalf("%s: %s\n%q", l.name, d, out)
			}
		}
		back, err := UnmarshalBinary(MarshalBinary(e))
		if err != nil {
			t.Fatal(err)
		}
		if d := sameEntity(back, e); d != "" {
			t.Fatalf("binary: %s", d)
		}
	})
}

// FuzzUnmarshalBinary checks that stored bytes, however damaged, decode to
// ErrCorrupt or to an entity that re-encodes stably and can be served.
func FuzzUnmarshalBinary(f *testing.F) {
	e, err := DecodeJSON(benchEntityJSON())
	if err != nil {
		f.Fatal(err)
	}
	e.Timestamp = mustTime("2024-01-02T03:04:05.1234567Z")
	f.Add(MarshalBinary(e))
	f.Add(MarshalBinary(&Entity{}))
	r := newRand(11)
	for i := 0; i < 4; i++ {
		f.Add(MarshalBinary(randEntity(r)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := UnmarshalBinary(data)
		owned, oerr := UnmarshalBinaryOwned(bytes.Clone(data))
		if (err == nil) != (oerr == nil) {
			t.Fatalf("UnmarshalBinary: %v; UnmarshalBinaryOwned: %v", err, oerr)
		}
		if err == nil {
			if d := sameEntity(owned, e); d != "" {
				t.Fatalf("UnmarshalBinaryOwned differs: %s", d)
			}
		}
		if err != nil {
			if e != nil || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("UnmarshalBinary = %v, %v", e, err)
			}
			return
		}
		again := MarshalBinary(e)
		back, err := UnmarshalBinary(again)
		if err != nil {
			t.Fatalf("re-decoding: %v", err)
		}
		if d := sameEntity(back, e); d != "" {
			t.Fatal(d)
		}
		_ = e.Validate()
		_ = e.Clone()
		_ = e.Project([]string{"a"})
		for _, l := range levels {
			if out := AppendJSON(nil, e, EncodeOptions{Metadata: l.m, Table: "t", Account: "a", BaseURL: base}); !json.Valid(out) {
				t.Fatalf("%s: invalid JSON %q", l.name, out)
			}
		}
	})
}

// FuzzSizeBound checks that the byte-length bound Validate uses to skip the
// exact size is never below the exact size, for any strings, UTF-8 or not.
func FuzzSizeBound(f *testing.F) {
	f.Add("pk", "rk", "name", "value")
	f.Add("😀", "日本", "n", "\xf0\xff\x80")
	f.Fuzz(func(t *testing.T, pk, rk, name, value string) {
		e := &Entity{PartitionKey: pk, RowKey: rk, Properties: []Property{{Name: name, Value: StringValue(value)}, {Name: name + "b", Value: BinaryValue([]byte(value))}}}
		if b, n := e.sizeBound(), e.Size(); b < n {
			t.Fatalf("sizeBound = %d < Size = %d", b, n)
		}
	})
}
