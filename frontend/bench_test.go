package frontend

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"tablestore/frontend/auth"
)

// Benchmarks of the HTTP layer alone (fake backend, in-process recorder),
// with SharedKeyLite verification included as in production.

func benchRequest(b *testing.B, method, target string, body []byte) *http.Request {
	r := httptest.NewRequest(method, "http://127.0.0.1:10002"+target, bytes.NewReader(body))
	r.Header.Set("Accept", "application/json;odata=minimalmetadata")
	r.Header.Set("x-ms-version", "2019-02-02")
	r.Header.Set("DataServiceVersion", "3.0")
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	if err := auth.SignSharedKeyLite(r, auth.DevAccount()); err != nil {
		b.Fatal(err)
	}
	return r
}

func BenchmarkPointRead(b *testing.B) {
	s, _ := newTestServer(b)
	h := s.Handler()
	r := benchRequest(b, "GET", "/devstoreaccount1/people(PartitionKey='Smith',RowKey='Ben')", nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != 200 {
			b.Fatal(rec.Code, rec.Body.String())
		}
	}
}

func BenchmarkInsert(b *testing.B) {
	s, _ := newTestServer(b)
	h := s.Handler()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		body := fmt.Appendf(nil, `{"PartitionKey":"bench","RowKey":"r%09d","Name":"some name","Age":42,"Score":1.5,"Big":"123","Big@odata.type":"Edm.Int64"}`, i)
		r := benchRequest(b, "POST", "/devstoreaccount1/people", body)
		r.Header.Set("Prefer", "return-no-content")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != 204 {
			b.Fatal(rec.Code, rec.Body.String())
		}
	}
}

func BenchmarkQueryPage(b *testing.B) {
	s, _ := newTestServer(b)
	h := s.Handler()
	r := benchRequest(b, "GET", "/devstoreaccount1/people()?$filter=Age%20gt%201", nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}

// BenchmarkInsertEcho is an insert as the Go SDK's AddEntity sends it (no
// Prefer, so the entity is echoed; the bench tool's entity of ~1 KiB with
// a DateTime). The requests are built and signed ahead; each round of
// them goes to a fresh server, so the keys never collide.
func BenchmarkInsertEcho(b *testing.B) {
	const round = 4096
	payload := bytes.Repeat([]byte("x"), 924)
	reqs := make([]*http.Request, round)
	bodies := make([]*bytes.Reader, round)
	for i := range reqs {
		body := fmt.Appendf(nil, `{"N":42,"PartitionKey":"pk%04d","Payload":"%s","RowKey":"r%09d","When":"2024-01-02T03:04:05Z","When@odata.type":"Edm.DateTime"}`, i%1024, payload, i)
		reqs[i] = benchRequest(b, "POST", "/devstoreaccount1/people", body)
		bodies[i] = bytes.NewReader(body)
		reqs[i].Body = io.NopCloser(bodies[i])
	}
	var h http.Handler
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		k := i % round
		i++
		if k == 0 {
			b.StopTimer()
			s, _ := newTestServer(b)
			h = s.Handler()
			b.StartTimer()
		}
		bodies[k].Seek(0, io.SeekStart)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, reqs[k])
		if rec.Code != 201 {
			b.Fatal(rec.Code, rec.Body.String())
		}
	}
}
