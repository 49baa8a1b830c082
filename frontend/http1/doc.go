// Package http1 is the front-end's HTTP/1.1 server: it serves an
// http.Handler over keep-alive connections, as net/http's Server does, with
// less work per request.
//
// Why not net/http's Server: on the insert path it was ~45 % of the
// front-end's CPU outside the handler, most of it per-request machinery an
// Azure Table client never needs: a goroutine started per request to watch
// for the client going away (a read that returns EAGAIN, then a deadline set
// in the past to stop it, then a condition-variable hand-off), per-request
// contexts and timers, and response buffering layers. Here one goroutine per
// connection reads a request, runs the handler and writes the answer; the
// watch for a vanished client starts only for a request still running after
// watchAfter, so slow requests are still canceled when their client leaves
// (see watch.go), and fast ones pay nothing for it.
//
// What it keeps of net/http's behaviour, because handlers and clients rely
// on it: canonical header keys, r.Host from the Host header (required in
// HTTP/1.1), Content-Length and chunked request bodies, "Expect:
// 100-continue", HTTP/1.0 and "Connection: close", a CRLF or two before a
// request line skipped (RFC 9112 2.2), a Date header, a sniffed
// Content-Type when the handler sets none, a Content-Length on answers that
// fit the buffer and chunked encoding on longer ones, http.Flusher, HEAD,
// panics recovered (http.ErrAbortHandler closes quietly), a 400 to a plain
// HTTP request on a TLS connection, graceful Shutdown,
// ReadHeaderTimeout and IdleTimeout. What it adds: RequestTimeout, a
// deadline on each request's context, so that a handler bounded by one
// needs no context of its own on top of the server's, and on the reads of
// its body and (twice as long) the writes of its answer, as net/http's
// ReadTimeout and WriteTimeout would bound them. What it leaves out:
// HTTP/2, Hijack, trailers in answers, ConnState hooks. It relies on the
// http.Handler contract: the ResponseWriter (its header map included) and
// the request's body are not used after the handler returns, for they
// belong to the connection and serve its next request.
//
// Where it reads requests differently from net/http, on purpose (pinned by
// TestParseDeliberateDifferences; differential_test.go compares the rest):
// it refuses obs-fold (RFC 9112 5.2 allows either), Transfer-Encoding in
// HTTP/1.0 (RFC 9112 6.1: faulty framing; net/http ignores it), versions
// other than 1.0 and 1.1 (505), CONNECT's authority form and "*" outside
// OPTIONS; it does not add Cache-Control for "Pragma: no-cache"; it checks
// and discards a chunked request's trailer section (r.Trailer stays nil),
// and takes a bare LF as the end of that section as of the header's; it
// refuses a header of more than 256 fields (431), which net/http bounds
// only by MaxHeaderBytes; and it skips empty lines before any request,
// net/http only after a POST. TestServerMatchesNetHTTP compares what a
// client gets from either server on one connection.
package http1
