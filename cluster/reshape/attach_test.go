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

// Stage 8 (docs/range-groups.md): tables created in Raft groups of their
// own (a master without --table-groups) join anchor groups through
// GroupTables once the master runs with the flag, their rows where they
// are.

// startOwnGroups starts three servers and a master without
// --table-groups, the merge load high enough that tables under the test's
// writes count as cold (GroupTables takes only cold tables), creates the
// tables names (each one range, a group of its own) and starts a writer on
// each.
func startOwnGroups(t *testing.T, names []string) (*cluster.Cluster, *masterclient.Client, map[string]*aztables.Client, map[string]*clustertest.Workload) {
	t.Helper()
	c := clustertest.StartTuned(t, 3, func(m *master.Config) {
		m.TableGroups = false
		m.Policy.SplitLoad = 1e9
		m.Policy.MergeLoad = 1e6
	}, nil)
	mc := clustertest.MasterClient(t, c)
	sc := clustertest.ServiceClient(t, c, 0)
	clients, works := map[string]*aztables.Client{}, map[string]*clustertest.Workload{}
	for _, n := range names {
		clients[n] = clustertest.NewTable(t, sc, n)
	}
	m := clustertest.PartitionMap(t, mc)
	for _, n := range names {
		if d := spanOf(m, n); d == nil || rangegroup.GroupOf(d) != d.GetRangeId() {
			t.Fatalf("table %s: %v, want one range, a group of its own", n, d)
		}
		works[n] = clustertest.StartWorkload(t, clients[n], 1, clustertest.SpreadKeys)
	}
	for _, n := range names {
		w := works[n]
		clustertest.WaitFor(t, 30*time.Second, "writes acknowledged to "+n, func() bool { return w.Written.Load() >= 20 })
	}
	return c, mc, clients, works
}

// withTableGroups restarts the master with --table-groups and returns the
// anchor group new tables join (its warm-up tables created).
func withTableGroups(t *testing.T, c *cluster.Cluster, mc *masterclient.Client) uint64 {
	t.Helper()
	if err := c.StopMaster(0); err != nil {
		t.Fatal(err)
	}
	c.Masters[0].Config.TableGroups = true
	if err := c.RestartMaster(0); err != nil {
		t.Fatal(err)
	}
	return anchorTakingTables(t, c, mc)
}

// groupTables calls GroupTables once with budget.
func groupTables(mc *masterclient.Client, budget time.Duration) (*pb.GroupTablesResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), budget+30*time.Second)
	defer cancel()
	var resp *pb.GroupTablesResponse
	err := mc.Call(ctx, func(ctx context.Context, c pb.MasterServiceClient) error {
		var err error
		resp, err = c.GroupTables(ctx, &pb.GroupTablesRequest{BudgetMs: uint32(budget.Milliseconds())})
		return err
	})
	return resp, err
}

// groupAll calls GroupTables until nothing remains and returns the ranges
// attached.
func groupAll(t *testing.T, mc *masterclient.Client) []uint64 {
	t.Helper()
	var attached []uint64
	clustertest.WaitFor(t, 90*time.Second, "GroupTables answering that nothing remains", func() bool {
		resp, err := groupTables(mc, 3*time.Second)
		if err != nil {
			t.Logf("GroupTables: %v", err)
			return false
		}
		attached = append(attached, resp.GetAttachedRangeIds()...)
		for _, sk := range resp.GetSkipped() {
			t.Logf("skipped range %d: %s", sk.GetRangeId(), sk.GetReason())
		}
		return len(resp.GetRemainingRangeIds()) == 0
	})
	return attached
}

// checkAttached fails unless every table of names is one range, a span
// of an anchor group served as such by every replica, and returns their
// ranges.
func checkAttached(t *testing.T, c *cluster.Cluster, mc *masterclient.Client, names []string) map[string]*pb.RangeDescriptor {
	t.Helper()
	m := clustertest.PartitionMap(t, mc)
	anchors := map[uint64]bool{}
	for _, r := range m.GetRanges() {
		if strings.HasPrefix(r.GetTable(), "_groups/") {
			anchors[r.GetRangeId()] = true
		}
	}
	spans := map[string]*pb.RangeDescriptor{}
	for _, n := range names {
		d := spanOf(m, n)
		if d == nil || !anchors[rangegroup.GroupOf(d)] {
			t.Fatalf("table %s: %v, want one range, a span of an anchor group %v", n, d, anchors)
		}
		checkOneGroup(t, c, d, rangegroup.GroupOf(d))
		spans[n] = d
	}
	return spans
}

// writeEach writes one new entity to every table.
func writeEach(t *testing.T, clients map[string]*aztables.Client, rk string) {
	t.Helper()
	ctx := clustertest.Context(t, time.Minute)
	for n, tc := range clients {
		body := []byte(fmt.Sprintf(`{"PartitionKey":"after","RowKey":%q}`, rk))
		if _, err := tc.UpsertEntity(ctx, body, nil); err != nil {
			t.Fatalf("write to %s: %v", n, err)
		}
	}
}

// TestGroupTablesAttach: tables created in groups of their own, under
// writes, join an anchor group through GroupTables once the master runs
// with --table-groups: each is a span of an anchor group on every
// replica, every acknowledged write reads back exactly once, new writes
// work, and a partition server restarted afterwards serves them still.
func TestGroupTablesAttach(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	names := []string{"own0", "own1", "own2", "own3"}
	c, mc, clients, works := startOwnGroups(t, names)
	if resp, err := groupTables(mc, time.Second); err == nil {
		t.Fatalf("GroupTables without --table-groups: %v, want refused", resp)
	}
	withTableGroups(t, c, mc)
	attached := groupAll(t, mc)
	if len(attached) < len(names) {
		t.Fatalf("attached %v, want every one of %d tables", attached, len(names))
	}
	spans := checkAttached(t, c, mc, names)
	for _, n := range names {
		t.Logf("table %s: range %d, a span of group %d at generation %d", n, spans[n].GetRangeId(), rangegroup.GroupOf(spans[n]), spans[n].GetGeneration())
	}
	for _, n := range names {
		w := works[n]
		after := w.Written.Load()
		clustertest.WaitFor(t, 30*time.Second, "writes acknowledged after the attach to "+n, func() bool { return w.Written.Load() >= after+20 })
	}
	acked := map[string]map[string]int64{}
	for _, n := range names {
		acked[n] = works[n].Halt()
		t.Logf("table %s: %d writes acknowledged, %d failed, longest gap %v", n, len(acked[n]), works[n].Failed.Load(), time.Duration(works[n].MaxGap.Load()))
		clustertest.VerifyExactlyOnce(t, clients[n], acked[n])
	}
	writeEach(t, clients, "afterattach")
	// A restarted server serves them from the group's state.
	i := c.ServerIndex(spans[names[0]].GetReplicas()[0].GetServerId())
	if err := c.StopServer(i); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartServer(i); err != nil {
		t.Fatal(err)
	}
	checkAttached(t, c, mc, names)
	for _, n := range names {
		clustertest.VerifyExactlyOnce(t, clients[n], acked[n])
	}
	writeEach(t, clients, "afterrestart")
	if resp, err := groupTables(mc, time.Second); err != nil || len(resp.GetAttachedRangeIds())+len(resp.GetRemainingRangeIds()) != 0 {
		t.Fatalf("GroupTables again: %v %v, want nothing to do", resp, err)
	}
}

// TestGroupTablesAttachCrashes stops an attach at each of its steps (a
// failpoint fails the step as if its process died there), stops the
// master (and for the partition server's step, the group's leader) and
// restarts it: the table is never left frozen nor in two groups, the
// attach finishes or is aborted and done again by GroupTables, and every
// acknowledged write reads back exactly once.
func TestGroupTablesAttachCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	for _, tc := range []struct {
		point     string
		killLeadr bool
		// also is a failpoint armed beside point until the master
		// stops: with partitionserver/attach-span/before-propose the
		// group refuses every AttachSpan, so a COMMIT recorded before
		// the stop is left to the restarted master (the stopped one's
		// resumeMerges would otherwise finish it first).
		also string
		// frozen: the range is frozen, not in the anchor group, when
		// the master stops (checked).
		frozen bool
	}{
		{"master/attach/after-colocate", false, "", false},
		{"master/attach/before-freeze", false, "", false},
		{"master/attach/after-freeze", false, "", false},
		{"master/attach/after-decision", false, "partitionserver/attach-span/before-propose", true},
		{"master/attach/after-attach", false, "", false},
		{"partitionserver/attach-span/after-apply", true, "", false},
	} {
		t.Run(tc.point, func(t *testing.T) {
			names := []string{"crash"}
			c, mc, clients, works := startOwnGroups(t, names)
			anchor := withTableGroups(t, c, mc)
			var fired atomic.Bool
			failpoint.Enable(tc.point, func() error {
				fired.Store(true)
				return failpoint.ErrInjected
			})
			t.Cleanup(func() { failpoint.Disable(tc.point) })
			if tc.also != "" {
				failpoint.Enable(tc.also, nil)
				t.Cleanup(func() { failpoint.Disable(tc.also) })
			}
			// Asked until the attach reached the point (right after the
			// master's restart, a server may not have reported to it yet).
			clustertest.WaitFor(t, 30*time.Second, "failpoint "+tc.point+" fired", func() bool {
				resp, err := groupTables(mc, 2*time.Second)
				t.Logf("GroupTables through %s: %v, %v", tc.point, resp, err)
				return fired.Load()
			})
			m := clustertest.PartitionMap(t, mc)
			leader := m.GetLeaders()[anchor]
			d := spanOf(m, "crash")
			t.Logf("at the stop: range %v", d)
			if tc.frozen && (d == nil || rangegroup.GroupOf(d) != d.GetRangeId()) {
				t.Fatalf("range %v at the stop, want still a group of its own, frozen, its COMMIT not carried out", d)
			}
			if err := c.StopMaster(0); err != nil {
				t.Fatal(err)
			}
			failpoint.Disable(tc.point)
			if tc.also != "" {
				failpoint.Disable(tc.also)
			}
			if tc.killLeadr && leader != "" {
				i := c.ServerIndex(leader)
				if err := c.StopServer(i); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second) // its followers elect
				if err := c.RestartServer(i); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.RestartMaster(0); err != nil {
				t.Fatal(err)
			}
			// Finished, or aborted and unfrozen: writes go on.
			w := works["crash"]
			after := w.Written.Load()
			clustertest.WaitFor(t, 60*time.Second, "writes acknowledged after the restart", func() bool { return w.Written.Load() >= after+20 })
			groupAll(t, mc)
			checkAttached(t, c, mc, names)
			after = w.Written.Load()
			clustertest.WaitFor(t, 30*time.Second, "writes acknowledged after the attach", func() bool { return w.Written.Load() >= after+20 })
			acked := w.Halt()
			clustertest.VerifyExactlyOnce(t, clients["crash"], acked)
			writeEach(t, clients, "aftercrash")
		})
	}
}

// TestColdTableAttachedByPolicy: with --table-groups and the policies on,
// the scheduler's attach-cold takes a table that is one cold range in a
// Raft group of its own into an anchor group by itself (no operator), the
// writes under way reading back exactly once, and the master's event log
// names the rule.
func TestColdTableAttachedByPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	names := []string{"cold0", "cold1"}
	c, mc, clients, works := startOwnGroups(t, names)
	if err := c.StopMaster(0); err != nil {
		t.Fatal(err)
	}
	c.Masters[0].Config.TableGroups = true
	c.Masters[0].Config.Policy.Enabled = true
	c.Masters[0].Config.Policy.MergeCooldown = 2 * time.Second
	if err := c.RestartMaster(0); err != nil {
		t.Fatal(err)
	}
	clustertest.WaitFor(t, 90*time.Second, "attach-cold taking both tables into anchor groups", func() bool {
		m := clustertest.PartitionMap(t, mc)
		for _, n := range names {
			d := spanOf(m, n)
			if d == nil || rangegroup.GroupOf(d) == d.GetRangeId() {
				return false
			}
		}
		return true
	})
	checkAttached(t, c, mc, names)
	// Polled: the master records the event just after the map update the
	// wait above saw (one run of make test read the events between the two).
	joined := 0
	clustertest.WaitFor(t, 10*time.Second, "a group-join event naming attach-cold for each table", func() bool {
		joined = 0
		for _, e := range clustertest.MasterEvents(mc) {
			if e.GetKind() == pb.EventKind_EVENT_KIND_GROUP_JOIN && strings.Contains(e.GetMessage(), "[attach-cold]") {
				joined++
			}
		}
		return joined >= len(names)
	})
	for _, n := range names {
		w := works[n]
		after := w.Written.Load()
		clustertest.WaitFor(t, 30*time.Second, "writes acknowledged after the attach to "+n, func() bool { return w.Written.Load() >= after+10 })
		acked := w.Halt()
		t.Logf("table %s: %d writes acknowledged, longest gap %v", n, len(acked), time.Duration(w.MaxGap.Load()))
		clustertest.VerifyExactlyOnce(t, clients[n], acked)
	}
}

// TestAttachFailedAfterDetachUnfrozen: a span of an anchor group that an
// operator took out (a leadership transfer of the span alone: a detach
// into a Raft group of its own, a new log) and whose attach then failed
// right after its freeze is unfrozen by the same master (resumeMerges:
// resumeAlone decides ABORT), and GroupTables attaches it after. The
// freeze is an entry of the new log, at an index far below the shared
// group's, which the master had seen the range at. Fails without the
// descriptor generation in the reports' freeze accounts
// (reports.freezeGen): the master took the freeze for a stale report
// and never resumed it, and the table refused writes until the next
// master.
func TestAttachFailedAfterDetachUnfrozen(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := clustertest.StartTunedOpts(t, 3, func(m *master.Config) {
		m.Policy.Enabled = false
		m.Policy.SplitLoad = 1e9
		m.Policy.MergeLoad = 1e6
	}, nil, true)
	mc := clustertest.MasterClient(t, c)
	sc := clustertest.ServiceClient(t, c, 0)
	anchor := anchorTakingTables(t, c, mc)
	clients, spans := tablesInAnchor(t, c, mc, sc, anchor, []string{"hop"})
	w := clustertest.StartWorkload(t, clients["hop"], 2, clustertest.SpreadKeys)
	// The shared group's log well past where the new one will freeze,
	// and reported at that to the master (heartbeats every 200 ms).
	clustertest.WaitFor(t, 60*time.Second, "writes acknowledged in the shared group", func() bool { return w.Written.Load() >= 150 })
	time.Sleep(time.Second)
	id := spans["hop"].GetRangeId()
	m := clustertest.PartitionMap(t, mc)
	var to string
	for _, r := range spans["hop"].GetReplicas() {
		if r.GetServerId() != m.GetLeaders()[id] {
			to = r.GetServerId()
		}
	}
	ctx := clustertest.Context(t, time.Minute)
	if err := mc.Call(ctx, func(ctx context.Context, mcl pb.MasterServiceClient) error {
		_, err := mcl.TransferLeader(ctx, &pb.MasterTransferLeaderRequest{RangeId: id, ToServerId: to})
		return err
	}); err != nil {
		t.Fatalf("transfer the span's leadership to %s: %v", to, err)
	}
	if d := spanOf(clustertest.PartitionMap(t, mc), "hop"); d == nil || rangegroup.GroupOf(d) != id {
		t.Fatalf("after the transfer: %v, want a group of its own", d)
	}
	after := w.Written.Load()
	clustertest.WaitFor(t, 30*time.Second, "writes acknowledged in the range's own group", func() bool { return w.Written.Load() >= after+20 })
	// Every attempt fails after its freeze (GroupTables retries a range
	// within its call) until the failpoint is off; then nothing but the
	// master's own recovery may unfreeze the range.
	var fired atomic.Bool
	failpoint.Enable("master/attach/after-freeze", func() error {
		fired.Store(true)
		return failpoint.ErrInjected
	})
	t.Cleanup(func() { failpoint.Disable("master/attach/after-freeze") })
	resp, err := groupTables(mc, 2*time.Second)
	t.Logf("GroupTables: %v, %v", resp, err)
	failpoint.Disable("master/attach/after-freeze")
	if !fired.Load() || len(resp.GetAttachedRangeIds()) != 0 {
		t.Fatalf("GroupTables %v, failpoint fired %v; want the attach failed after its freeze", resp, fired.Load())
	}
	// The same master, no restart: the freeze is undone.
	after = w.Written.Load()
	clustertest.WaitFor(t, 30*time.Second, "writes acknowledged after the failed attach", func() bool { return w.Written.Load() >= after+20 })
	groupAll(t, mc)
	checkAttached(t, c, mc, []string{"hop"})
	after = w.Written.Load()
	clustertest.WaitFor(t, 30*time.Second, "writes acknowledged after the attach", func() bool { return w.Written.Load() >= after+20 })
	clustertest.VerifyExactlyOnce(t, clients["hop"], w.Halt())
}
