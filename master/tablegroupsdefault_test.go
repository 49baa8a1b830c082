package master

import (
	"context"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// TestDefaultAnchorWaitsForEveryServer is the upgrade order's safety
// under the default --table-groups (on since session 36): a master of
// this build founds no anchor group, so creates no table in one, until
// every server of the placement said table_groups in its heartbeat (a
// partition server of a build before session 34 says nothing and would
// answer ADD_SPAN "unknown command"); once they all have, it founds one.
func TestDefaultAnchorWaitsForEveryServer(t *testing.T) {
	s, _ := raceMaster(t) // DefaultConfig: the default under test
	if !s.cfg.TableGroups {
		t.Fatal("DefaultConfig().TableGroups is false; the deployment default is on")
	}
	anchors := func() int {
		n := 0
		for _, r := range s.PartitionMap().GetRanges() {
			if isAnchor(r) {
				n++
			}
		}
		return n
	}
	heartbeat := func(shares map[string]bool) {
		t.Helper()
		for _, id := range []string{"a", "b", "c"} {
			if _, err := (&service{s: s}).Heartbeat(context.Background(), &pb.HeartbeatRequest{
				Server: &pb.ServerInfo{ServerId: id, GrpcAddr: "local-" + id, RaftAddr: "127.0.0.1:1"}, Full: true,
				TableGroups: shares[id],
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name   string
		shares map[string]bool
	}{
		{"no server announces table_groups", nil},
		{"one server of three does not", map[string]bool{"a": true, "b": true}},
	} {
		heartbeat(tc.shares)
		s.ensureAnchor() // the policy loop's call, here at once
		if s.anchoring.Load() || anchors() != 0 {
			t.Fatalf("%s: an anchor group is being founded (anchoring %v, %d anchors in the map)", tc.name, s.anchoring.Load(), anchors())
		}
	}
	heartbeat(map[string]bool{"a": true, "b": true, "c": true})
	s.ensureAnchor()
	waitUntil(t, 10*time.Second, "an anchor group once every server announced table_groups", func() bool { return anchors() == 1 })
}
