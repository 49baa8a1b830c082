package conformance

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/frontend/batch"
)

// TestWireDifferences covers the answers where tablestore once differed
// from the service (issue 11); each subtest names the service's behaviour.
func TestWireDifferences(t *testing.T) {
	ctx := context.Background()
	table, c := newTable(t, "wire")
	if _, err := c.AddEntity(ctx, mustJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "B": true, "N": 1}), nil); err != nil {
		t.Fatal(err)
	}

	t.Run("UnknownVersionIsInvalidHeaderValue", func(t *testing.T) {
		for _, v := range []string{"invalid", "2099-01-01"} {
			r := raw(t, "GET", "/Tables", jsonHeaders("x-ms-version", v), nil, true)
			if r.status != 400 || r.code() != "InvalidHeaderValue" || r.header.Get("x-ms-version") == v {
				t.Fatalf("x-ms-version %s: %d %s, echoed %q", v, r.status, r.code(), r.header.Get("x-ms-version"))
			}
		}
		if r := raw(t, "GET", "/Tables", jsonHeaders("x-ms-version", "2021-12-02"), nil, true); r.status != 200 || r.header.Get("x-ms-version") != "2021-12-02" {
			t.Fatalf("known version: %d %s", r.status, r.header.Get("x-ms-version"))
		}
	})

	t.Run("StatsOnlyOnSecondary", func(t *testing.T) {
		_, err := svc.GetStatistics(ctx, nil)
		wantCode(t, err, 400, "InvalidQueryParameterValue")
		sec, err := aztables.NewServiceClientWithSharedKey(endpoint+"-secondary", cred, clientOptions())
		if err != nil {
			t.Fatal(err)
		}
		st, err := sec.GetStatistics(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if *st.GeoReplication.Status != aztables.GeoReplicationStatusLive || st.GeoReplication.LastSyncTime == nil {
			t.Fatalf("stats %+v", st.GeoReplication)
		}
	})

	t.Run("IfMatchWeakIsConditionStrongIsInvalid", func(t *testing.T) {
		got, err := c.GetEntity(ctx, "p", "r", nil)
		if err != nil {
			t.Fatal(err)
		}
		body := mustJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "B": true, "N": 2})
		for _, tc := range []struct {
			etag   string
			status int
			code   string
		}{
			{`W/"stale"`, 412, "UpdateConditionNotSatisfied"},
			{`w/"datetime'2001-01-01T00%3A00%3A00Z'"`, 412, "UpdateConditionNotSatisfied"},
			{strings.TrimPrefix(string(got.ETag), "W/"), 400, "InvalidInput"},
			{"datetime'2001-01-01T00%3A00%3A00Z'", 400, "InvalidInput"},
			{"stale", 400, "InvalidInput"},
		} {
			etag := azcore.ETag(tc.etag)
			_, err := c.UpdateEntity(ctx, body, &aztables.UpdateEntityOptions{IfMatch: &etag, UpdateMode: aztables.UpdateModeMerge})
			if st, code := respCode(err); st != tc.status || code != tc.code {
				t.Fatalf("If-Match %s: %d %s, want %d %s", tc.etag, st, code, tc.status, tc.code)
			}
		}
		// The entity's own weak ETag, in either case of w, is the condition that holds.
		lower := azcore.ETag("w" + strings.TrimPrefix(string(got.ETag), "W"))
		if _, err := c.UpdateEntity(ctx, body, &aztables.UpdateEntityOptions{IfMatch: &lower, UpdateMode: aztables.UpdateModeMerge}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("TypedNullIsInvalidInput", func(t *testing.T) {
		for _, typ := range []string{"Edm.DateTime", "Edm.Double"} {
			body := `{"PartitionKey":"null","RowKey":"` + typ + `","v":null,"v@odata.type":"` + typ + `"}`
			r := raw(t, "POST", "/"+table, jsonHeaders(), []byte(body), true)
			if r.status != 400 || r.code() != "InvalidInput" {
				t.Fatalf("%s: %d %s", typ, r.status, r.code())
			}
			if _, err := c.GetEntity(ctx, "null", typ, nil); err == nil {
				t.Fatalf("%s: a refused insert wrote", typ)
			}
		}
	})

	t.Run("BodyOver4MiBIsRequestBodyTooLarge", func(t *testing.T) {
		body := []byte(`{"PartitionKey":"big","RowKey":"1","S":"` + strings.Repeat("x", 4<<20+3<<10) + `"}`)
		r := raw(t, "POST", "/"+table, jsonHeaders(), body, true)
		if r.status != 413 || r.code() != "RequestBodyTooLarge" {
			t.Fatalf("%d %s", r.status, r.code())
		}
	})

	t.Run("JSONBeforeItsVersionIsJsonFormatNotSupported", func(t *testing.T) {
		// JSON exists from 2013-08-15; earlier versions answer 415
		// (azure-storage-net #32, azure-storage-python #104).
		r := raw(t, "GET", entityPath(table, "p", "r"), jsonHeaders("x-ms-version", "2012-02-12"), nil, true)
		if r.status != 415 || r.code() != "JsonFormatNotSupported" || !strings.Contains(string(r.body), "<m:code>JsonFormatNotSupported</m:code>") {
			t.Fatalf("read: %d %s %s", r.status, r.code(), r.body)
		}
		body := mustJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "old"})
		if r := raw(t, "POST", "/"+table, jsonHeaders("x-ms-version", "2011-08-18"), body, true); r.status != 415 || r.code() != "JsonFormatNotSupported" {
			t.Fatalf("insert: %d %s %s", r.status, r.code(), r.body)
		}
		if r := raw(t, "GET", entityPath(table, "p", "old"), jsonHeaders(), nil, true); r.status != 404 {
			t.Fatalf("the refused insert was written: %d %s", r.status, r.body)
		}
		if r := raw(t, "GET", entityPath(table, "p", "r"), jsonHeaders("x-ms-version", "2013-08-15"), nil, true); r.status != 200 {
			t.Fatalf("read at 2013-08-15: %d %s", r.status, r.body)
		}
	})

	t.Run("BooleanLiteralsIgnoreCase", func(t *testing.T) {
		for _, f := range []string{"B eq True", "B eq TRUE", "B ne FALSE", "not (B eq False)"} {
			ents, _ := listAll(t, c, &aztables.ListEntitiesOptions{Filter: &f})
			if len(ents) != 1 {
				t.Fatalf("%s: %d entities", f, len(ents))
			}
		}
	})

	t.Run("TopZeroIsEmptyPage", func(t *testing.T) {
		r := raw(t, "GET", "/"+table+"()?$top=0", jsonHeaders(), nil, true)
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if v, ok := r.json(t)["value"].([]any); !ok || len(v) != 0 {
			t.Fatalf("body %s", r.body)
		}
		r = raw(t, "GET", "/Tables?$top=0", jsonHeaders(), nil, true)
		if v, ok := r.json(t)["value"].([]any); r.status != 200 || !ok || len(v) != 0 {
			t.Fatalf("tables: %d %s", r.status, r.body)
		}
	})

	t.Run("BatchGetMissingNamesIndex", func(t *testing.T) {
		sub := batch.Request{Method: "GET", Target: endpoint + entityPath(table, "p", "missing"),
			Header: http.Header{"Accept": {"application/json;odata=minimalmetadata"}}}
		r := raw(t, "POST", "/$batch", map[string]string{"Content-Type": batch.ContentType("batch_g"), "DataServiceVersion": "3.0"},
			batch.AppendRequestBody(nil, "batch_g", "", []batch.Request{sub}), true)
		if r.status != 202 || !strings.Contains(string(r.body), "HTTP/1.1 404 Not Found") ||
			!strings.Contains(string(r.body), `"value":"0:The specified resource does not exist.`) {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})

	t.Run("SecondaryRefusesWrites", func(t *testing.T) {
		sec, err := aztables.NewClientWithSharedKey(endpoint+"-secondary/"+table, cred, clientOptions())
		if err != nil {
			t.Fatal(err)
		}
		_, err = sec.AddEntity(ctx, mustJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "sec"}), nil)
		wantCode(t, err, 403, "AuthorizationFailure")
		// Followers serve the secondary and apply writes a moment after
		// the leader acknowledges them.
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, err := sec.GetEntity(ctx, "p", "r", nil)
			if err == nil && strings.Contains(string(got.Value), `"N":2`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("read on the secondary: %v %s", err, got.Value)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}
