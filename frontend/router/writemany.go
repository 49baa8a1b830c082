package router

import (
	"context"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// Front-end write coalescing.
//
// A Write call costs a gRPC stream on each side (headers, a context with a
// deadline, the stream's goroutines): about a third of the front-end's and
// of the range leader's CPU per insert, more than the write's own work. The
// leader already puts the writes that queue while a proposal of the range
// is in flight into one log entry; the coalescer groups them one hop
// earlier, through the lanes of coalesce.go: per range and leader address,
// up to maxWriteCalls calls in flight, the writes queued meanwhile going
// out together as one WriteMany call, a lone writer sent at once, alone.
//
// The lane is per range and address, not per address (coalesce.go says
// why; issue 10's bound). A lane per address saved ~11 µs of the leaders'
// gRPC server per insert in the pre-split table (a server leading two
// ranges got one call for both) and moved neither ratio of the pre-split
// benchmark (docs/performance.md, "Pre-split and spread inserts, session
// 7"). The server still groups a call's writes by range
// (service.WriteMany), so a call may carry several.
//
// Each write keeps its own request id, attempt context and answer: a
// WriteMany result is the status Write would have returned, so the range
// client's retry decisions are the same. If the WriteMany call itself
// fails, every write in it gets that error (each write's outcome unknown,
// its retry safe by its request id). What is the write side's own: the
// byte bound of a call, and lingering for the writers a call just
// answered (lingerLocked). A server without WriteMany gets single Writes
// (through the lane: its writes still wait their turn).

const (
	// maxWriteCalls is how many calls to one lane are in flight at
	// once. One, as the leader keeps one proposal per range in flight:
	// with two, each call (and each log entry) carried half as
	// many writes, and the deployment shape spent 223 – 306 µs of server
	// CPU per insert against 195 – 245 with one (two alternating rounds,
	// load 11 – 15), at no loss of throughput.
	maxWriteCalls = 1
	// maxCoalesced and maxCoalescedBytes bound one WriteMany (the leader's
	// batch of one log entry has the same count bound).
	maxCoalesced      = 256
	maxCoalescedBytes = 4 << 20
)

// lingerMax bounds how long a write lane waits for the writers it just
// answered to come back (see lingerLocked). Pre-split table, server CPU
// per insert (means of 3 – 24 alternating runs, load 8.5 – 20, lingering
// only with writes queued): none ~410 µs, 1 ms 405, 3 ms 376, 5 ms 371
// (docs/performance.md, session 7).
const lingerMax = 3 * time.Millisecond

// writeCoalescer coalesces a front-end's writes.
type writeCoalescer = coalescer[*pb.WriteRequest, *pb.WriteResponse]

func newCoalescer() *writeCoalescer {
	return newLaneCoalescer(coalescerOps[*pb.WriteRequest, *pb.WriteResponse]{
		many: "WriteMany", noun: "writes",
		key: func(req *pb.WriteRequest) (uint64, bool) { return req.GetRangeId(), false },
		one: func(ctx context.Context, cl pb.PartitionServiceClient, req *pb.WriteRequest) (*pb.WriteResponse, error) {
			return cl.Write(ctx, req)
		},
		callMany: func(ctx context.Context, cl pb.PartitionServiceClient, reqs []*pb.WriteRequest) ([]answer[*pb.WriteResponse], error) {
			resp, err := cl.WriteMany(ctx, &pb.WriteManyRequest{Writes: reqs})
			return answersOf(resp.GetResults(), err, manyAnswer)
		},
		maxCalls: maxWriteCalls, maxBatch: maxCoalesced,
		size: requestBytes, maxBytes: maxCoalescedBytes,
		lingerForAll: maxCoalesced,
	}, lingerMax)
}

func requestBytes(req *pb.WriteRequest) int {
	n := 64 + len(req.GetRequestId())
	for _, op := range req.GetOps() {
		n += 32 + len(op.GetEntity()) + len(op.GetPartitionKey()) + len(op.GetRowKey())
	}
	return n
}

// manyAnswer turns one WriteMany result back into Write's answer.
func manyAnswer(r *pb.WriteManyResult) (*pb.WriteResponse, error) {
	if r.GetResponse() != nil {
		return r.GetResponse(), nil
	}
	return nil, manyStatus("WriteMany", r.GetStatus())
}
