package cluster

import (
	"context"
	"testing"
	"time"

	"tablestore/internal/masterclient"
	pb "tablestore/proto/tablestorepb"
)

// followerOf waits for range d's leader and returns a replica of d that
// does not lead it, and its server index.
func followerOf(t *testing.T, c *Cluster, mc *masterclient.Client, d *pb.RangeDescriptor) (string, int) {
	t.Helper()
	var victim string
	waitFor(t, 10*time.Second, "a range leader", func() bool {
		l := partitionMap(t, mc).GetLeaders()[d.GetRangeId()]
		for _, r := range d.GetReplicas() {
			if l != "" && r.GetServerId() != l {
				victim = r.GetServerId()
				return true
			}
		}
		return false
	})
	return victim, c.ServerIndex(victim)
}

// splitListing splits table at key through the master and returns the
// range that starts there, which must list server victim.
func splitListing(t *testing.T, ctx context.Context, mc *masterclient.Client, table, key, victim string) *pb.RangeDescriptor {
	t.Helper()
	err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: key})
		return err
	})
	var right *pb.RangeDescriptor
	for _, r := range tableRanges(partitionMap(t, mc), table) {
		if r.GetStart() == key {
			right = r
		}
	}
	if right == nil {
		// A retried split whose first attempt succeeded reports the key
		// taken; only a missing range is a failure.
		t.Fatalf("split at %s: %v", key, err)
	}
	if !hasServer(right, victim) {
		t.Fatalf("split-off range %s does not list %s", describe([]*pb.RangeDescriptor{right}), victim)
	}
	return right
}
