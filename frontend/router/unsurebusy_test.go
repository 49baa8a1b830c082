package router

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// scriptedWritePS answers writes from a script shared by its servers, and
// applies a write id at most once as the partition servers do: the first
// attempt applies and loses its answer (the leader changed after the
// entry committed), the next ones are throttled, then the retry is
// answered from the request record.
type scriptedWritePS struct {
	pb.UnimplementedPartitionServiceServer
	mu      *sync.Mutex
	script  *[]string // "unknown", "busy", "busy*" (for good), "notleader*", "silent*"; then the record's answer
	applied map[string]int64
	calls   *int
}

func (p scriptedWritePS) Write(_ context.Context, req *pb.WriteRequest) (*pb.WriteResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	*p.calls++
	step := ""
	if len(*p.script) > 0 {
		step = (*p.script)[0]
		if !strings.HasSuffix(step, "*") {
			*p.script = (*p.script)[1:]
		}
	}
	switch step {
	case "unknown":
		p.applied[string(req.GetRequestId())] = 42
		return nil, rpcerr.New(codes.DeadlineExceeded, rpcerr.ReasonUnavailable, "leadership lost after the entry was dispatched", nil)
	case "busy", "busy*":
		return nil, rpcerr.New(codes.ResourceExhausted, rpcerr.ReasonServerBusy, "throttled", map[string]string{rpcerr.MetaRetryAfterMs: "1000"})
	case "notleader*":
		// Leadership moving, no hint: a refusal before the log.
		return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonNotLeader, "not the leader", nil)
	case "silent*":
		// A paused server: the attempt times out (what rangeclient
		// reports as an abandoned attempt, UNAVAILABLE).
		return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "no answer within the attempt timeout", nil)
	}
	if ts, ok := p.applied[string(req.GetRequestId())]; ok {
		return &pb.WriteResponse{TimestampUnixNano: ts}, nil
	}
	p.applied[string(req.GetRequestId())] = 7
	return &pb.WriteResponse{TimestampUnixNano: 7}, nil
}

func (p scriptedWritePS) WriteMany(context.Context, *pb.WriteManyRequest) (*pb.WriteManyResponse, error) {
	return nil, rpcerr.New(codes.Unimplemented, "", "no WriteMany", nil)
}

// TestWriteOfUnknownOutcomeNotAnsweredBusy: a write whose attempt may have
// applied (its answer lost) is not answered ServerBusy when the next
// attempt is throttled: a 503 says the request was not processed, and the
// client's retry, a new request to the front-end with a new request id,
// would apply it again (an insert answering 409 for a change set that had
// succeeded). It retries until the range answers from its request record.
// A write whose attempts were all refused before the log still gets the
// throttle's 503 at once. The same holds when the retry budget runs out on
// any refusal or silent server after such an attempt (a leader paused for
// longer than the budget): an unknown outcome, not the last refusal's 503.
func TestWriteOfUnknownOutcomeNotAnsweredBusy(t *testing.T) {
	for _, tt := range []struct {
		name     string
		script   []string
		wantErr  string // reason; "" for success
		wantCode codes.Code
		wantTS   int64
		maxCalls int
	}{
		{"unknown, then throttled", []string{"unknown", "busy", "busy"}, "", codes.OK, 42, 10},
		// 500 OperationTimedOut at the front-end, as an unknown outcome.
		{"unknown, then throttled for good", []string{"unknown", "busy*"}, rpcerr.ReasonUnavailable, codes.DeadlineExceeded, 0, 1000},
		{"throttled first", []string{"busy"}, rpcerr.ReasonServerBusy, codes.ResourceExhausted, 0, 1},
		// The budget spent on refusals after an attempt of unknown
		// outcome: 500 OperationTimedOut ("may or may not have
		// succeeded"), not the refusal's 503 ServerBusy ("not
		// processed"), as the router's docs promise.
		{"unknown, then refused until the budget ran out", []string{"unknown", "notleader*"}, rpcerr.ReasonUnavailable, codes.DeadlineExceeded, 0, 1000},
		{"unknown, then silent until the budget ran out", []string{"unknown", "silent*"}, rpcerr.ReasonUnavailable, codes.DeadlineExceeded, 0, 1000},
		// Every attempt abandoned unanswered: each may have applied.
		{"silent throughout", []string{"silent*"}, rpcerr.ReasonUnavailable, codes.DeadlineExceeded, 0, 1000},
		// Refused throughout: nothing was appended, the refusal stands.
		{"refused throughout", []string{"notleader*"}, rpcerr.ReasonNotLeader, codes.Unavailable, 0, 1000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // several spend the whole 1 s budget
			cfg := DefaultConfig()
			cfg.Masters = []string{"127.0.0.1:1"} // never reached: the map is installed
			cfg.RetryTimeout = time.Second
			r, err := New(cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.Close)
			servers := []*pb.ServerInfo{{ServerId: "ps1", GrpcAddr: "fake-ps1"}, {ServerId: "ps2", GrpcAddr: "fake-ps2"}}
			r.install(&pb.PartitionMap{Epoch: 1, Version: 1, Servers: servers, Tables: []*pb.Table{{Name: "t", TableId: 1}},
				Ranges:  []*pb.RangeDescriptor{{RangeId: 10, TableId: 1, Table: "t", Generation: 1, Replicas: []*pb.Replica{{ServerId: "ps1"}, {ServerId: "ps2"}}}},
				Leaders: map[uint64]string{10: "ps1"}})
			var calls int
			script := append([]string(nil), tt.script...)
			ps := scriptedWritePS{mu: &sync.Mutex{}, script: &script, applied: map[string]int64{}, calls: &calls}
			r.RegisterLocal("fake-ps1", ps)
			r.RegisterLocal("fake-ps2", ps)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ts, err := r.Write(ctx, "t", "p", []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "p", RowKey: "r"}})
			if got := rpcerr.Parse(err); got.Reason != tt.wantErr || got.Code != tt.wantCode || (err == nil) != (tt.wantErr == "") {
				t.Fatalf("write: %v (reason %q), want reason %q, code %v", err, got.Reason, tt.wantErr, tt.wantCode)
			}
			if err == nil && ts.UnixNano() != tt.wantTS {
				t.Fatalf("write answered Timestamp %d, want the first attempt's %d", ts.UnixNano(), tt.wantTS)
			}
			if calls > tt.maxCalls {
				t.Fatalf("%d attempts, want at most %d", calls, tt.maxCalls)
			}
		})
	}
}
