package cluster_test

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"tablestore/cluster/clustertest"
	pb "tablestore/proto/tablestorepb"
)

// TestWatchKeepalive: a master's delta watch that has nothing to send for
// a second sends a keepalive (the stream's epoch and last version, no
// changes), by which a front-end tells a quiet master from a link that
// drops packets without closing (router.TestWatchSilenceIsALostMaster).
func TestWatchKeepalive(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := clustertest.Start(t, 1, 3)
	conn, err := grpc.NewClient(c.Masters[0].Config.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := clustertest.Context(t, 30*time.Second)
	stream, err := pb.NewMasterServiceClient(conn).WatchPartitionMap(ctx, &pb.WatchPartitionMapRequest{Deltas: true})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	epoch, version := first.GetEpoch(), first.GetVersion()
	for {
		m, err := stream.Recv()
		if err != nil {
			t.Fatalf("watch ended before a keepalive: %v", err)
		}
		if m.GetVersion() > version {
			version = m.GetVersion()
		}
		if !m.GetKeepalive() {
			continue // a change (the cluster is still settling)
		}
		if !m.GetDelta() || m.GetEpoch() != epoch || m.GetVersion() != version || len(m.GetTables())+len(m.GetRanges())+len(m.GetLeaders())+len(m.GetServers()) > 0 {
			t.Fatalf("keepalive %v: want a delta of epoch %d, version %d, with no changes", m, epoch, version)
		}
		return
	}
}
