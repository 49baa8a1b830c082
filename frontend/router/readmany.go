package router

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "tablestore/proto/tablestorepb"
)

// Front-end point-read coalescing.
//
// A Get call costs a gRPC stream on each side (headers, a context, the
// stream's goroutines, a flush and a socket write per answer): in the
// deployment shape about a third of the front-end's CPU per point read and
// half of the range leader's, more than the read itself. As for writes
// (writemany.go), the reads that come while a call to a server is in
// flight queue, and when the call returns they go out together as one
// GetMany call; a lone reader's read is sent at once, alone, as before
// (the lanes of coalesce.go).
//
// A lane is a server address, a range and a kind of read (linearizable or
// a follower read). Not the address alone: a reviewer's test had a read of
// one range wait 290 ms behind another range's 300 ms read. Each read
// keeps its own attempt context and answer: a GetMany result is the status
// Get would have returned, so the range client's retries (leader hints,
// stale maps) are the same. What is the read side's own: follower reads
// have lanes of their own, a read to a server known to lack GetMany skips
// the lane (nothing to save by queueing), reads linger at most readLinger
// (below), and the
// server caps a GetMany's answer (capAnswer).

const (
	// maxReadCalls is how many GetMany/Get calls of one lane are in
	// flight at once. One: the reads that come meanwhile make the next
	// call larger, which is the point (see docs/performance.md, "Point
	// reads, session 7").
	maxReadCalls = 1
	// maxReadsCoalesced bounds one GetMany.
	maxReadsCoalesced = 256
)

// coalescedReadsTotal counts the reads sent in GetMany calls (with the
// front-end's gets served, how well reads are coalesced).
var coalescedReadsTotal = prometheus.NewCounter(prometheus.CounterOpts{
	Namespace: "tablestore", Subsystem: "router", Name: "coalesced_reads_total",
	Help: "Point reads sent to a partition server together with others in one GetMany call.",
})

func init() { prometheus.MustRegister(coalescedReadsTotal) }

// readCoalescer coalesces a front-end's point reads.
type readCoalescer = coalescer[*pb.GetRequest, *pb.GetResponse]

func newReadCoalescer() *readCoalescer {
	return newLaneCoalescer(coalescerOps[*pb.GetRequest, *pb.GetResponse]{
		many: "GetMany", noun: "reads",
		key: func(req *pb.GetRequest) (uint64, bool) { return req.GetRangeId(), req.GetFollowerRead() },
		one: func(ctx context.Context, cl pb.PartitionServiceClient, req *pb.GetRequest) (*pb.GetResponse, error) {
			return cl.Get(ctx, req)
		},
		callMany: func(ctx context.Context, cl pb.PartitionServiceClient, reqs []*pb.GetRequest) ([]answer[*pb.GetResponse], error) {
			resp, err := cl.GetMany(ctx, &pb.GetManyRequest{Gets: reqs})
			return answersOf(resp.GetResults(), err, getManyAnswer)
		},
		maxCalls: maxReadCalls, maxBatch: maxReadsCoalesced,
		bypassWithoutMany: true,
		skipAfterMiss:     readSkipAfterMiss,
		coalesced:         func(n int) { coalescedReadsTotal.Add(float64(n)) },
	}, readLinger)
}

// getManyAnswer turns one GetMany result back into Get's answer.
func getManyAnswer(r *pb.GetManyResult) (*pb.GetResponse, error) {
	if r.GetResponse() != nil {
		return r.GetResponse(), nil
	}
	return nil, manyStatus("GetMany", r.GetStatus())
}

// readLinger bounds how long a read lane waits for the readers it just
// answered to come back (lingerLocked in coalesce.go; a lone reader never
// waits). Without it, under a closed loop a lane alternated between a
// call of the few reads queued during the last one and a call of the
// rest; every call costs the range leader a gRPC call and a leadership
// round (a heartbeat to each follower). Deployment shape, 32 workers, two
// or four runs each, load 15 – 19 (docs/performance.md, session 10):
// server CPU per read 95/123/81/77 µs without, 89/94/74/74 with 1 ms,
// 85/83/61/71 with 3 ms (leader 22 – 27 -> 15 – 22 µs, each follower
// 7 – 10 -> 4 – 5); 4 workers: p50 0.97 -> 0.65 ms, 242 -> 157 µs. The
// price is latency under a steady rate, where the lane often waits out the
// linger for readers that are not coming: at 2,000 – 4,000 reads/s p50
// ~1 – 1.5 ms -> up to 2.6 ms, for 7 – 35 % less server CPU per read.
// Bounding the wait by the last call's duration kept the latency but lost
// the gain under the closed loop; skipping the linger for a few calls
// after one that ran out (readSkipAfterMiss) keeps most of both.
const readLinger = 3 * time.Millisecond

// readSkipAfterMiss: after a linger that ran out, a read lane sends this
// many calls without lingering (coalescerOps.skipAfterMiss).
const readSkipAfterMiss = 8
