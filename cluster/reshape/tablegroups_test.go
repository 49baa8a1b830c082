package reshape

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/failpoint"
	"tablestore/internal/masterclient"
	"tablestore/internal/rangegroup"
	"tablestore/master"
	pb "tablestore/proto/tablestorepb"
)

// startTableGroups starts three servers and a master with --table-groups
// (load splits off: the tables stay one range each; merge-cold stays on,
// its MergeLoad is homeGroup's bound for a cold span) and waits for its spare anchor group, returned with the master client.
func startTableGroups(t *testing.T) (*cluster.Cluster, *masterclient.Client, uint64) {
	t.Helper()
	return startTableGroupsOf(t, 3, nil)
}

// startTableGroupsTuned is startTableGroups with the master's config
// changed further by tune.
func startTableGroupsTuned(t *testing.T, tune func(*master.Config)) (*cluster.Cluster, *masterclient.Client, uint64) {
	t.Helper()
	return startTableGroupsOf(t, 3, tune)
}

// startTableGroupsOf is startTableGroups with servers partition servers
// and tune, when not nil, changing the master's configuration further.
func startTableGroupsOf(t *testing.T, servers int, tune func(*master.Config)) (*cluster.Cluster, *masterclient.Client, uint64) {
	t.Helper()
	c := clustertest.StartTuned(t, servers, func(m *master.Config) {
		m.TableGroups = true
		m.Policy.SplitLoad = 1e9
		if tune != nil {
			tune(m)
		}
	}, nil)
	mc := clustertest.MasterClient(t, c)
	return c, mc, anchorTakingTables(t, c, mc)
}

// anchorTakingTables waits for the spare anchor group of a cluster whose
// masters run with --table-groups and for it to take tables (a warm-up
// table created in its group), and returns the anchor's range id.
func anchorTakingTables(t *testing.T, c *cluster.Cluster, mc *masterclient.Client) uint64 {
	t.Helper()
	var anchor uint64
	clustertest.WaitFor(t, 20*time.Second, "an anchor group with a leader", func() bool {
		m := clustertest.PartitionMap(t, mc)
		for _, r := range m.GetRanges() {
			if strings.HasPrefix(r.GetTable(), "_groups/") && m.GetLeaders()[r.GetRangeId()] != "" {
				anchor = r.GetRangeId()
				return true
			}
		}
		return false
	})
	// The anchor takes tables once it is marked started and every server
	// reports its replica: warm-up tables until one lands in its group.
	sc := clustertest.ServiceClient(t, c, 0)
	n := 0
	clustertest.WaitFor(t, 20*time.Second, "a table created in the anchor's group", func() bool {
		name := fmt.Sprintf("warmup%d", n)
		n++
		clustertest.NewTable(t, sc, name)
		d := spanOf(clustertest.PartitionMap(t, mc), name)
		return d != nil && rangegroup.GroupOf(d) == anchor
	})
	return anchor
}

// tablesInAnchor creates the tables names and fails unless each is one
// range, a span of anchor's group on every replica; it returns each
// table's client and range.
func tablesInAnchor(t *testing.T, c *cluster.Cluster, mc *masterclient.Client, sc *aztables.ServiceClient, anchor uint64, names []string) (map[string]*aztables.Client, map[string]*pb.RangeDescriptor) {
	t.Helper()
	clients := map[string]*aztables.Client{}
	spans := map[string]*pb.RangeDescriptor{}
	for _, n := range names {
		clients[n] = clustertest.NewTable(t, sc, n)
	}
	m := clustertest.PartitionMap(t, mc)
	for _, n := range names {
		d := spanOf(m, n)
		if d == nil || rangegroup.GroupOf(d) != anchor {
			t.Fatalf("table %s: %v, want a span of anchor group %d", n, d, anchor)
		}
		checkOneGroup(t, c, d, anchor)
		spans[n] = d
	}
	return clients, spans
}

// waitReplicas waits up to d until no server holds a replica of any range
// of gone and every server holds one of every range of kept.
func waitReplicas(t *testing.T, c *cluster.Cluster, d time.Duration, what string, gone, kept []uint64) {
	t.Helper()
	clustertest.WaitFor(t, d, what, func() bool {
		for _, n := range c.Servers {
			for _, id := range gone {
				if n.Server.ReplicaState(id) != "absent" {
					return false
				}
			}
			for _, id := range kept {
				if n.Server.ReplicaState(id) == "absent" {
					return false
				}
			}
		}
		return true
	})
}

// spanOf returns table's only range in the map, nil when it has none or
// several.
func spanOf(m *pb.PartitionMap, table string) *pb.RangeDescriptor {
	rs := clustertest.TableRanges(m, table)
	if len(rs) != 1 {
		return nil
	}
	return rs[0]
}

// checkOneGroup fails unless range d, a span added to group (generation 2
// or later), is reported by every replica's server as a span of that
// group, the group's leader leading it.
func checkOneGroup(t *testing.T, c *cluster.Cluster, d *pb.RangeDescriptor, group uint64) {
	t.Helper()
	if d.GetGeneration() < 2 || rangegroup.GroupOf(d) != group {
		t.Fatalf("range %d: generation %d, group %d; want added to group %d", d.GetRangeId(), d.GetGeneration(), rangegroup.GroupOf(d), group)
	}
	clustertest.WaitFor(t, 10*time.Second, fmt.Sprintf("every replica of range %d serving it in group %d", d.GetRangeId(), group), func() bool {
		for _, rep := range d.GetReplicas() {
			n := c.Servers[c.ServerIndex(rep.GetServerId())]
			if n.Server == nil {
				return false
			}
			info, err := n.Server.Service().RangeInfo(context.Background(), &pb.RangeInfoRequest{RangeId: d.GetRangeId()})
			if err != nil || rangegroup.GroupOf(info.GetStatus().GetRange()) != group {
				return false
			}
		}
		return true
	})
}

// TestTablesShareGroups: with --table-groups, thirty tables created
// through the front-end land in one or two Raft groups (the anchor
// groups), not thirty; every table is a span added to its group (no group
// of its own on any server); writes to every table, one partition server
// crashed and restarted midway, and every acknowledged write of every
// table reads back exactly once.
func TestTablesShareGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, mc, _ := startTableGroups(t)
	sc := clustertest.ServiceClient(t, c, 0)
	const tables = 30
	clients := make([]*aztables.Client, tables)
	for i := range clients {
		clients[i] = clustertest.NewTable(t, sc, fmt.Sprintf("shared%02d", i))
	}
	m := clustertest.PartitionMap(t, mc)
	groups := map[uint64]int{}
	for i := range clients {
		d := spanOf(m, fmt.Sprintf("shared%02d", i))
		if d == nil {
			t.Fatalf("table shared%02d has no single range", i)
		}
		groups[rangegroup.GroupOf(d)]++
		if rangegroup.GroupOf(d) == d.GetRangeId() {
			t.Fatalf("table shared%02d is a group of its own: %v", i, d)
		}
		checkOneGroup(t, c, d, rangegroup.GroupOf(d))
	}
	t.Logf("%d tables in groups %v", tables, groups)
	if len(groups) > 2 {
		t.Fatalf("%d tables in %d groups, want at most 2: %v", tables, len(groups), groups)
	}
	works := make([]*clustertest.Workload, tables)
	for i, tc := range clients {
		works[i] = clustertest.StartWorkload(t, tc, 1, clustertest.SpreadKeys)
	}
	time.Sleep(time.Second)
	if err := c.CrashServer(1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := c.RestartServer(1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	total := 0
	for i, w := range works {
		acked := w.Halt()
		if len(acked) == 0 {
			t.Fatalf("table shared%02d: no write acknowledged", i)
		}
		total += len(acked)
		clustertest.VerifyExactlyOnce(t, clients[i], acked)
	}
	t.Logf("%d writes acknowledged over %d tables", total, tables)
}

// TestTableGroupCreateInterrupted: a create into a home group stops where
// the master could die, before the AddSpan (master/create-table/before-add-span:
// the table committed in the group, nothing sent) or after it applied
// (master/create-table/after-add-span: the span in the group's log, not
// recorded; partitionserver/add-span/after-apply: the same, the group
// leader's answer lost), and the master restarts. Either the client's retry (the same
// request id) answers and adds it, or, with no retry, the new master's
// resumeAddSpans does; either way the table is one span of the anchor's
// group on every replica, never bootstrapped as a group of its own, and
// takes writes that read back exactly once.
func TestTableGroupCreateInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	points := []string{"master/create-table/before-add-span", "master/create-table/after-add-span", "partitionserver/add-span/after-apply"}
	for _, point := range points {
		for _, retry := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/retry=%v", point, retry), func(t *testing.T) {
				c, mc, anchor := startTableGroups(t)
				table := "interrupted"
				var hits atomic.Int32
				failpoint.Enable(point, func() error { hits.Add(1); return failpoint.ErrInjected })
				defer failpoint.Disable(point)
				req := &pb.CreateTableRequest{Name: table, RequestId: []byte("create-" + table)}
				// The first attempt ends (its client gives up) once the
				// failpoint failed it: without retry=true no attempt
				// follows, and only resumeAddSpans can add the range.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				first := make(chan struct{})
				go func() {
					defer close(first)
					_ = mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
						_, err := m.CreateTable(ctx, req)
						return err
					})
				}()
				clustertest.WaitFor(t, 20*time.Second, point+" reached", func() bool { return hits.Load() > 0 })
				cancel()
				<-first
				if err := c.StopMaster(0); err != nil {
					t.Fatal(err)
				}
				failpoint.Disable(point)
				if err := c.RestartMaster(0); err != nil {
					t.Fatal(err)
				}
				if retry {
					err := mc.Call(clustertest.Context(t, 30*time.Second), func(ctx context.Context, m pb.MasterServiceClient) error {
						_, err := m.CreateTable(ctx, req)
						return err
					})
					if err != nil {
						t.Fatalf("retry of the create: %v", err)
					}
				}
				var d *pb.RangeDescriptor
				clustertest.WaitFor(t, 30*time.Second, "the table added to the anchor's group", func() bool {
					d = spanOf(clustertest.PartitionMap(t, mc), table)
					return d != nil && d.GetGeneration() >= 2
				})
				checkOneGroup(t, c, d, anchor)
				tc := clustertest.ServiceClient(t, c, 0).NewClient(table)
				w := clustertest.StartWorkload(t, tc, 2, clustertest.SpreadKeys)
				time.Sleep(time.Second)
				acked := w.Halt()
				if len(acked) == 0 {
					t.Fatal("no write acknowledged")
				}
				clustertest.VerifyExactlyOnce(t, tc, acked)
			})
		}
	}
}

// TestDeleteTableOfAnchorGroup: steps 4 and 5 together. With
// --table-groups, four tables created through the front-end share the
// anchor's Raft group; one is deleted through the front-end while the
// other three take writes. The deleted table's span leaves the group and
// goes alone (on every server), the anchor and the other three stay
// spans of the same group on every replica, every acknowledged write of
// theirs reads back exactly once, and the name can be created again.
func TestDeleteTableOfAnchorGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, mc, anchor := startTableGroups(t)
	sc := clustertest.ServiceClient(t, c, 0)
	names := []string{"keep0", "keep1", "keep2", "doomed"}
	clients, spans := tablesInAnchor(t, c, mc, sc, anchor, names)
	var works []*clustertest.Workload
	for _, n := range names[:3] {
		works = append(works, clustertest.StartWorkload(t, clients[n], 2, clustertest.SpreadKeys))
	}
	if _, err := clients["doomed"].AddEntity(clustertest.Context(t, 10*time.Second), []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if _, err := sc.DeleteTable(clustertest.Context(t, time.Minute), "doomed", nil); err != nil {
		t.Fatal(err)
	}
	doomed := spans["doomed"].GetRangeId()
	var kept []uint64
	for _, keep := range names[:3] {
		kept = append(kept, spans[keep].GetRangeId())
	}
	waitReplicas(t, c, 40*time.Second, "the deleted table's span gone from every server, the others served", []uint64{doomed}, kept)
	for i, w := range works {
		acked := w.Halt()
		if len(acked) == 0 {
			t.Fatalf("table %s: no write acknowledged", names[i])
		}
		clustertest.VerifyExactlyOnce(t, clients[names[i]], acked)
	}
	// The range each table was created as stays a span of the anchor's
	// group on every replica (the tables stay under the split load and
	// merge-bytes: nothing takes them out, stage 7 step 7).
	m := clustertest.PartitionMap(t, mc)
	for _, n := range names[:3] {
		d, ok := rangeByID(m, spans[n].GetRangeId())
		if !ok || d.GetTable() != n {
			t.Fatalf("table %s's range %d after the delete: %v (the table's ranges: %v)", n, spans[n].GetRangeId(), d, clustertest.TableRanges(m, n))
		}
		checkOneGroup(t, c, d, anchor)
	}
	if d, ok := rangeByID(m, anchor); !ok || !strings.HasPrefix(d.GetTable(), "_groups/") {
		t.Fatalf("anchor range %d after the delete: %v", anchor, d)
	}
	clustertest.WaitFor(t, 30*time.Second, "the name created again", func() bool {
		_, err := sc.CreateTable(context.Background(), "doomed", nil)
		return err == nil
	})
}

// rangeByID is range id in m.
func rangeByID(m *pb.PartitionMap, id uint64) (*pb.RangeDescriptor, bool) {
	for _, r := range m.GetRanges() {
		if r.GetRangeId() == id {
			return r, true
		}
	}
	return nil, false
}

// TestTableCreatedWhileAServerIsDown: with a follower of the anchor
// group stopped, and known down by the master, a new table still becomes
// a span of the anchor's group (its leader and a majority commit the
// ADD_SPAN), not a Raft group of its own as before session 38, which it
// stayed for good. It takes writes meanwhile, and once the server is back
// its replica serves the table as a span of the group; every
// acknowledged write reads back once.
func TestTableCreatedWhileAServerIsDown(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, mc, anchor := startTableGroups(t)
	m := clustertest.PartitionMap(t, mc)
	leader := m.GetLeaders()[anchor]
	var down string
	for _, r := range m.GetRanges() {
		if r.GetRangeId() != anchor {
			continue
		}
		for _, rep := range r.GetReplicas() {
			if rep.GetServerId() != leader {
				down = rep.GetServerId()
				break
			}
		}
	}
	if down == "" {
		t.Fatalf("anchor %d: no follower besides leader %q in %v", anchor, leader, m.GetRanges())
	}
	idx := c.ServerIndex(down)
	if err := c.StopServer(idx); err != nil {
		t.Fatal(err)
	}
	clustertest.WaitFor(t, 20*time.Second, "the master to count "+down+" down", func() bool {
		for _, mn := range c.Masters {
			if mn.Server != nil && mn.Server.IsLeader() {
				return !mn.Server.ServerUp(down)
			}
		}
		return false
	})
	sc := clustertest.ServiceClient(t, c, 0)
	tc := clustertest.NewTable(t, sc, "whiledown")
	d := spanOf(clustertest.PartitionMap(t, mc), "whiledown")
	if d == nil {
		t.Fatal("table whiledown has no single range")
	}
	group := rangegroup.GroupOf(d)
	if group == d.GetRangeId() {
		t.Fatalf("table whiledown is a Raft group of its own (%v) with %s down: want a span of an anchor group", d, down)
	}
	acked := map[string]int64{}
	clustertest.WriteSeq(t, tc, acked, "down", 20)
	if err := c.RestartServer(idx); err != nil {
		t.Fatal(err)
	}
	checkOneGroup(t, c, d, group)
	clustertest.WriteSeq(t, tc, acked, "back", 20)
	clustertest.VerifyExactlyOnce(t, tc, acked)
}
