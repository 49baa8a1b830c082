package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"tablestore/frontend/auth"
	"tablestore/internal/edm"
	pb "tablestore/proto/tablestorepb"
)

// TestServiceSASRangePaging pages through a table with service SASs of
// several key ranges, $top sizes and filters, following continuations,
// and checks every page holds only entities inside the range and the
// pages together hold all of them (Azure applies the range to queries).
func TestServiceSASRangePaging(t *testing.T) {
	fb := newFakeBackend()
	s, err := NewServer(DefaultConfig(), fb, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := fb.CreateTable(ctx, "grid"); err != nil {
		t.Fatal(err)
	}
	var all [][2]string
	for _, pk := range []string{"a", "b", "c", "d", "e"} {
		var ops []*pb.EntityOp
		for _, rk := range []string{"1", "2", "3"} {
			e := &edm.Entity{PartitionKey: pk, RowKey: rk, Properties: []edm.Property{{Name: "N", Value: edm.Int32Value(int32(len(all)))}}}
			ops = append(ops, &pb.EntityOp{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: pk, RowKey: rk, Entity: edm.MarshalBinary(e)})
			all = append(all, [2]string{pk, rk})
		}
		if _, err := fb.Write(ctx, "grid", pk, ops); err != nil {
			t.Fatal(err)
		}
	}
	ranges := []auth.KeyRange{
		{StartPartitionKey: "b", EndPartitionKey: "d"},
		{StartPartitionKey: "b", StartRowKey: "2", EndPartitionKey: "d", EndRowKey: "2"},
		{StartPartitionKey: "c", StartRowKey: "3", EndPartitionKey: "c", EndRowKey: "3"},
		{StartPartitionKey: "bb"},
		{EndPartitionKey: "a", EndRowKey: "2"},
		{StartPartitionKey: "e", StartRowKey: "4"},
	}
	for _, kr := range ranges {
		v, err := auth.ServiceSAS{Table: "grid", Permissions: "r", Expiry: time.Now().Add(time.Hour),
			StartPartitionKey: kr.StartPartitionKey, StartRowKey: kr.StartRowKey,
			EndPartitionKey: kr.EndPartitionKey, EndRowKey: kr.EndRowKey}.Encode(auth.DevAccount())
		if err != nil {
			t.Fatal(err)
		}
		var want [][2]string
		for _, k := range all {
			if kr.Contains(k[0], k[1]) {
				want = append(want, k)
			}
		}
		for _, top := range []string{"", "1", "2"} {
			for _, filter := range []string{"", "N ge 0", "PartitionKey ne 'zz'"} {
				for _, from := range []string{"", "0", "zz"} {
					t.Run(fmt.Sprintf("%s/top=%s/filter=%q/from=%q", kr, top, filter, from), func(t *testing.T) {
						var got [][2]string
						q := url.Values{}
						for k, vs := range v {
							q[k] = vs
						}
						if top != "" {
							q.Set("$top", top)
						}
						if filter != "" {
							q.Set("$filter", filter)
						}
						want := want
						if from != "" {
							// A continuation the client made up, before or
							// past every key.
							q.Set("NextPartitionKey", string(appendToken(nil, from)))
							if from == "zz" {
								want = nil
							}
						}
						for page := 0; ; page++ {
							if page > 40 {
								t.Fatalf("no end after %d pages: %v", page, got)
							}
							r := httptest.NewRequest("GET", "http://127.0.0.1:10002/devstoreaccount1/grid()?"+q.Encode(), nil)
							r.Header.Set("Accept", "application/json;odata=nometadata")
							rec := httptest.NewRecorder()
							s.Handler().ServeHTTP(rec, r)
							if rec.Code != 200 {
								t.Fatalf("%d %s", rec.Code, rec.Body.String())
							}
							var body struct{ Value []map[string]any }
							if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
								t.Fatal(err)
							}
							for _, e := range body.Value {
								k := [2]string{e["PartitionKey"].(string), e["RowKey"].(string)}
								if !kr.Contains(k[0], k[1]) {
									t.Fatalf("page %d returned %v, outside %s", page, k, kr)
								}
								got = append(got, k)
							}
							npk := rec.Header().Get("x-ms-continuation-NextPartitionKey")
							nrk := rec.Header().Get("x-ms-continuation-NextRowKey")
							if npk == "" && nrk == "" {
								break
							}
							pk, pok := decodeToken(npk)
							rk, rok := decodeToken(nrk)
							if !pok || !rok {
								t.Fatalf("page %d continues with malformed tokens %q, %q", page, npk, nrk)
							}
							if next := [2]string{pk, rk}; !kr.Contains(next[0], next[1]) {
								// A continuation names a key: one outside
								// the range would leak it.
								t.Fatalf("page %d continues at %v, outside %s", page, next, kr)
							}
							q.Set("NextPartitionKey", npk)
							q.Set("NextRowKey", nrk)
						}
						if !slices.Equal(got, want) {
							t.Fatalf("got %v, want %v", got, want)
						}
					})
				}
			}
		}
	}
}

// TestCapturedSignatureOpensOneEntity replays a SharedKeyLite signature,
// as someone who saw a request would, on another entity whose path's
// unescaped spelling is the first request's escaped path (PartitionKey
// "a%41", sent as a%2541, and "a%2541", sent as a%252541): the delete is
// refused and the entity stays.
func TestCapturedSignatureOpensOneEntity(t *testing.T) {
	s, fb := newTestServer(t)
	ctx := context.Background()
	if _, err := fb.CreateTable(ctx, "keys"); err != nil {
		t.Fatal(err)
	}
	for _, pk := range []string{"a%41", "a%2541"} {
		e := &edm.Entity{PartitionKey: pk, RowKey: "r"}
		if _, err := fb.Write(ctx, "keys", pk, []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: pk, RowKey: "r", Entity: edm.MarshalBinary(e)}}); err != nil {
			t.Fatal(err)
		}
	}
	seen := signedRequest(t, "GET", "/devstoreaccount1/keys(PartitionKey='a%2541',RowKey='r')", "")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, seen)
	if rec.Code != 200 {
		t.Fatalf("the signed read: %d %s", rec.Code, rec.Body.String())
	}
	replay := httptest.NewRequest("DELETE", "http://127.0.0.1:10002/devstoreaccount1/keys(PartitionKey='a%252541',RowKey='r')", nil)
	replay.Header.Set("x-ms-date", seen.Header.Get("x-ms-date"))
	replay.Header.Set("Authorization", seen.Header.Get("Authorization"))
	replay.Header.Set("If-Match", "*")
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, replay)
	if rec.Code != 403 || rec.Header().Get("x-ms-error-code") != "AuthenticationFailed" {
		t.Fatalf("replayed on another entity: %d %s", rec.Code, rec.Header().Get("x-ms-error-code"))
	}
	if _, err := fb.Get(ctx, "keys", "a%2541", "r"); err != nil {
		t.Fatalf("the other entity: %v", err)
	}
}

// TestCapturedRootSignatureOpensNoTable replays the signature of Get
// Service Properties (path-style, signed as the Go SDK does:
// /devstoreaccount1/devstoreaccount1?comp=properties) as an insert into a
// table named like the account with the same comp: refused, nothing
// written.
func TestCapturedRootSignatureOpensNoTable(t *testing.T) {
	s, fb := newTestServer(t)
	ctx := context.Background()
	if _, err := fb.CreateTable(ctx, "devstoreaccount1"); err != nil {
		t.Fatal(err)
	}
	seen := signedRequest(t, "GET", "/devstoreaccount1?restype=service&comp=properties", "")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, seen)
	if rec.Code != 200 {
		t.Fatalf("the signed read: %d %s", rec.Code, rec.Body.String())
	}
	replay := httptest.NewRequest("POST", "http://127.0.0.1:10002/devstoreaccount1/devstoreaccount1?comp=properties",
		strings.NewReader(`{"PartitionKey":"p","RowKey":"r"}`))
	replay.Header.Set("Content-Type", "application/json")
	replay.Header.Set("x-ms-date", seen.Header.Get("x-ms-date"))
	replay.Header.Set("Authorization", seen.Header.Get("Authorization"))
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, replay)
	if rec.Code != 403 || rec.Header().Get("x-ms-error-code") != "AuthenticationFailed" {
		t.Fatalf("replayed as an insert: %d %s", rec.Code, rec.Header().Get("x-ms-error-code"))
	}
	if _, err := fb.Get(ctx, "devstoreaccount1", "p", "r"); err == nil {
		t.Fatal("the insert was written")
	}
}

// TestCapturedACLSignatureReadsNoEntities replays the SharedKeyLite
// signature of Get Table ACL (canonicalized resource "…/people?comp=acl")
// on "people?comp=x;&comp=acl": the front-end reads comp "x;" there (a ';'
// is part of a value to it), which is Query Entities, so the replay must be
// refused rather than return the table's entities.
func TestCapturedACLSignatureReadsNoEntities(t *testing.T) {
	s, _ := newTestServer(t)
	seen := signedRequest(t, "GET", "/devstoreaccount1/people?comp=acl", "")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, seen)
	if rec.Code != 200 {
		t.Fatalf("the signed ACL read: %d %s", rec.Code, rec.Body.String())
	}
	for _, target := range []string{
		"/devstoreaccount1/people?comp=x;&comp=acl",
		"/devstoreaccount1/people?comp=;&comp=acl",
	} {
		replay := httptest.NewRequest("GET", "http://127.0.0.1:10002"+target, nil)
		replay.Header.Set("Accept", "application/json;odata=nometadata")
		replay.Header.Set("x-ms-date", seen.Header.Get("x-ms-date"))
		replay.Header.Set("Authorization", seen.Header.Get("Authorization"))
		rec = httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, replay)
		if rec.Code != 403 || rec.Header().Get("x-ms-error-code") != "AuthenticationFailed" {
			t.Fatalf("%s: replayed as a query: %d %s %.200s", target, rec.Code, rec.Header().Get("x-ms-error-code"), rec.Body.String())
		}
	}
}
