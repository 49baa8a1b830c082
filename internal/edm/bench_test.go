package edm

import (
	"strings"
	"testing"
)

// benchEntityJSON is a typical ~1 KiB request body as the Go SDK sends it:
// a mix of every type, annotations after their values.
func benchEntityJSON() []byte {
	return []byte(`{"PartitionKey":"customer-000123","RowKey":"order-2024-01-02T03:04:05.000Z-7f3a",` +
		`"Address":"1 Microsoft Way, Redmond, WA 98052","City":"Redmond","Country":"United States",` +
		`"Email":"someone@example.com","Phone":"+1-425-555-0100","Notes":"Leave at the front desk; ring twice. Fragile items inside, handle with care.",` +
		`"Age":42,"Rating":4.75,"IsActive":true,"IsPremium":false,"Visits":1234567,` +
		`"Balance":"9876543210123","Balance@odata.type":"Edm.Int64",` +
		`"CustomerSince":"2008-10-01T15:25:05.2852025Z","CustomerSince@odata.type":"Edm.DateTime",` +
		`"LastOrder":"2024-01-02T03:04:05.1234567Z","LastOrder@odata.type":"Edm.DateTime",` +
		`"CustomerCode":"c9da6455-213d-42c9-9a79-3e9149a57833","CustomerCode@odata.type":"Edm.Guid",` +
		`"Avatar":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==","Avatar@odata.type":"Edm.Binary",` +
		`"Score":2.0,"Score@odata.type":"Edm.Double","Discount":0.15,"Region":"us-west-2","Segment":"enterprise",` +
		`"Tags":"alpha,beta,gamma,delta","Referrer":"https://www.example.com/landing?utm_source=newsletter&utm_medium=email",` +
		`"Comment":"Caf\u00e9 \u00fcber \u65e5\u672c","Priority":3,"Weight":12.5,"Height":180,"Locale":"en-US"}`)
}

func BenchmarkDecodeJSON(b *testing.B) {
	body := benchEntityJSON()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeJSON(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendJSON(b *testing.B) {
	e, err := DecodeJSON(benchEntityJSON())
	if err != nil {
		b.Fatal(err)
	}
	e.Timestamp = mustTime("2024-01-02T03:04:05.1234567Z")
	for _, l := range levels {
		b.Run(l.name, func(b *testing.B) {
			opts := EncodeOptions{Metadata: l.m, Table: "mytable", Account: "devstoreaccount1", BaseURL: base}
			buf := AppendJSON(nil, e, opts)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendJSON(buf[:0], e, opts)
			}
		})
	}
}

func BenchmarkMarshalBinary(b *testing.B) {
	e, err := DecodeJSON(benchEntityJSON())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = MarshalBinary(e)
	}
}

func BenchmarkUnmarshalBinary(b *testing.B) {
	e, err := DecodeJSON(benchEntityJSON())
	if err != nil {
		b.Fatal(err)
	}
	data := MarshalBinary(e)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := UnmarshalBinary(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidate(b *testing.B) {
	e, err := DecodeJSON(benchEntityJSON())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := e.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

// benchPayloadJSON is the bench tool's insert body (bench/scenarios.go): a
// ~1 KiB ASCII string, an Int32 and a DateTime, keys sorted as
// encoding/json writes a map.
func benchPayloadJSON() []byte {
	return []byte(`{"N":42,"PartitionKey":"p-0123","Payload":"` + strings.Repeat("x", 924) +
		`","RowKey":"w3-000000123456","When":"2024-01-02T03:04:05Z","When@odata.type":"Edm.DateTime"}`)
}

func BenchmarkDecodeJSONPayload(b *testing.B) {
	body := benchPayloadJSON()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeJSON(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendJSONPayload(b *testing.B) {
	e, err := DecodeJSON(benchPayloadJSON())
	if err != nil {
		b.Fatal(err)
	}
	e.Timestamp = mustTime("2024-01-02T03:04:05.1234567Z")
	opts := EncodeOptions{Table: "mytable", Account: "devstoreaccount1", BaseURL: base, Element: true}
	buf := AppendJSON(nil, e, opts)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendJSON(buf[:0], e, opts)
	}
}
