package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/edm"
	"tablestore/internal/rangegroup"
	"tablestore/master"
	"tablestore/partitionserver"
	"tablestore/partitionserver/lifecycle"
	pb "tablestore/proto/tablestorepb"
)

// quietReads: ranges go quiet fast, and a quiet read waits long enough
// for its confirmation that a loaded machine does not turn it into a wake.
func quietReads(s *partitionserver.Config) {
	quiesceFast(s)
	s.QuietReadTimeout = 5 * time.Second
}

func quietReadCount(t *testing.T, outcome string) float64 {
	return clustertest.MetricValue(t, "tablestore_partitionserver_quiet_reads_total", map[string]string{"outcome": outcome})
}

func opensCount(t *testing.T) float64 {
	return clustertest.MetricValue(t, "tablestore_partitionserver_replica_transitions_total", map[string]string{"to": "opening"})
}

// TestQuietReadDoesNotWake: reads of a quiet range, point reads and a
// query, through the front-end, are served by its quiet leader with one
// confirmation: no replica opens. The table a group of its own, and a
// span of an anchor group (the peers confirm for the group: asked for the
// span's id, they said no, and every read woke the group).
func TestQuietReadDoesNotWake(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	for _, anchored := range []bool{false, true} {
		t.Run(map[bool]string{false: "own group", true: "anchor group"}[anchored], func(t *testing.T) {
			quietReadDoesNotWake(t, anchored)
		})
	}
}

func quietReadDoesNotWake(t *testing.T, anchored bool) {
	c := clustertest.StartTunedOpts(t, 3, func(m *master.Config) { clustertest.QuietPolicies(m); m.TableGroups = anchored }, quietReads, anchored)
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, 2*time.Minute)
	const table = "quietread"
	tc := clustertest.NewTable(t, sc, table)
	if err := putV(ctx, tc, "k", 1); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, c, mc, table, 15*time.Second)
	d := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	rangeID := d.GetRangeId()
	if shared := rangegroup.GroupOf(d) != rangeID; shared != anchored {
		t.Fatalf("range %d in Raft group %d, want a span of an anchor group: %v", rangeID, rangegroup.GroupOf(d), anchored)
	}
	// The router sends reads to the leader the master knows; a range that
	// changed leaders just before it went quiet (an election on a loaded
	// machine) may not be there yet, and a read of a quiet follower wakes.
	clustertest.WaitFor(t, 10*time.Second, "the master to know the leader the range went quiet with", func() bool {
		l := clustertest.RangeLeader(c, table)
		if l < 0 {
			return false
		}
		for _, s := range c.Servers {
			info, err := s.Server.Service().RangeInfo(ctx, &pb.RangeInfoRequest{RangeId: rangeID})
			if err != nil || info.GetLeaderServerId() != c.Servers[l].Config.ID {
				return false
			}
		}
		return true
	})
	opens, served := opensCount(t), quietReadCount(t, "served")
	const reads = 5
	var took []time.Duration
	for i := 0; i < reads; i++ {
		start := time.Now()
		v, err := getV(ctx, tc, "k")
		took = append(took, time.Since(start))
		if err != nil || v != 1 {
			t.Fatalf("read %d of the quiet range: %v, %v", i, v, err)
		}
	}
	if _, err := tc.GetEntity(ctx, "absent", "r", nil); !clustertest.IsStatus(err, 404) {
		t.Fatalf("read of a missing entity of the quiet range: %v, want 404", err)
	}
	if n, _ := countEntities(t, ctx, tc, "PartitionKey eq 'k'"); n != 1 {
		t.Fatalf("query of the quiet range found %d entities, want 1", n)
	}
	t.Logf("point reads of the quiet range through the front-end: %v", took)
	if d := opensCount(t) - opens; d != 0 {
		t.Errorf("%v replica opens during reads of a quiet range, want 0", d)
	}
	if d := quietReadCount(t, "served") - served; d < reads+2 {
		t.Errorf("%v quiet reads served, want %d", d, reads+2)
	}
	for i, s := range c.Servers {
		if st := s.Server.ReplicaState(rangeID); st != "quiet" {
			t.Errorf("server %d: replica %s after quiet reads, want quiet", i, st)
		}
	}
	// Reads that keep coming wake it: once a quiet replica has served
	// lifecycle.QuietReadsPerWake, the next read opens the range, whose
	// open leader serves them under a read lease instead of a
	// confirmation round per read (a read-only load stayed quiet for
	// good before, at about four times the CPU per read).
	busy := quietReadCount(t, "busy")
	const steady = lifecycle.QuietReadsPerWake + 8
	for i := 0; i < steady && quietReadCount(t, "busy") == busy; i++ {
		if v, err := getV(ctx, tc, "k"); err != nil || v != 1 {
			t.Fatalf("steady read %d of the quiet range: %v, %v", i, v, err)
		}
	}
	if quietReadCount(t, "busy") == busy {
		t.Fatalf("%d reads of a quiet range and none woke it", steady)
	}
	if d := opensCount(t) - opens; d == 0 {
		t.Errorf("the read that found the quiet replica busy opened no replica")
	}
	if v, err := getV(ctx, tc, "k"); err != nil || v != 1 {
		t.Fatalf("read after the wake: %v, %v", v, err)
	}
	// A write still wakes it, and the next read sees the write.
	if err := putV(ctx, tc, "k", 2); err != nil {
		t.Fatal(err)
	}
	if v, err := getV(ctx, tc, "k"); err != nil || v != 2 {
		t.Fatalf("read after a write: %v, %v", v, err)
	}
}

// directPut writes V=v at key pk straight to server i's replica of range
// id (no router).
func directPut(ctx context.Context, c *cluster.Cluster, i int, id uint64, pk string, v int) error {
	e := &edm.Entity{PartitionKey: pk, RowKey: "r", Properties: []edm.Property{{Name: "V", Value: edm.Value{Type: edm.TypeInt32, Int: int64(v)}}}}
	_, err := c.Servers[i].Server.Service().Write(ctx, &pb.WriteRequest{RangeId: id, Ops: []*pb.EntityOp{{
		Kind: pb.OpKind_OP_KIND_INSERT_OR_REPLACE, PartitionKey: pk, RowKey: "r", Entity: edm.MarshalBinary(e)}}})
	return err
}

// directGet reads key pk's V straight from server i's replica of range id.
func directGet(ctx context.Context, c *cluster.Cluster, i int, id uint64, pk string) (int, error) {
	resp, err := c.Servers[i].Server.Service().Get(ctx, &pb.GetRequest{RangeId: id, PartitionKey: pk, RowKey: "r"})
	if err != nil {
		return 0, err
	}
	e, err := edm.UnmarshalBinary(resp.GetEntity())
	if err != nil {
		return 0, err
	}
	v, ok := e.Get("V")
	if !ok {
		return 0, errors.New("no property V")
	}
	return int(v.Int), nil
}

// TestQuietReadOfDeposedLeader: the quiet leader's server is cut off, the
// range is woken on the other two and written; the old quiet leader still
// believes it leads (it is quiet, with its old mark) and must not answer
// the old value, neither cut off (no confirmation arrives) nor reconnected
// while still quiet (the others are at a newer term: they say no). Either
// way it falls back to waking, which cannot serve the old value either.
func TestQuietReadOfDeposedLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, quietReads)
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	ctx := clustertest.Context(t, 3*time.Minute)
	const table = "quietdeposed"
	tc := clustertest.NewTable(t, sc, table)
	if err := putV(ctx, tc, "k", 1); err != nil {
		t.Fatal(err)
	}
	rangeID := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0].GetRangeId()

	// depose cuts the quiet leader off, writes v at another replica and
	// waits until the other two are quiet again; it returns the old
	// leader's index.
	depose := func(v int) int {
		t.Helper()
		// The master's view of the leader may lag a change the range
		// went through before it went quiet: a read on a replica that was
		// not the leader wakes the range, which then goes quiet again.
		old := -1
		for attempt := 0; old < 0; attempt++ {
			if attempt == 5 {
				t.Fatal("no quiet read served by the range's reported leader in 5 attempts")
			}
			waitQuiet(t, c, mc, table, 15*time.Second)
			l := clustertest.RangeLeader(c, table)
			if l < 0 {
				continue
			}
			served := quietReadCount(t, "served")
			got, err := directGet(ctx, c, l, rangeID, "k")
			if err == nil && got != v-1 {
				t.Fatalf("read on the leader before it is cut off: %v; want %d", got, v-1)
			}
			if err == nil && quietReadCount(t, "served") > served && c.Servers[l].Server.ReplicaState(rangeID) == "quiet" {
				old = l
			}
		}
		c.IsolateServer(old, true)
		clustertest.WaitFor(t, 30*time.Second, "a write on the other replicas", func() bool {
			for i := range c.Servers {
				if i != old && directPut(ctx, c, i, rangeID, "k", v) == nil {
					return true
				}
			}
			return false
		})
		clustertest.WaitFor(t, 30*time.Second, "the other replicas quiet again", func() bool {
			for i, s := range c.Servers {
				if i != old && s.Server.ReplicaState(rangeID) != "quiet" {
					return false
				}
			}
			return true
		})
		if st := c.Servers[old].Server.ReplicaState(rangeID); st != "quiet" {
			t.Fatalf("the cut-off leader's replica is %s, want still quiet", st)
		}
		return old
	}
	// readOld reads on the deposed leader: an error or the new value, never
	// the old one.
	readOld := func(old, v int, outcome string) {
		t.Helper()
		before := quietReadCount(t, outcome)
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		got, err := directGet(rctx, c, old, rangeID, "k")
		if err == nil && got != v {
			t.Fatalf("the deposed quiet leader read %d; want %d or an error", got, v)
		}
		t.Logf("deposed leader's read (%s): %v, %v", outcome, got, err)
		if d := quietReadCount(t, outcome) - before; d < 1 {
			t.Errorf("quiet_reads_total{outcome=%q} did not grow", outcome)
		}
	}

	// Still cut off: no confirmation can arrive.
	old := depose(2)
	readOld(old, 2, "unanswered")
	c.IsolateServer(old, false)

	// Reconnected while still quiet: the others are at a newer term.
	old = depose(3)
	c.IsolateServer(old, false)
	readOld(old, 3, "refused")

	if v, err := getV(ctx, tc, "k"); err != nil || v != 3 {
		t.Fatalf("read through the front-end at the end: %v, %v; want 3", v, err)
	}
}
