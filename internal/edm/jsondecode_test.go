package edm

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func props(ps ...Property) []Property { return ps }

func TestDecodeJSON(t *testing.T) {
	tests := []struct {
		name         string
		body         string
		want         *Entity
		hasPK, hasRK bool
	}{
		{
			name: "untyped values",
			body: `{"PartitionKey":"p","RowKey":"r","S":"x","T":true,"F":false,"I":7,"D":1.5}`,
			want: &Entity{PartitionKey: "p", RowKey: "r", Properties: props(
				Property{"D", DoubleValue(1.5)}, Property{"F", BoolValue(false)}, Property{"I", Int32Value(7)},
				Property{"S", StringValue("x")}, Property{"T", BoolValue(true)})},
			hasPK: true, hasRK: true,
		},
		{
			name: "untyped integers at and beyond the Int32 range",
			body: `{"a":2147483647,"b":2147483648,"c":-2147483648,"d":-2147483649,"e":12345678901234567890123}`,
			want: &Entity{Properties: props(
				Property{"a", Int32Value(math.MaxInt32)}, Property{"b", DoubleValue(2147483648)},
				Property{"c", Int32Value(math.MinInt32)}, Property{"d", DoubleValue(-2147483649)},
				Property{"e", DoubleValue(12345678901234567890123)})},
		},
		{
			name: "untyped fraction or exponent is Double",
			body: `{"a":1.0,"b":1e3,"c":-0,"d":0.5E-2,"e":1e-400}`,
			want: &Entity{Properties: props(
				Property{"a", DoubleValue(1)}, Property{"b", DoubleValue(1000)}, Property{"c", Int32Value(0)},
				Property{"d", DoubleValue(0.005)}, Property{"e", DoubleValue(0)})},
		},
		{
			name: "annotation after the value",
			body: `{"Count":"12345678901234","Count@odata.type":"Edm.Int64"}`,
			want: &Entity{Properties: props(Property{"Count", Int64Value(12345678901234)})},
		},
		{
			name: "annotation before the value",
			body: `{"Count@odata.type":"Edm.Int64","Count":"-9223372036854775808"}`,
			want: &Entity{Properties: props(Property{"Count", Int64Value(math.MinInt64)})},
		},
		{
			name: "Int64 as a number",
			body: `{"n@odata.type":"Edm.Int64","n":9223372036854775807}`,
			want: &Entity{Properties: props(Property{"n", Int64Value(math.MaxInt64)})},
		},
		{
			name: "typed Int32, Boolean, String",
			body: `{"i":-5,"i@odata.type":"Edm.Int32","j":"42","j@odata.type":"Edm.Int32","b":true,"b@odata.type":"Edm.Boolean","s":"x","s@odata.type":"Edm.String"}`,
			want: &Entity{Properties: props(Property{"b", BoolValue(true)}, Property{"i", Int32Value(-5)}, Property{"j", Int32Value(42)}, Property{"s", StringValue("x")})},
		},
		{
			name: "typed Double forms",
			body: `{"a":2,"a@odata.type":"Edm.Double","b":"NaN","b@odata.type":"Edm.Double","c":"Infinity","c@odata.type":"Edm.Double",` +
				`"d":"-Infinity","d@odata.type":"Edm.Double","e":"INF","e@odata.type":"Edm.Double","f":"1.25","f@odata.type":"Edm.Double","g":2.0,"g@odata.type":"Edm.Double"}`,
			want: &Entity{Properties: props(
				Property{"a", DoubleValue(2)}, Property{"b", DoubleValue(math.NaN())}, Property{"c", DoubleValue(math.Inf(1))},
				Property{"d", DoubleValue(math.Inf(-1))}, Property{"e", DoubleValue(math.Inf(1))}, Property{"f", DoubleValue(1.25)},
				Property{"g", DoubleValue(2)})},
		},
		{
			name: "DateTime forms",
			body: `{"a":"2024-01-02T03:04:05.1234567Z","a@odata.type":"Edm.DateTime","b":"2024-01-02T03:04:05Z","b@odata.type":"Edm.DateTime",` +
				`"c":"2024-01-02T05:04:05+02:00","c@odata.type":"Edm.DateTime","d":"2024-01-02T03:04:05","d@odata.type":"Edm.DateTime",` +
				`"e":"2024-01-02T03:04:05.123456789Z","e@odata.type":"Edm.DateTime"}`,
			want: &Entity{Properties: props(
				Property{"a", DateTimeValue(time.Date(2024, 1, 2, 3, 4, 5, 123456700, time.UTC))},
				Property{"b", DateTimeValue(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC))},
				Property{"c", DateTimeValue(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC))},
				Property{"d", DateTimeValue(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC))},
				Property{"e", DateTimeValue(time.Date(2024, 1, 2, 3, 4, 5, 123456700, time.UTC))})},
		},
		{
			name: "Guid forms are normalised",
			body: `{"a":"4185404A-5818-48C3-B9BE-F217DF0DBA6F","a@odata.type":"Edm.Guid","b":"4185404a581848c3b9bef217df0dba6f","b@odata.type":"Edm.Guid","c":"{4185404a-5818-48c3-b9be-f217df0dba6f}","c@odata.type":"Edm.Guid"}`,
			want: &Entity{Properties: props(
				Property{"a", GuidValue("4185404a-5818-48c3-b9be-f217df0dba6f")},
				Property{"b", GuidValue("4185404a-5818-48c3-b9be-f217df0dba6f")},
				Property{"c", GuidValue("4185404a-5818-48c3-b9be-f217df0dba6f")})},
		},
		{
			name: "Binary",
			body: `{"B":"aGk=","B@odata.type":"Edm.Binary","E":"","E@odata.type":"Edm.Binary","N":"aG\r\nk=","N@odata.type":"Edm.Binary"}`,
			want: &Entity{Properties: props(Property{"B", BinaryValue([]byte("hi"))}, Property{"E", BinaryValue(nil)}, Property{"N", BinaryValue([]byte("hi"))})},
		},
		{
			name:  "untyped null means absent",
			body:  `{"PartitionKey":null,"RowKey":"r","a":null,"c":1}`,
			want:  &Entity{RowKey: "r", Properties: props(Property{"c", Int32Value(1)})},
			hasRK: true,
		},
		{
			name: "metadata, client Timestamp and instance annotations ignored",
			body: `{"odata.metadata":"x","odata.etag":"W/\"datetime'2020-01-01T00%3A00%3A00Z'\"","odata.type":5,"Timestamp":"2020-01-01T00:00:00Z",` +
				`"Timestamp@odata.type":"Edm.DateTime","a@odata.foo":[1],"@odata.etag":"x","a":1,` +
				`"odata.x":{"k":[1,{"y":null,"z":"s"},[],{}],"e":[]},"Timestamp2@odata.bind":` + strings.Repeat("[", 64) + strings.Repeat("]", 64) + `}`,
			want: &Entity{Properties: props(Property{"a", Int32Value(1)})},
		},
		{
			name:  "keys absent, empty, annotated",
			body:  `{"RowKey":"","RowKey@odata.type":"Edm.String"}`,
			want:  &Entity{},
			hasRK: true,
		},
		{
			name: "escapes, surrogates and raw UTF-8",
			body: "{\"PartitionKey\":\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\",\"s\":\"\\u00e9\\ud83d\\ude00\\ud800x\\udc00\",\"\\u0041\":\"日本😀\",\"bad\":\"a\xffb\",\"bad2\":\"\xff\\n\"}",
			want: &Entity{PartitionKey: "a\"b\\c/d\b\f\n\r\t", Properties: props(
				Property{"A", StringValue("日本😀")}, Property{"bad", StringValue("a\uFFFDb")}, Property{"bad2", StringValue("\uFFFD\n")}, Property{"s", StringValue("é😀\uFFFDx\uFFFD")})},
			hasPK: true,
		},
		{
			name: "BOM and whitespace",
			body: "\xEF\xBB\xBF \t\r\n{ \"a\" : 1 , \"b\"\n:\n\"x\" }\n ",
			want: &Entity{Properties: props(Property{"a", Int32Value(1)}, Property{"b", StringValue("x")})},
		},
		{name: "empty object", body: `{}`, want: &Entity{}},
		{
			name: "properties come out sorted by name",
			body: `{"b":1,"a":2,"B":3,"é":4,"_":5}`,
			want: &Entity{Properties: props(Property{"B", Int32Value(3)}, Property{"_", Int32Value(5)}, Property{"a", Int32Value(2)}, Property{"b", Int32Value(1)}, Property{"é", Int32Value(4)})},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, hasPK, hasRK, err := DecodeJSONKeys([]byte(tt.body))
			if err != nil {
				t.Fatalf("DecodeJSONKeys: %v", err)
			}
			if d := sameEntity(got, tt.want); d != "" {
				t.Fatal(d)
			}
			if hasPK != tt.hasPK || hasRK != tt.hasRK {
				t.Fatalf("key presence = %v, %v; want %v, %v", hasPK, hasRK, tt.hasPK, tt.hasRK)
			}
		})
	}
}

func TestDecodeJSONDoesNotAlias(t *testing.T) {
	body := []byte(`{"PartitionKey":"pk","a":"value","b":"aGk=","b@odata.type":"Edm.Binary"}`)
	e, err := DecodeJSON(body)
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'X'
	}
	want := &Entity{PartitionKey: "pk", Properties: props(Property{"a", StringValue("value")}, Property{"b", BinaryValue([]byte("hi"))})}
	if d := sameEntity(e, want); d != "" {
		t.Fatal(d)
	}
}

func TestDecodeJSONErrors(t *testing.T) {
	tests := []struct {
		name string
		body string
		want error
	}{
		{"empty body", ``, ErrInvalidInput},
		{"whitespace only", "  \n", ErrInvalidInput},
		{"array", `[]`, ErrInvalidInput},
		{"null", `null`, ErrInvalidInput},
		{"typed null DateTime", `{"v":null,"v@odata.type":"Edm.DateTime"}`, ErrInvalidInput},
		{"typed null Double", `{"v@odata.type":"Edm.Double","v":null}`, ErrInvalidInput},
		{"typed null Int64", `{"b":null,"b@odata.type":"Edm.Int64"}`, ErrInvalidInput},
		{"string", `"x"`, ErrInvalidInput},
		{"unterminated object", `{"a":1`, ErrInvalidInput},
		{"unterminated string", `{"a":"x}`, ErrInvalidInput},
		{"trailing comma", `{"a":1,}`, ErrInvalidInput},
		{"missing colon", `{"a" 1}`, ErrInvalidInput},
		{"missing comma", `{"a":1 "b":2}`, ErrInvalidInput},
		{"unquoted name", `{a:1}`, ErrInvalidInput},
		{"trailing garbage", `{"a":1}x`, ErrInvalidInput},
		{"second object", `{"a":1}{}`, ErrInvalidInput},
		{"nested object", `{"a":{"b":1}}`, ErrInvalidInput},
		{"PartitionKey an object", `{"PartitionKey":{}}`, ErrInvalidInput},
		{"malformed nested value in ignored member", `{"odata.x":{"a":[1,}}`, ErrInvalidInput},
		{"nesting too deep in ignored member", `{"odata.x":` + strings.Repeat("[", 65) + strings.Repeat("]", 65) + `}`, ErrInvalidInput},
		{"array value", `{"a":[1]}`, ErrInvalidInput},
		{"bad literal", `{"a":tru}`, ErrInvalidInput},
		{"literal with suffix", `{"a":nullx}`, ErrInvalidInput},
		{"leading zero", `{"a":01}`, ErrInvalidInput},
		{"bare fraction", `{"a":.5}`, ErrInvalidInput},
		{"trailing dot", `{"a":1.}`, ErrInvalidInput},
		{"plus sign", `{"a":+1}`, ErrInvalidInput},
		{"lone minus", `{"a":-}`, ErrInvalidInput},
		{"empty exponent", `{"a":1e}`, ErrInvalidInput},
		{"NaN literal", `{"a":NaN}`, ErrInvalidInput},
		{"untyped overflow", `{"a":1e400}`, ErrInvalidInput},
		{"control character in string", "{\"a\":\"x\ny\"}", ErrInvalidInput},
		{"invalid escape", `{"a":"\x"}`, ErrInvalidInput},
		{"short unicode escape", `{"a":"\u12"}`, ErrInvalidInput},
		{"bad hex in unicode escape", `{"a":"\u12G4"}`, ErrInvalidInput},
		{"duplicate property", `{"a":1,"a":2}`, ErrInvalidInput},
		{"duplicate property, one null", `{"a":null,"a":2}`, ErrInvalidInput},
		{"duplicate PartitionKey", `{"PartitionKey":"a","PartitionKey":"b"}`, ErrInvalidInput},
		{"duplicate Timestamp", `{"Timestamp":"a","Timestamp":"b"}`, ErrInvalidInput},
		{"duplicate annotation", `{"a":1,"a@odata.type":"Edm.Int32","a@odata.type":"Edm.Int32"}`, ErrInvalidInput},
		{"annotation without value", `{"a@odata.type":"Edm.Int32"}`, ErrInvalidInput},
		{"key annotation without value", `{"RowKey@odata.type":"Edm.String"}`, ErrInvalidInput},
		{"annotation not a string", `{"a":1,"a@odata.type":5}`, ErrInvalidInput},
		{"unknown type", `{"a":1,"a@odata.type":"Edm.Int16"}`, ErrInvalidInput},
		{"type names are case-sensitive", `{"a":"x","a@odata.type":"edm.string"}`, ErrInvalidInput},
		{"PartitionKey a number", `{"PartitionKey":1}`, ErrInvalidInput},
		{"RowKey a boolean", `{"RowKey":true}`, ErrInvalidInput},
		{"PartitionKey typed Int32", `{"PartitionKey":"1","PartitionKey@odata.type":"Edm.Int32"}`, ErrInvalidInput},
		{"Int32 from text", `{"a":"abc","a@odata.type":"Edm.Int32"}`, ErrInvalidInput},
		{"Int32 with fraction", `{"a":1.5,"a@odata.type":"Edm.Int32"}`, ErrInvalidInput},
		{"Int32 written 1.0", `{"a":1.0,"a@odata.type":"Edm.Int32"}`, ErrInvalidInput},
		{"Int32 overflow", `{"a":2147483648,"a@odata.type":"Edm.Int32"}`, ErrInvalidInput},
		{"Int64 overflow", `{"a":"9223372036854775808","a@odata.type":"Edm.Int64"}`, ErrInvalidInput},
		{"Int64 garbage", `{"a":"12x","a@odata.type":"Edm.Int64"}`, ErrInvalidInput},
		{"Int64 empty", `{"a":"","a@odata.type":"Edm.Int64"}`, ErrInvalidInput},
		{"Int64 from boolean", `{"a":true,"a@odata.type":"Edm.Int64"}`, ErrInvalidInput},
		{"Double from text", `{"a":"abc","a@odata.type":"Edm.Double"}`, ErrInvalidInput},
		{"Double hex text", `{"a":"0x1p3","a@odata.type":"Edm.Double"}`, ErrInvalidInput},
		{"Double lowercase nan", `{"a":"nan","a@odata.type":"Edm.Double"}`, ErrInvalidInput},
		{"Double overflow", `{"a":13e7705,"a@odata.type":"Edm.Double"}`, ErrInvalidInput},
		{"Boolean from number", `{"a":1,"a@odata.type":"Edm.Boolean"}`, ErrInvalidInput},
		{"String from number", `{"a":5,"a@odata.type":"Edm.String"}`, ErrInvalidInput},
		{"Guid invalid", `{"a":"not-a-guid","a@odata.type":"Edm.Guid"}`, ErrInvalidInput},
		{"Guid from number", `{"a":5,"a@odata.type":"Edm.Guid"}`, ErrInvalidInput},
		{"Binary bad base64", `{"a":"!!!!","a@odata.type":"Edm.Binary"}`, ErrInvalidInput},
		{"Binary without padding", `{"a":"aGk","a@odata.type":"Edm.Binary"}`, ErrInvalidInput},
		{"Binary from number", `{"a":5,"a@odata.type":"Edm.Binary"}`, ErrInvalidInput},
		{"DateTime invalid month", `{"a":"2020-13-01T00:00:00Z","a@odata.type":"Edm.DateTime"}`, ErrInvalidInput},
		{"DateTime date only", `{"a":"2020-01-01","a@odata.type":"Edm.DateTime"}`, ErrInvalidInput},
		{"DateTime from number", `{"a":5,"a@odata.type":"Edm.DateTime"}`, ErrInvalidInput},
		{"too many members", "{" + strings.Repeat(`"a":null,`, maxMembers) + `"b":1}`, ErrTooManyProperties},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := DecodeJSON([]byte(tt.body))
			if !errors.Is(err, tt.want) || e != nil {
				t.Fatalf("DecodeJSON = %v, %v; want error %v", e, err, tt.want)
			}
		})
	}
}

// Decoding is on the write path: a typical entity must cost a handful of
// allocations, not one per property.
func TestDecodeJSONAllocations(t *testing.T) {
	body := benchEntityJSON()
	if _, err := DecodeJSON(body); err != nil {
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(200, func() { _, _ = DecodeJSON(body) })
	if n > 12 {
		t.Fatalf("DecodeJSON of a ~1 KiB entity allocates %.0f times", n)
	}
}
