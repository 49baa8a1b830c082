package conformance

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestLimits sends every limit of the capacity table just inside (stored)
// and just outside (400 with Azure's code, nothing written).
func TestLimits(t *testing.T) {
	ctx := context.Background()
	table, c := newTable(t, "limits")
	props := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, `,"P%03d":%d`, i, i)
		}
		return b.String()
	}
	str := func(n int) string { return `"` + strings.Repeat("s", n) + `"` }
	bin := func(n int) string { return `"` + base64.StdEncoding.EncodeToString(make([]byte, n)) + `"` }
	// Eight binary properties of 64 KiB - 1 KiB make an entity under 1 MiB
	// by Azure's size formula, seventeen one over it.
	bigBins := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, `,"B%02d":%s,"B%02d@odata.type":"Edm.Binary"`, i, bin(63*1024), i)
		}
		return b.String()
	}
	tests := []struct {
		name string
		pk   string
		rk   string
		rest string // more members after the keys
		code string // "" when the entity must be stored
	}{
		{name: "key of 1024 chars", pk: strings.Repeat("k", 1024), rk: "r"},
		{name: "key of 1025 chars", pk: strings.Repeat("k", 1025), rk: "r", code: "KeyValueTooLarge"},
		{name: "row key of 1025 chars", pk: "p", rk: strings.Repeat("k", 1025), code: "KeyValueTooLarge"},
		{name: "key with /", pk: "p", rk: "a/b", code: "InvalidInput"},
		{name: "key with backslash", pk: "p", rk: `a\\b`, code: "InvalidInput"},
		{name: "key with #", pk: "a#b", rk: "r", code: "InvalidInput"},
		{name: "key with ?", pk: "p", rk: "a?b", code: "InvalidInput"},
		{name: "key with control char", pk: "p", rk: `a\u0001b`, code: "InvalidInput"},
		{name: "key with DEL", pk: "p", rk: `a\u007fb`, code: "InvalidInput"},
		{name: "key with C1 control", pk: "p", rk: `a\u0085b`, code: "InvalidInput"},
		{name: "252 properties", pk: "p", rk: "props252", rest: props(252)},
		{name: "253 properties", pk: "p", rk: "props253", rest: props(253), code: "TooManyProperties"},
		{name: "name of 255 chars", pk: "p", rk: "name255", rest: `,"` + strings.Repeat("n", 255) + `":1`},
		{name: "name of 256 chars", pk: "p", rk: "name256", rest: `,"` + strings.Repeat("n", 256) + `":1`, code: "PropertyNameTooLong"},
		{name: "name with dash", pk: "p", rk: "dash", rest: `,"a-b":1`, code: "PropertyNameInvalid"},
		{name: "name starting with digit", pk: "p", rk: "digit", rest: `,"1a":1`, code: "PropertyNameInvalid"},
		{name: "system name", pk: "p", rk: "sys", rest: `,"PartitionKeyX":1,"Timestamp":"x"`},
		{name: "string of 32K chars", pk: "p", rk: "str32k", rest: `,"S":` + str(32*1024)},
		{name: "string of 32K+1 chars", pk: "p", rk: "str32k1", rest: `,"S":` + str(32*1024+1), code: "PropertyValueTooLarge"},
		{name: "binary of 64 KiB", pk: "p", rk: "bin64k", rest: `,"B":` + bin(64*1024) + `,"B@odata.type":"Edm.Binary"`},
		{name: "binary of 64 KiB + 1", pk: "p", rk: "bin64k1", rest: `,"B":` + bin(64*1024+1) + `,"B@odata.type":"Edm.Binary"`, code: "PropertyValueTooLarge"},
		{name: "entity under 1 MiB", pk: "p", rk: "mib", rest: bigBins(8)},
		{name: "entity over 1 MiB", pk: "p", rk: "mib1", rest: bigBins(17), code: "EntityTooLarge"},
		{name: "missing RowKey", pk: "p", rk: "\x00", code: "PropertiesNeedValue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"PartitionKey":"` + tt.pk + `","RowKey":"` + tt.rk + `"` + tt.rest + `}`
			if tt.rk == "\x00" {
				body = `{"PartitionKey":"` + tt.pk + `"}`
			}
			r := raw(t, "POST", "/"+table, jsonHeaders("Prefer", "return-no-content"), []byte(body), true)
			if tt.code == "" {
				if r.status != http.StatusNoContent {
					t.Fatalf("%d %s: %.300s", r.status, r.code(), r.body)
				}
				return
			}
			if r.status != 400 || r.code() != tt.code {
				t.Fatalf("%d %s, want 400 %s: %.300s", r.status, r.code(), tt.code, r.body)
			}
		})
	}
	// Nothing refused was written.
	got, _ := listAll(t, c, nil)
	if len(got) != 7 {
		t.Fatalf("%d entities stored, want the 7 accepted: %v", len(got), keysOf(got))
	}

	t.Run("MergeGrowsPastLimit", func(t *testing.T) {
		// Each half is under 1 MiB; merged they are over: only the server,
		// where the stored entity is, can tell.
		if r := raw(t, "POST", "/"+table, jsonHeaders("Prefer", "return-no-content"), []byte(`{"PartitionKey":"g","RowKey":"grow"`+bigBins(9)+`}`), true); r.status != 204 {
			t.Fatalf("first half: %d %s", r.status, r.body)
		}
		more := strings.ReplaceAll(bigBins(9), `"B0`, `"C0`)
		r := raw(t, "MERGE", entityPath(table, "g", "grow"), jsonHeaders("If-Match", "*"), []byte(`{`+more[1:]+`}`), true)
		if r.status != 400 || r.code() != "EntityTooLarge" {
			t.Fatalf("merge over 1 MiB: %d %s %.300s", r.status, r.code(), r.body)
		}
	})

	t.Run("BodyOverCap", func(t *testing.T) {
		r := raw(t, "POST", "/"+table, jsonHeaders(), []byte(`{"PartitionKey":"p","RowKey":"huge","S":`+str(5<<20)+`}`), true)
		if r.status != http.StatusRequestEntityTooLarge || r.code() != "RequestBodyTooLarge" {
			t.Fatalf("%d %s", r.status, r.code())
		}
	})

	t.Run("BadRequests", func(t *testing.T) {
		tests := []struct {
			name, method, path string
			hdr                map[string]string
			body               string
			status             int
			code               string
		}{
			{"unknown resource", "GET", "/" + table + "/sub", jsonHeaders(), "", 400, "InvalidUri"},
			{"method not allowed", "DELETE", "/Tables", jsonHeaders(), "", 405, "MethodNotAllowed"},
			{"bad timeout", "GET", "/" + table + "()?timeout=abc", jsonHeaders(), "", 400, "InvalidQueryParameterValue"},
			{"body keys differ from URL", "PUT", entityPath(table, "p", "a"), jsonHeaders(), `{"PartitionKey":"q"}`, 400, "InvalidInput"},
			{"bad If-Match", "PUT", entityPath(table, "p", "a"), jsonHeaders("If-Match", "nonsense"), `{}`, 400, "InvalidInput"},
			{"bad $format", "GET", "/" + table + "()?$format=text/plain", jsonHeaders(), "", 400, "InvalidQueryParameterValue"},
			{"empty body", "POST", "/" + table, jsonHeaders(), "", 400, "InvalidInput"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var body []byte
				if tt.body != "" {
					body = []byte(tt.body)
				}
				r := raw(t, tt.method, tt.path, tt.hdr, body, true)
				if r.status != tt.status || r.code() != tt.code {
					t.Fatalf("%d %s, want %d %s: %s", r.status, r.code(), tt.status, tt.code, r.body)
				}
			})
		}
	})
	_ = ctx
}
