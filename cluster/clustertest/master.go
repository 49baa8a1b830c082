package clustertest

import (
	"context"
	"testing"
	"time"

	"tablestore/cluster"
	"tablestore/internal/masterclient"
	"tablestore/master"
	"tablestore/partitionserver"
	pb "tablestore/proto/tablestorepb"
)

// MasterClient returns a client of the cluster's masters.
func MasterClient(t testing.TB, c *cluster.Cluster) *masterclient.Client {
	mc, err := masterclient.New(c.MasterAddrs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mc.Close() })
	return mc
}

// MasterCaller is what the event helpers need of a master client.
type MasterCaller interface {
	Call(context.Context, func(context.Context, pb.MasterServiceClient) error) error
}

// MasterEvents returns the master's event log (nil if it could not be
// read within 5 s).
func MasterEvents(mc MasterCaller) []*pb.Event {
	var out []*pb.Event
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		var err error
		out, err = masterclient.ReadEvents(ctx, m) // a cut stream is retried whole
		return err
	})
	if err != nil {
		return nil
	}
	return out
}

// LeaderOf returns the leading master.
func LeaderOf(t testing.TB, c *cluster.Cluster) *master.Server {
	t.Helper()
	var l *master.Server
	WaitFor(t, 10*time.Second, "a master leader", func() bool {
		for _, m := range c.Masters {
			if m.Server.IsLeader() {
				l = m.Server
				return true
			}
		}
		return false
	})
	return l
}

// PartitionMap is the leading master's partition map; the test fails if
// it cannot be read.
func PartitionMap(t testing.TB, mc *masterclient.Client) *pb.PartitionMap {
	t.Helper()
	m, err := GetPartitionMap(context.Background(), mc)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// GetPartitionMap is PartitionMap for a goroutine of a test.
func GetPartitionMap(ctx context.Context, mc *masterclient.Client) (*pb.PartitionMap, error) {
	var m *pb.PartitionMap
	err := mc.Call(ctx, func(ctx context.Context, c pb.MasterServiceClient) error {
		var err error
		m, err = c.GetPartitionMap(ctx, &pb.GetPartitionMapRequest{})
		return err
	})
	return m, err
}

// TableRanges are table's ranges in m, in the map's order.
func TableRanges(m *pb.PartitionMap, table string) []*pb.RangeDescriptor {
	var out []*pb.RangeDescriptor
	for _, r := range m.GetRanges() {
		if r.GetTable() == table {
			out = append(out, r)
		}
	}
	return out
}

// RangeLeader returns the index of the partition server leading the first
// range of table, as the master leader reports it.
func RangeLeader(c *cluster.Cluster, table string) int {
	for _, m := range c.Masters {
		if m.Server == nil || !m.Server.IsLeader() {
			continue
		}
		pm := m.Server.PartitionMap()
		for _, r := range pm.GetRanges() {
			if r.GetTable() == table {
				if l, ok := pm.GetLeaders()[r.GetRangeId()]; ok {
					return c.ServerIndex(l)
				}
			}
		}
	}
	return -1
}

// HasServer reports whether server id holds a replica of d.
func HasServer(d *pb.RangeDescriptor, id string) bool {
	for _, r := range d.GetReplicas() {
		if r.GetServerId() == id {
			return true
		}
	}
	return false
}

// SameIDs reports whether reps are on exactly the servers ids, in any order.
func SameIDs(ids []string, reps []*pb.Replica) bool {
	if len(ids) != len(reps) {
		return false
	}
	for _, id := range ids {
		found := false
		for _, r := range reps {
			found = found || r.GetServerId() == id
		}
		if !found {
			return false
		}
	}
	return true
}

// RangeRoles waits for rng's leader and names it, a follower and a
// server holding no replica of rng ("" when every server holds one).
func RangeRoles(t testing.TB, c *cluster.Cluster, mc *masterclient.Client, rng *pb.RangeDescriptor) (leader, follower, spare string) {
	t.Helper()
	WaitFor(t, 10*time.Second, "a range leader", func() bool {
		leader = PartitionMap(t, mc).GetLeaders()[rng.GetRangeId()]
		return leader != ""
	})
	for _, r := range rng.GetReplicas() {
		if r.GetServerId() != leader {
			follower = r.GetServerId()
		}
	}
	for _, n := range c.Servers {
		if !HasServer(rng, n.Config.ID) {
			spare = n.Config.ID
		}
	}
	return leader, follower, spare
}

// RangeInfo is server s's view of one of its replicas, nil if it hosts none.
func RangeInfo(s *partitionserver.Server, id uint64) *pb.RangeStatus {
	if s == nil {
		return nil
	}
	resp, err := s.Service().RangeInfo(context.Background(), &pb.RangeInfoRequest{RangeId: id})
	if err != nil {
		return nil
	}
	return resp.GetStatus()
}
