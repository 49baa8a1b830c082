// Package rangeclient is the one way to reach the leader of a range: it
// classifies a failed attempt (retry here, follow a leader hint, refresh a
// stale map, back off while busy) and runs the attempt over a range's
// candidate servers until one succeeds, the error is final, or the
// deadline passes. The front-end router, the master's operations and the
// partition server's merge export share it, so a failover fix lands once.
package rangeclient
