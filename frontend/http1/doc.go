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
// 100-continue", HTTP/1.0 and "Connection: close", a Date header, a sniffed
// Content-Type when the handler sets none, a Content-Length on answers that
// fit the buffer and chunked encoding on longer ones, http.Flusher, HEAD,
// panics recovered (http.ErrAbortHandler closes quietly), graceful Shutdown,
// ReadHeaderTimeout and IdleTimeout. What it leaves out: HTTP/2, Hijack,
// trailers in answers, ConnState hooks.
package http1
