package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/frontend/batch"
)

func TestBatch(t *testing.T) {
	ctx := context.Background()
	table, c := newTable(t, "batch")
	ent := func(pk, rk string, kv ...any) []byte {
		m := map[string]any{"PartitionKey": pk, "RowKey": rk}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return mustJSON(t, m)
	}
	act := func(typ aztables.TransactionType, e []byte, etag *azcore.ETag) aztables.TransactionAction {
		return aztables.TransactionAction{ActionType: typ, Entity: e, IfMatch: etag}
	}
	get := func(pk, rk string) (map[string]any, azcore.ETag, error) {
		r, err := c.GetEntity(ctx, pk, rk, nil)
		if err != nil {
			return nil, "", err
		}
		var m map[string]any
		_ = json.Unmarshal(r.Value, &m)
		return m, r.ETag, nil
	}
	// failed checks the SDK's error for a failed transaction: its message
	// carries the sub-response, whose message starts with the index.
	failed := func(t *testing.T, err error, code, msg string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), `"code":"`+code+`"`) || !strings.Contains(err.Error(), `"value":"`+msg) {
			t.Fatalf("want %s %q, got %v", code, msg, err)
		}
	}

	t.Run("MixedSuccess", func(t *testing.T) {
		for _, rk := range []string{"m", "r", "d"} {
			if _, err := c.AddEntity(ctx, ent("mix", rk, "Old", int32(1)), nil); err != nil {
				t.Fatal(err)
			}
		}
		_, etag, _ := get("mix", "m")
		anyTag := azcore.ETagAny
		_, err := c.SubmitTransaction(ctx, []aztables.TransactionAction{
			act(aztables.TransactionTypeAdd, ent("mix", "new", "N", int32(1)), nil),
			act(aztables.TransactionTypeUpdateMerge, ent("mix", "m", "New", int32(2)), &etag),
			act(aztables.TransactionTypeUpdateReplace, ent("mix", "r", "New", int32(2)), &anyTag),
			act(aztables.TransactionTypeInsertMerge, ent("mix", "um", "U", int32(3)), nil),
			act(aztables.TransactionTypeInsertReplace, ent("mix", "ur", "U", int32(4)), nil),
			act(aztables.TransactionTypeDelete, ent("mix", "d"), nil),
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		m, e1, _ := get("mix", "m")
		if m["Old"] != float64(1) || m["New"] != float64(2) {
			t.Fatalf("merge: %v", m)
		}
		r, e2, _ := get("mix", "r")
		if r["Old"] != nil || r["New"] != float64(2) {
			t.Fatalf("replace: %v", r)
		}
		_, e3, err := get("mix", "new")
		if err != nil {
			t.Fatal(err)
		}
		_, e4, _ := get("mix", "um")
		_, e5, _ := get("mix", "ur")
		if e1 != e2 || e2 != e3 || e3 != e4 || e4 != e5 {
			t.Fatalf("one transaction, several ETags: %s %s %s %s %s", e1, e2, e3, e4, e5)
		}
		_, _, err = get("mix", "d")
		wantCode(t, err, http.StatusNotFound, "ResourceNotFound")
	})

	t.Run("FailureAppliesNothing", func(t *testing.T) {
		for _, rk := range []string{"exists", "other"} {
			if _, err := c.AddEntity(ctx, ent("fail", rk, "V", int32(1)), nil); err != nil {
				t.Fatal(err)
			}
		}
		_, err := c.SubmitTransaction(ctx, []aztables.TransactionAction{
			act(aztables.TransactionTypeAdd, ent("fail", "a"), nil),
			act(aztables.TransactionTypeInsertReplace, ent("fail", "exists", "V", int32(2)), nil),
			act(aztables.TransactionTypeAdd, ent("fail", "exists2"), nil),
			act(aztables.TransactionTypeAdd, ent("fail", "other"), nil),
		}, nil)
		failed(t, err, "EntityAlreadyExists", "3:The specified entity already exists.")
		if _, _, err := get("fail", "a"); err == nil {
			t.Fatal("operation 0 of a failed transaction was applied")
		}
		if m, _, _ := get("fail", "exists"); m["V"] != float64(1) {
			t.Fatalf("operation 1 of a failed transaction was applied: %v", m)
		}
		stale := azcore.ETag(`W/"datetime'2000-01-01T00%3A00%3A00Z'"`)
		_, err = c.SubmitTransaction(ctx, []aztables.TransactionAction{
			act(aztables.TransactionTypeUpdateMerge, ent("fail", "exists", "V", int32(3)), &stale),
		}, nil)
		failed(t, err, "UpdateConditionNotSatisfied", "0:The update condition specified in the request was not satisfied.")
		_, err = c.SubmitTransaction(ctx, []aztables.TransactionAction{
			act(aztables.TransactionTypeAdd, ent("fail", "b"), nil),
			act(aztables.TransactionTypeDelete, ent("fail", "nothere"), nil),
		}, nil)
		failed(t, err, "ResourceNotFound", "1:The specified resource does not exist.")
	})

	t.Run("Rules", func(t *testing.T) {
		many := func(n int) []aztables.TransactionAction {
			out := make([]aztables.TransactionAction, n)
			for i := range out {
				out[i] = act(aztables.TransactionTypeAdd, ent("many", fmt.Sprintf("%03d", i)), nil)
			}
			return out
		}
		_, err := c.SubmitTransaction(ctx, []aztables.TransactionAction{
			act(aztables.TransactionTypeAdd, ent("p1", "x"), nil),
			act(aztables.TransactionTypeAdd, ent("p2", "x"), nil),
		}, nil)
		failed(t, err, "CommandsInBatchActOnDifferentPartitions", "1:All commands in a batch must operate on same entity group.")
		_, err = c.SubmitTransaction(ctx, []aztables.TransactionAction{
			act(aztables.TransactionTypeInsertMerge, ent("p1", "x"), nil),
			act(aztables.TransactionTypeInsertMerge, ent("p1", "x"), nil),
		}, nil)
		failed(t, err, "InvalidDuplicateRow", "1:The batch request contains multiple changes with same row key.")
		_, err = c.SubmitTransaction(ctx, many(101), nil)
		failed(t, err, "InvalidInput", "0:The batch request operation exceeds the maximum 100 changes per change set.")
		if _, _, err := get("many", "000"); err == nil {
			t.Fatal("a refused transaction wrote")
		}
		if _, err := c.SubmitTransaction(ctx, many(100), nil); err != nil {
			t.Fatalf("100 operations: %v", err)
		}
		big := strings.Repeat("x", 30000)
		var huge []aztables.TransactionAction
		for i := range 80 {
			huge = append(huge, act(aztables.TransactionTypeAdd, ent("huge", fmt.Sprint(i), "A", big, "B", big), nil))
		}
		_, err = c.SubmitTransaction(ctx, huge, nil)
		wantCode(t, err, http.StatusRequestEntityTooLarge, "RequestBodyTooLarge")
		_, err = c.SubmitTransaction(ctx, []aztables.TransactionAction{
			act(aztables.TransactionTypeAdd, ent("limits", "ok"), nil),
			act(aztables.TransactionTypeAdd, ent("limits", "big", "S", strings.Repeat("y", 32*1024+1)), nil),
		}, nil)
		failed(t, err, "PropertyValueTooLarge", "1:The property value exceeds the maximum allowed size (64KB).")
	})

	t.Run("QuotesInKeys", func(t *testing.T) {
		// The SDK leaves quotes undoubled in change set URLs.
		pk := "o'brien"
		if _, err := c.SubmitTransaction(ctx, []aztables.TransactionAction{
			act(aztables.TransactionTypeAdd, ent(pk, "a'1", "V", int32(1)), nil),
			act(aztables.TransactionTypeAdd, ent(pk, "b", "V", int32(1)), nil),
		}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.SubmitTransaction(ctx, []aztables.TransactionAction{
			act(aztables.TransactionTypeUpdateMerge, ent(pk, "a'1", "W", int32(2)), nil),
			act(aztables.TransactionTypeDelete, ent(pk, "b"), nil),
		}, nil); err != nil {
			t.Fatal(err)
		}
		m, _, err := get(pk, "a'1")
		if err != nil || m["W"] != float64(2) {
			t.Fatalf("%v %v", m, err)
		}
		if _, _, err := get(pk, "b"); err == nil {
			t.Fatal("delete with an undoubled quote did not apply")
		}
	})

	t.Run("Raw", func(t *testing.T) {
		post := func(body []byte, boundary string) rawResponse {
			return raw(t, "POST", "/$batch", map[string]string{"Content-Type": batch.ContentType(boundary), "Accept": "application/json;odata=minimalmetadata", "DataServiceVersion": "3.0"}, body, true)
		}
		sub := func(method, path, body string, hdr ...string) batch.Request {
			r := batch.Request{Method: method, Target: endpoint + path, Header: http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json;odata=nometadata"}}, Body: []byte(body)}
			for i := 0; i+1 < len(hdr); i += 2 {
				r.Header.Set(hdr[i], hdr[i+1])
			}
			return r
		}
		// Insert without Prefer answers 201 with the entity.
		r := post(batch.AppendRequestBody(nil, "batch_r1", "changeset_r1", []batch.Request{sub("POST", "/"+table, `{"PartitionKey":"raw","RowKey":"1","V":1}`)}), "batch_r1")
		if r.status != 202 || !strings.HasPrefix(string(r.body), "--batchresponse_") || !strings.Contains(string(r.body), "HTTP/1.1 201 Created\r\n") ||
			!strings.Contains(string(r.body), `{"PartitionKey":"raw","RowKey":"1","Timestamp":`) {
			t.Fatalf("%d %s", r.status, r.body)
		}
		// A query batch.
		r = post(batch.AppendRequestBody(nil, "batch_q", "", []batch.Request{sub("GET", entityPath(table, "raw", "1"), "")}), "batch_q")
		if r.status != 202 || !strings.Contains(string(r.body), "HTTP/1.1 200 OK\r\n") || !strings.Contains(string(r.body), `"V":1`) {
			t.Fatalf("query batch: %d %s", r.status, r.body)
		}
		// LF line ends are accepted.
		lf := strings.ReplaceAll(string(batch.AppendRequestBody(nil, "batch_lf", "changeset_lf", []batch.Request{sub("POST", "/"+table, `{"PartitionKey":"raw","RowKey":"2"}`)})), "\r\n", "\n")
		if r = post([]byte(lf), "batch_lf"); r.status != 202 || !strings.Contains(string(r.body), "HTTP/1.1 201 Created") {
			t.Fatalf("LF batch: %d %s", r.status, r.body)
		}
		// A query must be alone.
		r = post(batch.AppendRequestBody(nil, "batch_m", "changeset_m", []batch.Request{
			sub("POST", "/"+table, `{"PartitionKey":"raw","RowKey":"3"}`), sub("GET", entityPath(table, "raw", "1"), "")}), "batch_m")
		if !strings.Contains(string(r.body), "HTTP/1.1 400 Bad Request") || !strings.Contains(string(r.body), `"value":"1:`) {
			t.Fatalf("query in a change set: %d %s", r.status, r.body)
		}
		// Malformed bodies are 400 and write nothing.
		for _, body := range []string{"", "not multipart", "--batch_b\r\nContent-Type: multipart/mixed; boundary=cs\r\n\r\n--cs\r\nContent-Type: application/http\r\n\r\nPOST x HTTP/1.1\r\n\r\n{}\r\n--batch_b--"} {
			if r = post([]byte(body), "batch_b"); r.status != 400 || r.code() != "InvalidInput" {
				t.Fatalf("malformed %q: %d %s", body, r.status, r.code())
			}
		}
		r = raw(t, "POST", "/$batch", map[string]string{"Content-Type": "application/json"}, []byte("{}"), true)
		if r.status != 400 {
			t.Fatalf("JSON batch: %d", r.status)
		}
		if _, _, err := get("raw", "3"); err == nil {
			t.Fatal("a refused batch wrote")
		}
	})
}
