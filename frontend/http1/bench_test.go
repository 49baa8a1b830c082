package http1

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"testing"
	"time"
)

// BenchmarkKeepAliveGET is the server's own cost per request: point-read
// sized GETs over one loopback keep-alive connection to a handler that
// sets a few headers and writes a small body, as the front-end's does;
// without timeouts, and with the front-end's (their deadlines are set per
// request).
func BenchmarkKeepAliveGET(b *testing.B) {
	b.Run("no timeouts", func(b *testing.B) { benchKeepAliveGET(b, &Server{}) })
	b.Run("front-end timeouts", func(b *testing.B) {
		benchKeepAliveGET(b, &Server{ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, RequestTimeout: 30 * time.Second})
	})
}

func benchKeepAliveGET(b *testing.B, s *Server) {
	body := bytes.Repeat([]byte("x"), 300)
	s.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd["Content-Type"] = []string{"application/json"}
		hd["X-Ms-Version"] = r.Header["X-Ms-Version"]
		_ = r.Context().Done() // as the back-end calls do
		w.Write(body)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := []byte("GET /devstoreaccount1/people(PartitionKey='Smith',RowKey='Ben') HTTP/1.1\r\n" +
		"Host: 127.0.0.1:10002\r\nUser-Agent: bench\r\nAccept: application/json;odata=minimalmetadata\r\n" +
		"Authorization: SharedKeyLite devstoreaccount1:0123456789abcdefghijklmnopqrstuvwxyzABCDEFG=\r\n" +
		"Dataserviceversion: 3.0\r\nX-Ms-Date: Fri, 27 Nov 2026 06:00:00 GMT\r\nX-Ms-Version: 2019-02-02\r\n\r\n")
	br := bufio.NewReaderSize(c, 16<<10)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		// The answer's header, then its body of known length.
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				b.Fatal(err)
			}
			if len(line) <= 2 {
				break
			}
		}
		if _, err := br.Discard(len(body)); err != nil {
			b.Fatal(err)
		}
	}
}
