package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// entityPath is the URL path of an entity, keys quoted the way the SDKs
// write them (quotes doubled, then percent-encoded).
func entityPath(table, pk, rk string) string {
	q := func(s string) string { return url.PathEscape(strings.ReplaceAll(s, "'", "''")) }
	return "/" + table + "(PartitionKey='" + q(pk) + "',RowKey='" + q(rk) + "')"
}

func TestEntities(t *testing.T) {
	ctx := context.Background()
	table, c := newTable(t, "ents")

	t.Run("InsertGetETag", func(t *testing.T) {
		add, err := c.AddEntity(ctx, mustJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "a", "V": int32(1), "Timestamp": "2000-01-01T00:00:00Z"}), nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.GetEntity(ctx, "p", "a", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.ETag != add.ETag || got.ETag == "" {
			t.Fatalf("GetEntity ETag %q, AddEntity %q", got.ETag, add.ETag)
		}
		var m map[string]any
		_ = json.Unmarshal(got.Value, &m)
		ts, _ := m["Timestamp"].(string)
		if strings.HasPrefix(ts, "2000") {
			t.Fatalf("client Timestamp was stored: %v", m)
		}
		// The ETag is the Timestamp: W/"datetime'<ts with colons as %3A>'".
		if want := `W/"datetime'` + strings.ReplaceAll(ts, ":", "%3A") + `'"`; string(got.ETag) != want || m["odata.etag"] != want {
			t.Fatalf("ETag %q and odata.etag %v, Timestamp %q", got.ETag, m["odata.etag"], ts)
		}
		_, err = c.AddEntity(ctx, mustJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "a"}), nil)
		wantCode(t, err, http.StatusConflict, "EntityAlreadyExists")
		_, err = c.GetEntity(ctx, "p", "missing", nil)
		wantCode(t, err, http.StatusNotFound, "ResourceNotFound")
	})

	t.Run("InsertResponses", func(t *testing.T) {
		body := []byte(`{"PartitionKey":"p","RowKey":"ins1","V":1}`)
		r := raw(t, "POST", "/"+table, jsonHeaders(), body, true)
		if r.status != http.StatusCreated || r.json(t)["RowKey"] != "ins1" || r.header.Get("ETag") == "" ||
			!strings.HasSuffix(r.header.Get("Location"), entityPath(table, "p", "ins1")) {
			t.Fatalf("insert: %d %v %s", r.status, r.header, r.body)
		}
		r = raw(t, "POST", "/"+table, jsonHeaders("Prefer", "return-no-content"), []byte(`{"PartitionKey":"p","RowKey":"ins2"}`), true)
		if r.status != http.StatusNoContent || r.header.Get("Preference-Applied") != "return-no-content" || r.header.Get("ETag") == "" {
			t.Fatalf("insert no content: %d %v", r.status, r.header)
		}
	})

	t.Run("UpdateMergeIfMatch", func(t *testing.T) {
		add, err := c.AddEntity(ctx, mustJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "u", "A": "a", "B": "b"}), nil)
		if err != nil {
			t.Fatal(err)
		}
		up, err := c.UpdateEntity(ctx, mustJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "u", "C": "c"}), &aztables.UpdateEntityOptions{IfMatch: &add.ETag, UpdateMode: aztables.UpdateModeMerge})
		if err != nil {
			t.Fatal(err)
		}
		if up.ETag == add.ETag {
			t.Fatal("merge kept the ETag")
		}
		_, err = c.UpdateEntity(ctx, mustJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "u"}), &aztables.UpdateEntityOptions{IfMatch: &add.ETag, UpdateMode: aztables.UpdateModeReplace})
		wantCode(t, err, http.StatusPreconditionFailed, "UpdateConditionNotSatisfied")
		anyTag := azcore.ETagAny
		if _, err := c.UpdateEntity(ctx, mustJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "u", "D": "d"}), &aztables.UpdateEntityOptions{IfMatch: &anyTag, UpdateMode: aztables.UpdateModeReplace}); err != nil {
			t.Fatal(err)
		}
		got, _ := c.GetEntity(ctx, "p", "u", nil)
		var m map[string]any
		_ = json.Unmarshal(got.Value, &m)
		if m["D"] != "d" || m["A"] != nil || m["C"] != nil {
			t.Fatalf("after replace: %v", m)
		}
		// Update and Merge of a missing entity with If-Match are 404.
		for _, mode := range []aztables.UpdateMode{aztables.UpdateModeMerge, aztables.UpdateModeReplace} {
			_, err = c.UpdateEntity(ctx, mustJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "nope"}), &aztables.UpdateEntityOptions{IfMatch: &anyTag, UpdateMode: mode})
			wantCode(t, err, http.StatusNotFound, "ResourceNotFound")
		}
	})

	t.Run("Upsert", func(t *testing.T) {
		for _, mode := range []aztables.UpdateMode{aztables.UpdateModeMerge, aztables.UpdateModeReplace} {
			rk := "ups-" + string(mode)
			if _, err := c.UpsertEntity(ctx, mustJSON(t, map[string]any{"PartitionKey": "p", "RowKey": rk, "V": int32(1)}), &aztables.UpsertEntityOptions{UpdateMode: mode}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.UpsertEntity(ctx, mustJSON(t, map[string]any{"PartitionKey": "p", "RowKey": rk, "W": int32(2)}), &aztables.UpsertEntityOptions{UpdateMode: mode}); err != nil {
				t.Fatal(err)
			}
			got, _ := c.GetEntity(ctx, "p", rk, nil)
			var m map[string]any
			_ = json.Unmarshal(got.Value, &m)
			if _, hasV := m["V"]; hasV != (mode == aztables.UpdateModeMerge) || m["W"] != float64(2) {
				t.Fatalf("%s upsert: %v", mode, m)
			}
		}
	})

	t.Run("MergeVerbs", func(t *testing.T) {
		if _, err := c.AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"verbs","A":1}`), nil); err != nil {
			t.Fatal(err)
		}
		path := entityPath(table, "p", "verbs")
		tests := []struct {
			method string
			hdr    map[string]string
			prop   string
		}{
			{"MERGE", jsonHeaders("If-Match", "*"), "B"},
			{"POST", jsonHeaders("If-Match", "*", "X-HTTP-Method", "MERGE"), "C"},
			{"PATCH", jsonHeaders("If-Match", "*"), "D"},
		}
		for _, tt := range tests {
			r := raw(t, tt.method, path, tt.hdr, []byte(`{"`+tt.prop+`":1}`), true)
			if r.status != http.StatusNoContent || r.header.Get("ETag") == "" {
				t.Fatalf("%s: %d %s", tt.method, r.status, r.body)
			}
		}
		r := raw(t, "GET", path, jsonHeaders("Accept", "application/json;odata=nometadata"), nil, true)
		m := r.json(t)
		for _, p := range []string{"A", "B", "C", "D"} {
			if m[p] != float64(1) {
				t.Fatalf("after merges: %s", r.body)
			}
		}
		r = raw(t, "PUT", path, jsonHeaders("X-HTTP-Method", "MERGE"), []byte(`{}`), true)
		if r.status != 400 || r.code() != "XMethodNotUsingPost" {
			t.Fatalf("X-HTTP-Method on PUT: %d %s", r.status, r.code())
		}
	})

	t.Run("Delete", func(t *testing.T) {
		add, err := c.AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"del"}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		stale := azcore.ETag(`W/"datetime'2000-01-01T00%3A00%3A00Z'"`)
		_, err = c.DeleteEntity(ctx, "p", "del", &aztables.DeleteEntityOptions{IfMatch: &stale})
		wantCode(t, err, http.StatusPreconditionFailed, "UpdateConditionNotSatisfied")
		if _, err := c.DeleteEntity(ctx, "p", "del", &aztables.DeleteEntityOptions{IfMatch: &add.ETag}); err != nil {
			t.Fatal(err)
		}
		_, err = c.DeleteEntity(ctx, "p", "del", nil)
		wantCode(t, err, http.StatusNotFound, "ResourceNotFound")
		r := raw(t, "DELETE", entityPath(table, "p", "ins1"), jsonHeaders(), nil, true)
		if r.status != 400 || r.code() != "MissingRequiredHeader" {
			t.Fatalf("delete without If-Match: %d %s", r.status, r.code())
		}
	})

	t.Run("ETagChangesOnEveryWrite", func(t *testing.T) {
		seen := map[azcore.ETag]bool{}
		for i := range 20 {
			resp, err := c.UpsertEntity(ctx, mustJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "fast", "I": int32(i)}), nil)
			if err != nil {
				t.Fatal(err)
			}
			if seen[resp.ETag] {
				t.Fatalf("ETag %s repeated", resp.ETag)
			}
			seen[resp.ETag] = true
		}
	})

	t.Run("OddKeys", func(t *testing.T) {
		keys := [][2]string{{"it's", "a'b c"}, {"ünï", "日本"}, {"a+b", "c%d"}, {"''", "x'"}, {"sp ace", "semi;colon"}}
		for _, k := range keys {
			if _, err := c.AddEntity(ctx, mustJSON(t, map[string]any{"PartitionKey": k[0], "RowKey": k[1], "V": int32(1)}), nil); err != nil {
				t.Fatalf("add %q: %v", k, err)
			}
			got, err := c.GetEntity(ctx, k[0], k[1], nil)
			if err != nil {
				t.Fatalf("get %q: %v", k, err)
			}
			var m map[string]any
			_ = json.Unmarshal(got.Value, &m)
			if m["PartitionKey"] != k[0] || m["RowKey"] != k[1] {
				t.Fatalf("keys %q came back as %v/%v", k, m["PartitionKey"], m["RowKey"])
			}
			if _, err := c.DeleteEntity(ctx, k[0], k[1], nil); err != nil {
				t.Fatalf("delete %q: %v", k, err)
			}
		}
		// Empty keys are valid (the SDK refuses to send them on reads).
		if _, err := c.AddEntity(ctx, []byte(`{"PartitionKey":"","RowKey":"","V":1}`), nil); err != nil {
			t.Fatal(err)
		}
		if r := raw(t, "GET", entityPath(table, "", ""), jsonHeaders(), nil, true); r.status != 200 || r.json(t)["PartitionKey"] != "" {
			t.Fatalf("empty keys: %d %s", r.status, r.body)
		}
		// Malformed key literals in URLs.
		for _, p := range []string{"/" + table + "(PartitionKey='a')", "/" + table + "(PartitionKey='it%27s',RowKey='x')", "/" + table + "(PartitionKey=a,RowKey=b)"} {
			r := raw(t, "GET", p, jsonHeaders(), nil, true)
			if r.status != 400 || r.code() != "InvalidInput" {
				t.Fatalf("GET %s: %d %s", p, r.status, r.code())
			}
		}
	})

	t.Run("MetadataLevels", func(t *testing.T) {
		if _, err := c.UpsertEntity(ctx, mustJSON(t, aztables.EDMEntity{Entity: aztables.Entity{PartitionKey: "p", RowKey: "meta"},
			Properties: map[string]any{"N": aztables.EDMInt64(5), "S": "s", "D": 1.5}}), nil); err != nil {
			t.Fatal(err)
		}
		path := entityPath(table, "p", "meta")
		tests := []struct {
			name, accept, query string
			want, notWant       []string
			ct                  string
		}{
			{"minimal", "application/json;odata=minimalmetadata", "",
				[]string{`"odata.metadata":"` + endpoint + `/$metadata#` + table + `/@Element"`, `"odata.etag":`, `"N@odata.type":"Edm.Int64","N":"5"`}, []string{`"odata.type"`, `Timestamp@odata.type`}, "application/json;odata=minimalmetadata;streaming=true;charset=utf-8"},
			{"full", "application/json;odata=fullmetadata", "",
				[]string{`"odata.type":"devstoreaccount1.` + table + `"`, `"odata.id":"` + endpoint + path + `"`, `"odata.editLink":"` + path[1:] + `"`, `"Timestamp@odata.type":"Edm.DateTime"`}, nil, "application/json;odata=fullmetadata;streaming=true;charset=utf-8"},
			{"none", "application/json;odata=nometadata", "",
				[]string{`"N":"5"`, `"D":1.5`}, []string{"odata."}, "application/json;odata=nometadata;streaming=true;charset=utf-8"},
			{"$format wins", "application/json;odata=fullmetadata", "?$format=application/json;odata=nometadata",
				[]string{`"N":"5"`}, []string{"odata."}, "application/json;odata=nometadata;streaming=true;charset=utf-8"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				q := tt.query
				if q != "" {
					q = "?" + url.Values{"$format": {strings.TrimPrefix(q, "?$format=")}}.Encode()
				}
				r := raw(t, "GET", path+q, map[string]string{"Accept": tt.accept, "DataServiceVersion": "3.0"}, nil, true)
				if r.status != 200 || r.header.Get("Content-Type") != tt.ct {
					t.Fatalf("%d %s: %s", r.status, r.header.Get("Content-Type"), r.body)
				}
				for _, w := range tt.want {
					if !strings.Contains(string(r.body), w) {
						t.Errorf("body lacks %s: %s", w, r.body)
					}
				}
				for _, w := range tt.notWant {
					if strings.Contains(string(r.body), w) {
						t.Errorf("body has %s: %s", w, r.body)
					}
				}
			})
		}
		for _, h := range []map[string]string{{"Accept": "application/atom+xml"}, {"Accept": "application/json", "Content-Type": "application/atom+xml"}} {
			r := raw(t, "GET", path, h, nil, true)
			if r.status != http.StatusUnsupportedMediaType || r.code() != "AtomFormatNotSupported" || !strings.Contains(string(r.body), "<code>AtomFormatNotSupported</code>") {
				t.Fatalf("atom %v: %d %s %s", h, r.status, r.code(), r.body)
			}
		}
	})

	t.Run("CommonHeaders", func(t *testing.T) {
		r := raw(t, "GET", entityPath(table, "p", "a"), map[string]string{"x-ms-client-request-id": "conf-123", "x-ms-version": "2021-12-02"}, nil, true)
		if r.header.Get("x-ms-client-request-id") != "conf-123" || r.header.Get("x-ms-version") != "2021-12-02" {
			t.Fatalf("headers %v", r.header)
		}
		if _, err := time.Parse(http.TimeFormat, r.header.Get("Date")); err != nil {
			t.Fatal(err)
		}
		// Errors carry x-ms-error-code and the odata.error body too.
		r = raw(t, "GET", entityPath(table, "p", "missing"), jsonHeaders(), nil, true)
		m := r.json(t)
		oe, _ := m["odata.error"].(map[string]any)
		msg, _ := oe["message"].(map[string]any)
		if r.code() != "ResourceNotFound" || oe["code"] != "ResourceNotFound" || msg["lang"] != "en-US" ||
			!strings.Contains(fmt.Sprint(msg["value"]), "\nRequestId:"+r.header.Get("x-ms-request-id")+"\nTime:") {
			t.Fatalf("error body %s", r.body)
		}
	})
}
