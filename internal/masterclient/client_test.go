package masterclient

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// answering is a master that answers every GetPartitionMap.
type answering struct {
	pb.UnimplementedMasterServiceServer
}

func (answering) GetPartitionMap(context.Context, *pb.GetPartitionMapRequest) (*pb.PartitionMap, error) {
	return &pb.PartitionMap{}, nil
}

// TestReconnectSoonAfterOutage: a client that kept calling a master it could
// not reach for seconds (a server cut off, chaos seed 299) reaches it again
// soon after it is back. With gRPC's default reconnect backoff (1 s growing
// by 1.6 up to 120 s) the first call after a 6 s outage succeeded 2 - 4 s
// after the master listened again; a partition server's heartbeat, and what
// the master's answer creates, waited that long.
func TestReconnectSoonAfterOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 6 s outage")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: every connection attempt is refused
	c, err := New([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	call := func(limit time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		return c.Call(ctx, func(ctx context.Context, mc pb.MasterServiceClient) error {
			_, err := mc.GetPartitionMap(ctx, &pb.GetPartitionMapRequest{})
			return err
		})
	}
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); {
		if err := call(500 * time.Millisecond); err == nil {
			t.Fatal("a call succeeded with no master listening")
		}
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the master's port was taken meanwhile: %v", err)
	}
	srv := grpc.NewServer()
	pb.RegisterMasterServiceServer(srv, answering{})
	go srv.Serve(ln)
	defer srv.Stop()
	back := time.Now()
	deadline := back.Add(10 * time.Second)
	for call(time.Second) != nil {
		if time.Now().After(deadline) {
			t.Fatal("no call succeeded within 10 s of the master listening")
		}
	}
	// The client's backoff is at most 500 ms (+20 % jitter); 2 s leaves a
	// loaded machine room and still fails the default backoff.
	if took := time.Since(back); took > 2*time.Second {
		t.Fatalf("first successful call %v after the master listened again, want within 2 s", took.Round(time.Millisecond))
	} else {
		t.Logf("first successful call %v after the master listened again", took.Round(time.Millisecond))
	}
}

// TestHungMasterLeftForTheNext: a master that accepts connections and never
// answers (paused, or cut off beyond its accepted socket) fails a call
// whose deadline is shorter than the client's per-attempt timeout (a
// partition server's heartbeat: 3 s against 5 s) by that deadline; the
// next call must start on the other master. Before, the client stayed on
// the silent master, and every later call hung there too.
func TestHungMasterLeftForTheNext(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	var mu sync.Mutex
	var held []net.Conn // accepted, never read, never answered
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterMasterServiceServer(srv, answering{})
	go srv.Serve(ln)
	defer srv.Stop()

	c, err := New([]string{silent.Addr().String(), ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	call := func(limit time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		return c.Call(ctx, func(ctx context.Context, mc pb.MasterServiceClient) error {
			_, err := mc.GetPartitionMap(ctx, &pb.GetPartitionMapRequest{})
			return err
		})
	}
	// A call whose own deadline is short (under hungAfter) tells nothing
	// about the master: a busy leader ends such calls too. The client
	// stays where it is.
	if err := call(time.Second); err == nil {
		t.Fatal("a call on the silent master succeeded")
	}
	if _, i := c.Conn(); i != 0 {
		t.Fatalf("current master %d after a 1 s call ended by its own deadline, want 0 (kept)", i)
	}
	// This one starts on the silent master and hangs there until its
	// deadline, past hungAfter and below the per-attempt 5 s.
	if err := call(hungAfter + 500*time.Millisecond); err == nil {
		t.Fatal("a call on the silent master succeeded")
	}
	// The next one, just as short, must reach the answering master.
	if err := call(3 * time.Second); err != nil {
		t.Fatalf("the call after a hung attempt: %v; want it answered by the other master", err)
	}
	// And the client stays there.
	if _, i := c.Conn(); i != 1 {
		t.Fatalf("current master %d, want 1 (the answering one)", i)
	}
}

// refusing answers every JoinFloor as a master that cannot take the
// range's floor does.
type refusing struct {
	pb.UnimplementedMasterServiceServer
	calls atomic.Int32
}

func (r *refusing) JoinFloor(context.Context, *pb.JoinFloorRequest) (*pb.JoinFloorResponse, error) {
	r.calls.Add(1)
	return nil, rpcerr.New(codes.Aborted, rpcerr.ReasonNoJoinFloor, "join floor of range 7: not leader", nil)
}

// TestNoJoinFloorStaysOnMaster: the master's refusal of a join floor for a
// reason of the range is returned at once, and the client stays on that
// master (its heartbeats go on there).
func TestNoJoinFloorStaysOnMaster(t *testing.T) {
	masters := []*refusing{{}, {}}
	c, err := New(serveMasters(t, masters[0], masters[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = c.Call(ctx, func(ctx context.Context, mc pb.MasterServiceClient) error {
		_, err := mc.JoinFloor(ctx, &pb.JoinFloorRequest{RangeId: 7, ServerId: "ps3"})
		return err
	})
	if !rpcerr.Is(err, rpcerr.ReasonNoJoinFloor) {
		t.Fatalf("call: %v, want the master's NO_JOIN_FLOOR", err)
	}
	if _, i := c.Conn(); i != 0 || masters[0].calls.Load() != 1 || masters[1].calls.Load() != 0 {
		t.Fatalf("current master %d, calls %d and %d; want master 0, asked once", i, masters[0].calls.Load(), masters[1].calls.Load())
	}
}

// slowDelete is a leading master whose DeleteTable answers that its work
// ran out of time (a deleted table's ranges not frozen yet) until the
// third call.
type slowDelete struct {
	pb.UnimplementedMasterServiceServer
	calls atomic.Int32
}

func (m *slowDelete) DeleteTable(context.Context, *pb.DeleteTableRequest) (*pb.DeleteTableResponse, error) {
	if m.calls.Add(1) < 3 {
		return nil, rpcerr.New(codes.DeadlineExceeded, rpcerr.ReasonUnavailable, "ranges not frozen within 4s", nil)
	}
	return &pb.DeleteTableResponse{}, nil
}

// TestLeaderTimeoutStaysOnMaster: the leader's own answer that its work
// ran out of time (DeadlineExceeded with a reason) is asked again of the
// same master; before, each moved the shared client to the next master,
// so every caller went through a follower first.
func TestLeaderTimeoutStaysOnMaster(t *testing.T) {
	masters := []*slowDelete{{}, {}}
	c, err := New(serveMasters(t, masters[0], masters[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = c.Call(ctx, func(ctx context.Context, mc pb.MasterServiceClient) error {
		_, err := mc.DeleteTable(ctx, &pb.DeleteTableRequest{Name: "t"})
		return err
	})
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	if _, i := c.Conn(); i != 0 || masters[0].calls.Load() != 3 || masters[1].calls.Load() != 0 {
		t.Fatalf("current master %d, calls %d and %d; want master 0, asked 3 times", i, masters[0].calls.Load(), masters[1].calls.Load())
	}
}

// serveMasters serves each of ms as a master on a loopback port until the
// test ends and returns their addresses, in order.
func serveMasters(t *testing.T, ms ...pb.MasterServiceServer) []string {
	t.Helper()
	var addrs []string
	for _, m := range ms {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		pb.RegisterMasterServiceServer(srv, m)
		go srv.Serve(ln)
		t.Cleanup(srv.Stop)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs
}
