package conformance

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

func TestTables(t *testing.T) {
	ctx := context.Background()

	t.Run("CreateAndConflict", func(t *testing.T) {
		name, _ := newTable(t, "tblcreate")
		_, err := svc.CreateTable(ctx, name, nil)
		wantCode(t, err, http.StatusConflict, "TableAlreadyExists")
		// Names compare case-insensitively.
		_, err = svc.CreateTable(ctx, strings.ToUpper(name), nil)
		wantCode(t, err, http.StatusConflict, "TableAlreadyExists")
	})

	t.Run("CreateResponses", func(t *testing.T) {
		r := raw(t, "POST", "/Tables", jsonHeaders(), []byte(`{"TableName":"tblbody1"}`), true)
		if r.status != http.StatusCreated || r.json(t)["TableName"] != "tblbody1" ||
			!strings.HasSuffix(fmt.Sprint(r.json(t)["odata.metadata"]), "/$metadata#Tables/@Element") {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		r = raw(t, "POST", "/Tables", jsonHeaders("Prefer", "return-no-content"), []byte(`{"TableName":"tblbody2"}`), true)
		if r.status != http.StatusNoContent || r.header.Get("Preference-Applied") != "return-no-content" || len(r.body) != 0 {
			t.Fatalf("create with return-no-content: %d %v %s", r.status, r.header, r.body)
		}
		r = raw(t, "GET", "/Tables('tblbody2')", jsonHeaders("Accept", "application/json;odata=nometadata"), nil, true)
		if r.status != http.StatusOK || string(r.body) != `{"TableName":"tblbody2"}` {
			t.Fatalf("get one table: %d %s", r.status, r.body)
		}
	})

	t.Run("Names", func(t *testing.T) {
		tests := []struct {
			name, code string
		}{
			{"ab", "OutOfRangeInput"},
			{strings.Repeat("a", 64), "OutOfRangeInput"},
			{"a-b-c", "InvalidResourceName"},
			{"1abc", "InvalidResourceName"},
			{"abc_d", "InvalidResourceName"},
			{"tables", "InvalidInput"},
			{"Tables", "InvalidInput"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := svc.CreateTable(ctx, tt.name, nil)
				wantCode(t, err, http.StatusBadRequest, tt.code)
			})
		}
		for _, ok := range []string{"A1b" + strings.Repeat("Z", 60)} {
			if _, err := svc.CreateTable(ctx, ok, nil); err != nil {
				t.Errorf("valid name %q: %v", ok, err)
			}
		}
	})

	t.Run("Delete", func(t *testing.T) {
		name, c := newTable(t, "tbldel")
		if _, err := c.AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.DeleteTable(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
		// Azure answers the delete of a missing table ResourceNotFound
		// (Azurite issue #748), entity calls on it TableNotFound.
		_, err := svc.DeleteTable(ctx, name, nil)
		wantCode(t, err, http.StatusNotFound, "ResourceNotFound")
		_, err = c.GetEntity(ctx, "p", "r", nil)
		wantCode(t, err, http.StatusNotFound, "TableNotFound")
		// A new table of the same name starts empty.
		if _, err := svc.CreateTable(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
		_, err = c.GetEntity(ctx, "p", "r", nil)
		wantCode(t, err, http.StatusNotFound, "ResourceNotFound")
	})

	t.Run("QueryFilterTopContinuation", func(t *testing.T) {
		var want []string
		for i := range 5 {
			n := fmt.Sprintf("qtbl%c%d", 'a'+i, i)
			if _, err := svc.CreateTable(ctx, n, nil); err != nil {
				t.Fatal(err)
			}
			want = append(want, n)
		}
		var got []string
		pages := 0
		p := svc.NewListTablesPager(&aztables.ListTablesOptions{Filter: to.Ptr("TableName ge 'qtbl' and TableName lt 'qtbm'"), Top: to.Ptr(int32(2))})
		for p.More() {
			resp, err := p.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(resp.Tables) > 2 {
				t.Fatalf("page of %d with Top 2", len(resp.Tables))
			}
			for _, tb := range resp.Tables {
				got = append(got, *tb.Name)
			}
		}
		if !slices.Equal(got, want) || pages != 3 {
			t.Fatalf("tables %v in %d pages, want %v in 3", got, pages, want)
		}
		r := raw(t, "GET", "/Tables?$filter=TableName%20eq%20'qtbla0'&$select=TableName", jsonHeaders("Accept", "application/json;odata=nometadata"), nil, true)
		if r.status != 200 || string(r.body) != `{"value":[{"TableName":"qtbla0"}]}` {
			t.Fatalf("select: %d %s", r.status, r.body)
		}
		r = raw(t, "GET", "/Tables?$top=2&$filter=TableName%20ge%20'qtbl'", jsonHeaders(), nil, true)
		if r.header.Get("x-ms-continuation-NextTableName") == "" {
			t.Fatalf("no NextTableName: %v", r.header)
		}
		r = raw(t, "GET", "/Tables?$top=1001", jsonHeaders(), nil, true)
		if r.status != 400 || r.code() != "InvalidInput" {
			t.Fatalf("$top=1001: %d %s", r.status, r.code())
		}
		r = raw(t, "GET", "/Tables?$filter=TableName%20eq", jsonHeaders(), nil, true)
		if r.status != 400 || r.code() != "InvalidInput" {
			t.Fatalf("bad filter: %d %s", r.status, r.code())
		}
	})
}
