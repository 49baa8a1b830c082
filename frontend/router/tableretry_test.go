package router

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

func TestTableCommandRetry(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		tries int
		again bool
	}{
		{"success", nil, 1, false},
		{"a master's own failure", status.Error(codes.Internal, "leadership transfer in progress"), 1, true},
		{"no status", errors.New("boom"), 1, true},
		{"the last try", status.Error(codes.Internal, "x"), tableCommandTries, false},
		{"the outcome: exists", rpcerr.New(codes.AlreadyExists, rpcerr.ReasonTableAlreadyExists, "x", nil), 1, false},
		{"the outcome: not found", rpcerr.New(codes.NotFound, rpcerr.ReasonTableNotFound, "x", nil), 1, false},
		{"no master by the deadline", status.Error(codes.DeadlineExceeded, "x"), 1, false},
		{"the client went away", status.Error(codes.Canceled, "x"), 1, false},
		{"unavailable (masterclient retried it)", status.Error(codes.Unavailable, "x"), 1, false},
		{"bad input", status.Error(codes.InvalidArgument, "x"), 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wait, again := tableCommandRetry(tt.err, tt.tries)
			if again != tt.again {
				t.Fatalf("again = %v, want %v", again, tt.again)
			}
			if again && (wait <= 0 || wait > time.Second) {
				t.Fatalf("wait %v, want a pause within a second", wait)
			}
		})
	}
	total := time.Duration(0)
	for tries := 1; ; tries++ {
		wait, again := tableCommandRetry(status.Error(codes.Internal, "x"), tries)
		if !again {
			break
		}
		total += wait
	}
	if total < 500*time.Millisecond || total > 3*time.Second {
		t.Fatalf("the retries pause %v in all, want about the master's election timeout (0.5 s) and not the request's deadline", total)
	}
}

// recordMaster is a master group failing over: a command commits under its
// request id and its answer is lost (Unavailable), then the old leader,
// handing off, refuses the retry with a failure of its own (Internal:
// "leadership transfer in progress", as masters before reliability.md 56
// answered), then the new leader answers a command under a recorded id
// with its first outcome and one under a new id as a new command (409 for
// a create of a table that exists, 404 for a delete of one that does not).
// internal answers after the commit are Internal; -1: all (a master that
// fails for good).
type recordMaster struct {
	pb.UnimplementedMasterServiceServer
	internal int // how many answers after the commit are Internal; -1: all

	mu     sync.Mutex
	record []byte // the committed command's request id
	calls  int
	ids    [][]byte
}

// answer is the failover's answer to the next call, of a command under
// id: nil for its outcome, refused for a new command's.
func (f *recordMaster) answer(id []byte, refused error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.ids = append(f.ids, bytes.Clone(id))
	switch {
	case f.record == nil:
		f.record = bytes.Clone(id)
		return rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, "failpoint: the answer is lost after the commit", nil)
	case f.internal < 0 || f.calls-1 <= f.internal:
		return status.Error(codes.Internal, "leadership transfer in progress")
	case bytes.Equal(id, f.record):
		return nil
	}
	return refused
}

func (f *recordMaster) CreateTable(_ context.Context, req *pb.CreateTableRequest) (*pb.CreateTableResponse, error) {
	if err := f.answer(req.GetRequestId(), rpcerr.New(codes.AlreadyExists, rpcerr.ReasonTableAlreadyExists, "master: table already exists", nil)); err != nil {
		return nil, err
	}
	tb := &pb.Table{Name: req.GetName(), TableId: 7}
	return &pb.CreateTableResponse{Table: tb, Map: &pb.PartitionMap{Delta: true, Epoch: 1, Version: 9, Tables: []*pb.Table{tb}}}, nil
}

func (f *recordMaster) DeleteTable(_ context.Context, req *pb.DeleteTableRequest) (*pb.DeleteTableResponse, error) {
	if err := f.answer(req.GetRequestId(), rpcerr.New(codes.NotFound, rpcerr.ReasonTableNotFound, "master: table not found", nil)); err != nil {
		return nil, err
	}
	return &pb.DeleteTableResponse{Map: &pb.PartitionMap{Delta: true, Epoch: 1, Version: 9, RemovedTables: []string{req.GetName()}}}, nil
}

// TestTableCommandAcrossHandOff: a create or delete whose first attempt
// committed and whose retry met the old leader handing off is answered its
// first outcome: the front-end retries the master's own failure under the
// same request id, which the record answers. Before, the Internal went to
// the client as 500, and the SDK's retry (a new request, a new id: the SDK
// sends no x-ms-client-request-id) was answered 409 or 404. A master that
// fails for good is answered its failure after a bounded number of tries,
// not held until the request's deadline.
func TestTableCommandAcrossHandOff(t *testing.T) {
	for _, op := range []string{"create", "delete"} {
		for _, tt := range []struct {
			name      string
			internal  int
			wantCode  codes.Code
			wantCalls int // 0: any
		}{
			{"one refusal", 1, codes.OK, 0},
			{"refusals over all but the last try", tableCommandTries - 1, codes.OK, 0},
			{"a master failing for good", -1, codes.Internal, 1 + tableCommandTries},
		} {
			t.Run(op+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				f := &recordMaster{internal: tt.internal}
				r := routerWithMaster(t, f)
				r.install(&pb.PartitionMap{Epoch: 1, Version: 5, Tables: []*pb.Table{{Name: "T", TableId: 7}}})
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				start := time.Now()
				var err error
				if op == "create" {
					_, err = r.CreateTable(ctx, "T")
				} else {
					err = r.DeleteTable(ctx, "T")
				}
				if code := status.Code(err); code != tt.wantCode {
					t.Fatalf("%s across the hand-off: %v, want code %v", op, err, tt.wantCode)
				}
				if tt.wantCode != codes.OK && time.Since(start) > 10*time.Second {
					t.Fatalf("the failure took %v: held until the deadline", time.Since(start))
				}
				f.mu.Lock()
				defer f.mu.Unlock()
				if tt.wantCalls != 0 && f.calls != tt.wantCalls {
					t.Fatalf("%d calls to the master, want %d", f.calls, tt.wantCalls)
				}
				for i, id := range f.ids {
					if !bytes.Equal(id, f.ids[0]) {
						t.Fatalf("call %d under id %x, the first under %x: one request, one id", i, id, f.ids[0])
					}
				}
			})
		}
	}
}

// routerWithMaster is a Router whose only master is srv.
func routerWithMaster(t *testing.T, srv pb.MasterServiceServer) *Router {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterMasterServiceServer(gs, srv)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	cfg := DefaultConfig()
	cfg.Masters = []string{ln.Addr().String()}
	r, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// internalMaster answers its first internal replacing commands Internal
// (its own failure), then stores them; it counts the calls.
type internalMaster struct {
	pb.UnimplementedMasterServiceServer
	internal int

	mu    sync.Mutex
	calls int
}

func (f *internalMaster) answer() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls <= f.internal {
		return status.Error(codes.Internal, "leadership transfer in progress")
	}
	return nil
}

func (f *internalMaster) SetTableACL(context.Context, *pb.SetTableACLRequest) (*pb.SetTableACLResponse, error) {
	return &pb.SetTableACLResponse{}, f.answer()
}

func (f *internalMaster) SetServiceProperties(context.Context, *pb.SetServicePropertiesRequest) (*pb.SetServicePropertiesResponse, error) {
	return &pb.SetServicePropertiesResponse{}, f.answer()
}

func (f *internalMaster) SetAccounts(context.Context, *pb.SetAccountsRequest) (*pb.SetAccountsResponse, error) {
	return &pb.SetAccountsResponse{}, f.answer()
}

func (f *internalMaster) GetPartitionMap(context.Context, *pb.GetPartitionMapRequest) (*pb.PartitionMap, error) {
	return &pb.PartitionMap{Epoch: 1, Version: 6, Tables: []*pb.Table{{Name: "T", TableId: 7}}}, nil
}

// TestReplacingCommandsRetried: SetTableACL, SetServiceProperties and
// SetAccounts replace a document whole, so the front-end retries them on
// the master's own failure as it does a create or delete; before, one
// Internal answer (a master handing off, as masters before reliability.md
// 56 refused) went to the client as 500. A master failing for good is
// answered its failure after the bounded tries.
func TestReplacingCommandsRetried(t *testing.T) {
	cmds := map[string]func(context.Context, *Router) error{
		"SetTableACL": func(ctx context.Context, r *Router) error { return r.SetTableACL(ctx, "T", nil) },
		"SetServiceProperties": func(ctx context.Context, r *Router) error {
			return r.SetServiceProperties(ctx, "", []byte("<StorageServiceProperties/>"))
		},
		"SetAccounts": func(ctx context.Context, r *Router) error { return r.SetAccounts(ctx, nil) },
	}
	for name, call := range cmds {
		for _, tt := range []struct {
			name      string
			internal  int
			wantCode  codes.Code
			wantCalls int
		}{
			{"one refusal", 1, codes.OK, 2},
			{"refusals over all but the last try", tableCommandTries - 1, codes.OK, tableCommandTries},
			{"a master failing for good", 1 << 20, codes.Internal, tableCommandTries},
		} {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				f := &internalMaster{internal: tt.internal}
				r := routerWithMaster(t, f)
				r.install(&pb.PartitionMap{Epoch: 1, Version: 5, Tables: []*pb.Table{{Name: "T", TableId: 7}}})
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				if code := status.Code(call(ctx, r)); code != tt.wantCode {
					t.Fatalf("%s: code %v, want %v", name, code, tt.wantCode)
				}
				f.mu.Lock()
				defer f.mu.Unlock()
				if f.calls != tt.wantCalls {
					t.Fatalf("%d calls to the master, want %d", f.calls, tt.wantCalls)
				}
			})
		}
	}
}
