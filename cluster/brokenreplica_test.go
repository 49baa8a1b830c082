package cluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/masterclient"
	"tablestore/internal/rangegroup"
	"tablestore/master"
	"tablestore/partitionserver"
	pb "tablestore/proto/tablestorepb"
)

// TestBrokenReplicaReplaced damages one follower's replica of a range (a
// snapshot ahead of its state file whose header cannot be read: its open
// fails with fsm.ErrCorruptSnapshot) while its server is stopped, and starts the
// server again. The replica goes broken (not reopened at every Raft
// message), its server reports it, and the master replaces it: on the
// server without a replica when there is one, else in place on the same
// server. The range is back to three healthy replicas, none broken, and
// every write acknowledged before and after reads back.
func TestBrokenReplicaReplaced(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	for _, tc := range []struct {
		name     string
		servers  int
		inPlace  bool
		tableTag string
	}{
		{"elsewhere", 4, false, "brokenelse"},
		{"in place", 3, true, "brokenplace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Heartbeats slower than a replacement of a small range: a
			// broken mark the master kept until the server's next report
			// outlived the replacement, and the next policy tick replaced
			// the range again.
			c := clustertest.StartTuned(t, tc.servers, func(m *master.Config) {
				m.Policy.BalanceLeaders = false
				m.Policy.BalanceReplicas = false
				m.ServerTimeout = 10 * time.Second
			}, func(s *partitionserver.Config) { s.HeartbeatInterval = 1500 * time.Millisecond })
			tcl := clustertest.NewTable(t, clustertest.ServiceClient(t, c, 0), tc.tableTag)
			mc := clustertest.MasterClient(t, c)
			acked := map[string]int64{}
			clustertest.WriteSeq(t, tcl, acked, "before", 30)
			d := clustertest.TableRanges(clustertest.PartitionMap(t, mc), tc.tableTag)[0]
			id := d.GetRangeId()
			t.Logf("range %d, Raft group %d (%d ranges)", id, rangegroup.GroupOf(d), rangegroup.GroupSpans(clustertest.PartitionMap(t, mc).GetRanges())[rangegroup.GroupOf(d)])
			victim, _ := breakReplica(t, c, mc, d)
			clustertest.WriteSeq(t, tcl, acked, "degraded", 20)
			clustertest.WaitFor(t, 60*time.Second, fmt.Sprintf("range %d back to three healthy replicas", id), func() bool {
				return healthyReplicas(t, c, mc, tc.tableTag, victim, tc.inPlace)
			})
			// Exactly one replacement, after a settle: a broken mark the
			// master kept past its replacement (until the server's next
			// heartbeat, or from one built before the delete) replaced the
			// range again, removing the new, healthy replica (in place: the
			// range then passed through two voters again).
			settleReplacements(t, mc, id, victim)
			clustertest.WriteSeq(t, tcl, acked, "after", 20)
			clustertest.VerifyExactlyOnce(t, tcl, acked)
		})
	}
}

// breakReplica damages the snapshot of a follower's replica of d's Raft
// group (an anchor group's, with the tables sharing it, when d is a span
// of one), the server stopped and restarted around it, and returns that
// server and its index.
func breakReplica(t *testing.T, c *cluster.Cluster, mc *masterclient.Client, d *pb.RangeDescriptor) (string, int) {
	t.Helper()
	victim := brokenVictim(t, c, mc, d)
	vi := c.ServerIndex(victim)
	if err := c.StopServer(vi); err != nil {
		t.Fatal(err)
	}
	damageSnapshot(t, c.Servers[vi].Config.DataDir, rangegroup.GroupOf(d))
	if err := c.RestartServer(vi); err != nil {
		t.Fatal(err)
	}
	return victim, vi
}

// brokenVictim picks a follower of range d (the map's leader is kept: the
// range must keep serving).
func brokenVictim(t *testing.T, c *cluster.Cluster, mc *masterclient.Client, d *pb.RangeDescriptor) string {
	t.Helper()
	var leader string
	clustertest.WaitFor(t, 10*time.Second, "the range's leader known", func() bool {
		leader = clustertest.PartitionMap(t, mc).GetLeaders()[d.GetRangeId()]
		return leader != ""
	})
	for _, r := range d.GetReplicas() {
		if r.GetServerId() != leader {
			return r.GetServerId()
		}
	}
	t.Fatalf("range %d has no follower: %v", d.GetRangeId(), d.GetReplicas())
	return ""
}

// damageSnapshot plants, in the stopped server's replica of group id, a
// Raft snapshot newer than anything the range applied whose state header
// is garbage: what a torn or corrupted snapshot install leaves.
func damageSnapshot(t *testing.T, dataDir string, id uint64) {
	t.Helper()
	const term, index = 1 << 30, 1 << 40
	name := fmt.Sprintf("%d-%d-%d", term, index, time.Now().UnixMilli())
	dir := filepath.Join(dataDir, "ranges", fmt.Sprint(id), "snapshots", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	meta := fmt.Sprintf(`{"Version":1,"ID":%q,"Index":%d,"Term":%d,"Size":8}`, name, index, term)
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state.bin"), []byte("garbage!"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// healthyReplicas reports whether table's range lists three replicas,
// each answering for it on its server and none broken; the victim holds
// one (inPlace) or none.
func healthyReplicas(t *testing.T, c *cluster.Cluster, mc *masterclient.Client, table, victim string, inPlace bool) bool {
	d := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	if len(d.GetReplicas()) != 3 || clustertest.HasServer(d, victim) != inPlace {
		return false
	}
	for _, r := range d.GetReplicas() {
		n := c.Servers[c.ServerIndex(r.GetServerId())].Server
		if n == nil || clustertest.RangeInfo(n, d.GetRangeId()) == nil || n.ReplicaState(d.GetRangeId()) == "broken" {
			return false
		}
	}
	if n := c.Servers[c.ServerIndex(victim)].Server; !inPlace && n != nil && n.ReplicaState(d.GetRangeId()) != "absent" {
		return false
	}
	return true
}

// brokenEvents counts the master's events re-replicating range id off
// its broken replica on server (alone, or with the other ranges of its
// group when the group is replaced whole).
func brokenEvents(mc *masterclient.Client, id uint64, server string) int {
	n := 0
	for _, e := range clustertest.MasterEvents(mc) {
		if e.GetKind() == pb.EventKind_EVENT_KIND_RE_REPLICATE && slices.Contains(e.GetRangeIds(), id) &&
			strings.Contains(e.GetMessage(), "replica on "+server+" is broken") {
			n++
		}
	}
	return n
}

// replacementSettle is how long settleReplacements watches for a second
// replacement: many policy ticks (250 ms), several of the test's
// heartbeats (1.5 s), and time for a second move of a small range to
// finish (without the mend, the second came 1.0-1.3 s after the first).
const replacementSettle = 5 * time.Second

// settleReplacements fails unless the master replaced range id's broken
// replica on server exactly once, still so after replacementSettle.
func settleReplacements(t *testing.T, mc *masterclient.Client, id uint64, server string) {
	t.Helper()
	for end := time.Now().Add(replacementSettle); ; time.Sleep(200 * time.Millisecond) {
		if n := brokenEvents(mc, id, server); n > 1 {
			t.Fatalf("range %d's broken replica on %s replaced %d times, want once", id, server, n)
		} else if time.Now().After(end) {
			if n != 1 {
				t.Fatalf("no re-replicate event naming the broken replica of range %d on %s", id, server)
			}
			return
		}
	}
}

// TestMoveBesideBrokenReplica: with the policies off the broken replica
// stays, and the master's move checks count it as a replica that does not
// answer, never as a healthy voter: an operator's move of a healthy
// replica of the range is refused (it would leave one healthy spare), and
// a move whose source the master chooses removes the broken one.
func TestMoveBesideBrokenReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const table = "brokenmove"
	c, tcl, mc, acked, ctx := handTable(t, table, 30, nil)
	d := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	id := d.GetRangeId()
	victim, vi := breakReplica(t, c, mc, d)
	clustertest.WaitFor(t, 20*time.Second, "the damaged replica broken", func() bool {
		return c.Servers[vi].Server.ReplicaState(id) == "broken"
	})
	var healthy, free string
	for _, sv := range clustertest.PartitionMap(t, mc).GetServers() {
		switch s := sv.GetServerId(); {
		case !clustertest.HasServer(d, s):
			free = s
		case s != victim && healthy == "":
			healthy = s
		}
	}
	err := moveDirect(ctx, c, id, healthy, free)
	if err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("moving the healthy replica on %s beside the broken one on %s: %v, want refused (a replica does not answer)", healthy, victim, err)
	}
	if err := moveDirect(ctx, c, id, "", free); err != nil {
		t.Fatalf("move with the master choosing the source: %v", err)
	}
	d = clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	if clustertest.HasServer(d, victim) || !clustertest.HasServer(d, free) || len(d.GetReplicas()) != 3 {
		t.Fatalf("after the move the range lists %v; want the broken replica on %s replaced by %s", d.GetReplicas(), victim, free)
	}
	clustertest.WriteSeq(t, tcl, acked, "after", 20)
	clustertest.VerifyExactlyOnce(t, tcl, acked)
}
