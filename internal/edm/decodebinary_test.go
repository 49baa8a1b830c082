package edm

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"
)

// within reports whether s lies in b's memory.
func within(s string, b []byte) bool {
	if len(s) == 0 || len(b) == 0 {
		return true
	}
	p, lo := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= lo && p+uintptr(len(s)) <= lo+uintptr(len(b))
}

// checkDecodeBinary compares DecodeJSONKeysBinary on body with
// DecodeJSONKeys followed by MarshalBinary, and checks that the entity's
// strings lie in the binary form.
func checkDecodeBinary(t *testing.T, body []byte) (*Entity, []byte) {
	t.Helper()
	want, wantPK, wantRK, wantErr := DecodeJSONKeys(body)
	got, bin, gotPK, gotRK, gotErr := DecodeJSONKeysBinary(body)
	if (wantErr == nil) != (gotErr == nil) || wantErr != nil && wantErr.Error() != gotErr.Error() {
		t.Fatalf("%q: error %v, want %v", body, gotErr, wantErr)
	}
	if wantErr != nil {
		if got != nil || bin != nil || !errors.Is(gotErr, ErrInvalidInput) && !errors.Is(gotErr, ErrTooManyProperties) {
			t.Fatalf("%q: %v, %q, %v", body, got, bin, gotErr)
		}
		return nil, nil
	}
	if gotPK != wantPK || gotRK != wantRK {
		t.Fatalf("%q: keys present %v %v, want %v %v", body, gotPK, gotRK, wantPK, wantRK)
	}
	if d := sameEntity(got, want); d != "" {
		t.Fatalf("%q: %s", body, d)
	}
	if !bytes.Equal(bin, MarshalBinary(want)) {
		t.Fatalf("%q: binary form differs from MarshalBinary's", body)
	}
	strs := []string{got.PartitionKey, got.RowKey}
	for _, p := range got.Properties {
		strs = append(strs, p.Name, p.Value.Str)
	}
	for _, s := range strs {
		if !within(s, bin) {
			t.Fatalf("%q: %q is not in the binary form", body, s)
		}
	}
	return got, bin
}

// TestDecodeJSONKeysBinary: the same entity, keys and errors as
// DecodeJSONKeys, the binary form MarshalBinary writes, every string in
// it; and entities decoded earlier keep their values while the pooled
// buffer their strings were gathered in serves later bodies.
func TestDecodeJSONKeysBinary(t *testing.T) {
	bodies := [][]byte{
		benchEntityJSON(),
		benchPayloadJSON(),
		[]byte(`{}`),
		[]byte(`{"PartitionKey":"","RowKey":""}`),
		[]byte(`{"RowKey":"only"}`),
		[]byte(`{"PartitionKey":"p\"q\\u00e9","RowKey":"r\n","a\tb":"x\u0000y","Gone":null,"N":1}`),
		[]byte(`{"PartitionKey":"p","RowKey":"r","g":"{4185404A-5818-48C3-B9BE-F217DF0DBA6F}","g@odata.type":"Edm.Guid","b":"aGk=","b@odata.type":"Edm.Binary"}`),
		[]byte(`{"PartitionKey":"p","RowKey":"r","t":"2024-01-02T03:04:05.5+02:00","t@odata.type":"Edm.DateTime","d":"NaN","d@odata.type":"Edm.Double","i":"-9223372036854775808","i@odata.type":"Edm.Int64","f":false}`),
		[]byte(`{"PartitionKey":"p","RowKey":"r","x":1,"x":2}`),
		[]byte(`{"PartitionKey":"p","RowKey":"r","b":"!!","b@odata.type":"Edm.Binary"}`),
		[]byte(`{"PartitionKey":1}`),
		[]byte(`not json`),
	}
	for _, body := range bodies {
		checkDecodeBinary(t, body)
	}
	r := newRand(11)
	type kept struct {
		e    *Entity
		body []byte
	}
	var earlier []kept
	for i := 0; i < 2000; i++ {
		e := randEntity(r)
		body := AppendJSON(nil, e, EncodeOptions{Metadata: MinimalMetadata})
		got, _ := checkDecodeBinary(t, body)
		if got != nil && i%10 == 0 {
			earlier = append(earlier, kept{got, body})
		}
	}
	for i, k := range earlier {
		want, err := DecodeJSON(k.body)
		if err != nil {
			t.Fatal(err)
		}
		if d := sameEntity(k.e, want); d != "" {
			t.Fatalf("entity %d changed after later decodes: %s", i, d)
		}
	}
}

func TestDecodeJSONKeysBinaryAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	body := benchPayloadJSON()
	twoSteps := testing.AllocsPerRun(100, func() {
		e, _, _, _ := DecodeJSONKeys(body)
		_ = MarshalBinary(e)
	})
	oneStep := testing.AllocsPerRun(100, func() { _, _, _, _, _ = DecodeJSONKeysBinary(body) })
	if oneStep != twoSteps-1 {
		t.Errorf("DecodeJSONKeysBinary allocates %.0f times, DecodeJSONKeys and MarshalBinary %.0f", oneStep, twoSteps)
	}
}
