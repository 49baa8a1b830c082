// Package admission decides whether a partition server takes on more work:
// a token bucket of the server's capacity (entities per second it serves
// as leader) with a short, bounded queue. A request that fits in the
// bucket goes at once; one that would fit after a brief wait queues that
// long; one larger than the bucket and its queue ever hold goes when the
// bucket is full (refusing it would refuse it for good); any other is
// refused with the time after which a retry may fit,
// which the server returns as 503 ServerBusy with Retry-After, as an Azure
// partition server over its capacity does.
//
// The decision is pure: the caller passes the time, so tests script it.
package admission
