package cluster

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"tablestore/internal/logging"
	"tablestore/master"
	"tablestore/partitionserver"
	pb "tablestore/proto/tablestorepb"
)

// silentServer is a partition server's service as a front-end sees a
// SIGSTOPped process: the connection is open and nothing answers until the
// process resumes (then the request is served).
type silentServer struct {
	pb.PartitionServiceServer
	resume <-chan struct{}
}

func (s silentServer) wait(ctx context.Context) error {
	select {
	case <-s.resume:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

func (s silentServer) Write(ctx context.Context, req *pb.WriteRequest) (*pb.WriteResponse, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.PartitionServiceServer.Write(ctx, req)
}

func (s silentServer) Get(ctx context.Context, req *pb.GetRequest) (*pb.GetResponse, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.PartitionServiceServer.Get(ctx, req)
}

func (s silentServer) Query(ctx context.Context, req *pb.QueryRequest) (*pb.QueryResponse, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.PartitionServiceServer.Query(ctx, req)
}

// TestPausedLeader pauses a range's leader as SIGSTOP would (its Raft
// traffic and its answers to the front-end stall, connections open) while
// clients write: the followers elect a leader and the front-end, which
// abandons an attempt after --attempt-timeout, reaches it, so writes
// succeed again within about 3 s. After the pause ends every acknowledged
// write is there exactly once.
func TestPausedLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, err := Start(Options{
		Masters: 1, Servers: 3, Frontends: 1, DataDir: t.TempDir(), Logger: logging.FromEnv(""),
		LocalCalls: true,
		TuneMaster: func(m *master.Config) {
			soleMasterElects(m)
			m.ServerTimeout = 2 * time.Second
			quietPolicies(m)
		},
		TuneServer: func(s *partitionserver.Config) { s.HeartbeatInterval = 200 * time.Millisecond },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	sc := serviceClient(t, c, 0)
	const table = "paused"
	tc := newTable(t, sc, table)
	w := startWorkload(t, tc, 4, spreadKeys)
	waitFor(t, 10*time.Second, "a reported range leader", func() bool { return rangeLeader(c, table) >= 0 })
	waitFor(t, 10*time.Second, "writes", func() bool { return w.written.Load() > 50 })
	victim := rangeLeader(c, table)
	s := c.Servers[victim].Server
	resume := make(chan struct{})
	t.Logf("pausing ps%d, the range's leader", victim+1)
	w.maxGap.Store(0)
	paused := time.Now()
	c.PauseServer(victim, true)
	for _, f := range c.Frontends {
		f.Router.RegisterLocal(s.GRPCAddr(), silentServer{s.Service(), resume})
	}
	before := w.written.Load()
	waitFor(t, 20*time.Second, "writes through a new leader", func() bool { return w.written.Load() > before+20 })
	recovered := time.Since(paused)
	// Keep it paused a while longer: every request still meets the paused
	// server first until the map names the new leader.
	time.Sleep(2 * time.Second)
	gap := time.Duration(w.maxGap.Load())
	close(resume)
	c.PauseServer(victim, false)
	for _, f := range c.Frontends {
		f.Router.RegisterLocal(s.GRPCAddr(), s.Service())
	}
	time.Sleep(time.Second)
	acked := w.halt()
	t.Logf("20 writes after the pause within %v; longest write gap while paused %v; %d acknowledged, %d failed",
		recovered.Round(time.Millisecond), gap.Round(time.Millisecond), len(acked), w.failed.Load())
	if gap > 3500*time.Millisecond {
		t.Errorf("a client waited %v for a write while the leader was paused (want about 3 s at most)", gap)
	}
	verifyExactlyOnce(t, tc, acked)
}
