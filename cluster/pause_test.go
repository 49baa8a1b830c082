package cluster_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
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
	c, err := cluster.Start(cluster.Options{
		Masters: 1, Servers: 3, Frontends: 1, DataDir: t.TempDir(), Logger: logging.FromEnv(""),
		LocalCalls: true,
		TuneMaster: func(m *master.Config) {
			clustertest.SoleMasterElects(m)
			m.ServerTimeout = 2 * time.Second
			clustertest.QuietPolicies(m)
		},
		TuneServer: func(s *partitionserver.Config) { s.HeartbeatInterval = 200 * time.Millisecond },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	sc := clustertest.ServiceClient(t, c, 0)
	const table = "paused"
	tc := clustertest.NewTable(t, sc, table)
	w := clustertest.StartWorkload(t, tc, 4, clustertest.SpreadKeys)
	clustertest.WaitFor(t, 10*time.Second, "a reported range leader", func() bool { return clustertest.RangeLeader(c, table) >= 0 })
	clustertest.WaitFor(t, 10*time.Second, "writes", func() bool { return w.Written.Load() > 50 })
	victim := clustertest.RangeLeader(c, table)
	s := c.Servers[victim].Server
	resume := make(chan struct{})
	t.Logf("pausing ps%d, the range's leader", victim+1)
	w.MaxGap.Store(0)
	paused := time.Now()
	c.PauseServer(victim, true)
	for _, f := range c.Frontends {
		f.Router.RegisterLocal(s.GRPCAddr(), silentServer{s.Service(), resume})
	}
	before := w.Written.Load()
	clustertest.WaitFor(t, 20*time.Second, "writes through a new leader", func() bool { return w.Written.Load() > before+20 })
	recovered := time.Since(paused)
	// Keep it paused a while longer: every request still meets the paused
	// server first until the map names the new leader.
	time.Sleep(2 * time.Second)
	gap := time.Duration(w.MaxGap.Load())
	close(resume)
	c.PauseServer(victim, false)
	for _, f := range c.Frontends {
		f.Router.RegisterLocal(s.GRPCAddr(), s.Service())
	}
	time.Sleep(time.Second)
	acked := w.Halt()
	t.Logf("20 writes after the pause within %v; longest write gap while paused %v; %d acknowledged, %d failed",
		recovered.Round(time.Millisecond), gap.Round(time.Millisecond), len(acked), w.Failed.Load())
	if gap > 3500*time.Millisecond {
		t.Errorf("a client waited %v for a write while the leader was paused (want about 3 s at most)", gap)
	}
	clustertest.VerifyExactlyOnce(t, tc, acked)
}
