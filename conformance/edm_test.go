package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// TestEDMRoundTrip stores every EDM type, with edge values, and reads it
// back through the SDK's typed entity.
func TestEDMRoundTrip(t *testing.T) {
	ctx := context.Background()
	table, c := newTable(t, "edm")
	props := map[string]any{
		"Str":       "héllo \"wörld\" 日本 \U0001F600",
		"EmptyStr":  "",
		"I32":       int32(-7),
		"I32Max":    int32(math.MaxInt32),
		"I64":       aztables.EDMInt64(math.MaxInt64),
		"I64Min":    aztables.EDMInt64(math.MinInt64),
		"Dbl":       2.5,
		"DblTiny":   5e-324,
		"Bool":      true,
		"False":     false,
		"When":      aztables.EDMDateTime(time.Date(2024, 2, 29, 23, 59, 59, 123456700, time.UTC)),
		"WhenEarly": aztables.EDMDateTime(time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC)),
		"WhenLate":  aztables.EDMDateTime(time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC)),
		"Guid":      aztables.EDMGUID("c9da6455-213d-42c9-9a79-3e9149a57833"),
		"Bin":       aztables.EDMBinary([]byte{0, 1, 2, 0xff}),
		"BinEmpty":  aztables.EDMBinary([]byte{}),
	}
	ent := aztables.EDMEntity{Entity: aztables.Entity{PartitionKey: "p", RowKey: "all"}, Properties: props}
	if _, err := c.AddEntity(ctx, mustJSON(t, ent), nil); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetEntity(ctx, "p", "all", nil)
	if err != nil {
		t.Fatal(err)
	}
	var back aztables.EDMEntity
	if err := json.Unmarshal(got.Value, &back); err != nil {
		t.Fatal(err)
	}
	for k, want := range props {
		t.Run(k, func(t *testing.T) {
			g := back.Properties[k]
			if fmt.Sprintf("%T %v", g, g) != fmt.Sprintf("%T %v", want, want) {
				t.Fatalf("%#v (%T), want %#v (%T)", g, g, want, want)
			}
		})
	}

	// Wire shapes: Int64 travels as a string with its annotation; whole
	// Doubles keep a decimal point; untyped integers are Int32 and other
	// numbers Double.
	r := raw(t, "POST", "/"+table, jsonHeaders(), []byte(`{"PartitionKey":"p","RowKey":"wire","Whole":2.0,"Whole@odata.type":"Edm.Double","Big":3000000000,"Small":12,"Frac":0.5,"L":"-5","L@odata.type":"Edm.Int64"}`), true)
	if r.status != 201 {
		t.Fatalf("insert: %d %s", r.status, r.body)
	}
	for _, want := range []string{`"Whole":2.0`, `"Big":3000000000.0`, `"Small":12`, `"Frac":0.5`, `"L@odata.type":"Edm.Int64","L":"-5"`} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("response lacks %s: %s", want, r.body)
		}
	}
	if strings.Contains(string(r.body), "Whole@odata.type") {
		t.Errorf("finite Double annotated: %s", r.body)
	}

	// Bad typed values are 400 and write nothing.
	bad := []struct{ name, body string }{
		{"bad base64", `{"PartitionKey":"p","RowKey":"bad","B":"!!!","B@odata.type":"Edm.Binary"}`},
		{"bad date", `{"PartitionKey":"p","RowKey":"bad","D":"yesterday","D@odata.type":"Edm.DateTime"}`},
		{"bad guid", `{"PartitionKey":"p","RowKey":"bad","G":"xyz","G@odata.type":"Edm.Guid"}`},
		{"bad int64", `{"PartitionKey":"p","RowKey":"bad","L":"1.5","L@odata.type":"Edm.Int64"}`},
		{"unknown type", `{"PartitionKey":"p","RowKey":"bad","X":"1","X@odata.type":"Edm.Decimal"}`},
		{"int32 overflow", `{"PartitionKey":"p","RowKey":"bad","X":3000000000,"X@odata.type":"Edm.Int32"}`},
		{"malformed json", `{"PartitionKey":"p","RowKey":"bad",`},
		{"array", `[]`},
		{"nested object", `{"PartitionKey":"p","RowKey":"bad","X":{"a":1}}`},
		{"duplicate property", `{"PartitionKey":"p","RowKey":"bad","X":1,"X":2}`},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			r := raw(t, "POST", "/"+table, jsonHeaders(), []byte(b.body), true)
			if r.status != 400 || r.code() != "InvalidInput" {
				t.Fatalf("%d %s: %s", r.status, r.code(), r.body)
			}
		})
	}
	if r := raw(t, "GET", entityPath(table, "p", "bad"), jsonHeaders(), nil, true); r.status != 404 {
		t.Fatalf("a rejected insert was written: %d", r.status)
	}
	r = raw(t, "POST", "/"+table, jsonHeaders(), []byte(`{"PartitionKey":"p","RowKey":"early","D":"1600-12-31T23:59:59Z","D@odata.type":"Edm.DateTime"}`), true)
	if r.status != 400 || r.code() != "OutOfRangeInput" {
		t.Fatalf("DateTime before 1601: %d %s", r.status, r.code())
	}
}
