package frontend

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

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

// tcpBench drives a Server's own HTTP/1.1 listener over one loopback
// keep-alive connection, so that the benchmarks below count what the
// in-process ones above leave out: http1's request parsing, contexts and
// answer framing. The client side reads answers without allocating.
type tcpBench struct {
	b    *testing.B
	conn net.Conn
	br   *bufio.Reader
}

func newTCPBench(b *testing.B, s *Server) *tcpBench {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		<-done
	})
	return &tcpBench{b: b, conn: c, br: bufio.NewReaderSize(c, 16<<10)}
}

// rawRequest is r as a client sends it.
func rawRequest(b *testing.B, r *http.Request) []byte {
	r.RequestURI = ""
	var buf bytes.Buffer
	if err := r.Write(&buf); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// roundTrip sends raw and reads the answer (framed by Content-Length),
// returning its status code.
func (t *tcpBench) roundTrip(raw []byte) int {
	if _, err := t.conn.Write(raw); err != nil {
		t.b.Fatal(err)
	}
	status, length := 0, -1
	for first := true; ; first = false {
		line, err := t.br.ReadSlice('\n')
		if err != nil {
			t.b.Fatal(err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		if first {
			if len(line) < 12 {
				t.b.Fatalf("status line %q", line)
			}
			status = int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
			continue
		}
		if k, v, ok := bytes.Cut(line, []byte(": ")); ok && bytes.EqualFold(k, []byte("Content-Length")) {
			n, err := strconv.Atoi(string(v))
			if err != nil {
				t.b.Fatal(err)
			}
			length = n
		}
	}
	if length < 0 {
		t.b.Fatal("answer without Content-Length")
	}
	if _, err := t.br.Discard(length); err != nil {
		t.b.Fatal(err)
	}
	return status
}

// BenchmarkPointReadTCP is BenchmarkPointRead through the front-end's
// listener (allocations include the client's few).
func BenchmarkPointReadTCP(b *testing.B) {
	s, _ := newTestServer(b)
	raw := rawRequest(b, benchRequest(b, "GET", "/devstoreaccount1/people(PartitionKey='Smith',RowKey='Ben')", nil))
	tb := newTCPBench(b, s)
	b.ReportAllocs()
	for b.Loop() {
		if code := tb.roundTrip(raw); code != 200 {
			b.Fatal(code)
		}
	}
}

// BenchmarkInsertEchoTCP is BenchmarkInsertEcho through the front-end's
// listener: each round of pre-signed inserts goes to a fresh server (and
// connection), so the keys never collide.
func BenchmarkInsertEchoTCP(b *testing.B) {
	const round = 4096
	payload := bytes.Repeat([]byte("x"), 924)
	raws := make([][]byte, round)
	for i := range raws {
		body := fmt.Appendf(nil, `{"N":42,"PartitionKey":"pk%04d","Payload":"%s","RowKey":"r%09d","When":"2024-01-02T03:04:05Z","When@odata.type":"Edm.DateTime"}`, i%1024, payload, i)
		raws[i] = rawRequest(b, benchRequest(b, "POST", "/devstoreaccount1/people", body))
	}
	var tb *tcpBench
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		k := i % round
		i++
		if k == 0 {
			b.StopTimer()
			s, _ := newTestServer(b)
			tb = newTCPBench(b, s)
			b.StartTimer()
		}
		if code := tb.roundTrip(raws[k]); code != 201 {
			b.Fatal(code)
		}
	}
}
