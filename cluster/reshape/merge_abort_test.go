package reshape

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/cluster/clustertest"
	"tablestore/internal/failpoint"
	"tablestore/internal/masterclient"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// TestMergeAbortedWhenAReplicaMissesTheFreeze: one server of the right
// range is cut off from every other server's Raft traffic (it still
// answers the master) just before the freeze (failpoint
// master/merge/before-freeze), after the master's pre-freeze checks and
// within the leader's heard-from window, so its replica never applies the
// freeze (chaos seed 202: a failing fsync there held the range's writes
// 4.9 s).
// The master records the merge as aborted after its bounded wait and
// unfreezes the range: the right half takes writes again at once, without
// the cut server, and the merge goes through once the cut heals, with
// every acknowledged write there exactly once.
func TestMergeAbortedWhenAReplicaMissesTheFreeze(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const table = "mergeabort"
	c, tcl, mc, acked, ctx, left, right := splitHalves(t, 3, table)
	// Cut a server that leads neither half (3 servers, RF 3: every server
	// holds a replica of both): the right half keeps a leader and a
	// follower, a majority.
	cut := -1
	pickCut := func() {
		clustertest.WaitFor(t, 10*time.Second, "both halves led", func() bool {
			l := clustertest.PartitionMap(t, mc).GetLeaders()
			ll, rl := l[left], l[right]
			for i, s := range c.Servers {
				if id := s.Server.ID(); ll != "" && rl != "" && id != ll && id != rl {
					cut = i
					return true
				}
			}
			return false
		})
	}
	heal := func() {
		for _, s := range c.Servers {
			s.Server.SetRaftFault(nil)
		}
	}
	defer heal()
	// The cut must reach the right half's leader within its heard-from
	// window before the freeze: a leader that already misses the cut
	// server (the range quiesced and had to wake, a loaded machine)
	// refuses the freeze, NOT_READY, and nothing is frozen; then heal,
	// let the group settle, and cut again.
	var start time.Time
	var err error
	for attempt := 1; ; attempt++ {
		pickCut()
		var once sync.Once
		failpoint.Enable("master/merge/before-freeze", func() error {
			once.Do(func() {
				for i, s := range c.Servers {
					if i == cut {
						s.Server.SetRaftFault(clustertest.DropAll{})
					} else {
						s.Server.SetRaftFault(clustertest.DropTo{Addr: c.Servers[cut].Server.RaftAddr()})
					}
				}
			})
			return nil
		})
		start = time.Now()
		err = mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			_, err := m.Merge(ctx, &pb.MergeRequest{RangeId: left})
			return err
		})
		failpoint.Disable("master/merge/before-freeze")
		if err == nil || clustertest.MergeAborted(err) || !strings.Contains(err.Error(), "not ready for the merge") || attempt == 5 {
			break
		}
		t.Logf("freeze refused before the cut took effect (attempt %d), healing and cutting again: %v", attempt, err)
		heal()
		// A write to both halves after the heal, applied everywhere: the
		// leaders have heard from the cut server again (its heartbeats
		// back off while cut), so the next cut starts within the window.
		clustertest.WriteSeq(t, tcl, acked, fmt.Sprintf("heal%d", attempt), 26)
		clustertest.WaitFor(t, 20*time.Second, "the cut server caught up on the right half", func() bool {
			var applied []uint64
			for _, s := range c.Servers {
				st := clustertest.RangeInfo(s.Server, right)
				if st == nil {
					return false
				}
				applied = append(applied, st.GetAppliedIndex())
			}
			return slices.Min(applied) == slices.Max(applied)
		})
	}
	aborted := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "merge aborted") {
		t.Fatalf("merge with ps%d cut off right before the freeze: %v, want an abort", cut+1, err)
	}
	t.Logf("merge aborted after %v: %v", aborted, err)
	// Unfrozen: the right half takes writes again (without the cut server).
	var firstWrite time.Duration
	clustertest.WaitFor(t, 20*time.Second, "a write to the right half after the abort", func() bool {
		body, _ := json.Marshal(map[string]any{"PartitionKey": "k20", "RowKey": "probe", "V": "1000000", "V@odata.type": "Edm.Int64"})
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := tcl.UpsertEntity(wctx, body, nil)
		if err == nil {
			firstWrite = time.Since(start)
		}
		return err == nil
	})
	t.Logf("right half writable %v after the merge began", firstWrite)
	if rs := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table); len(rs) != 2 {
		// Aborted means not merged: both halves stay in the map.
		t.Fatalf("after the abort: %s, want both halves", describe(rs))
	}
	clustertest.WriteSeq(t, tcl, acked, "during", 26)
	heal()
	clustertest.WaitFor(t, 60*time.Second, "the merge after the cut healed", func() bool {
		return clustertest.MergeDone(ctx, t, mc, table, left)
	})
	clustertest.WriteSeq(t, tcl, acked, "after", 26)
	acked["k20/probe"] = 1000000
	clustertest.VerifyExactlyOnce(t, tcl, acked)
}

// TestMoveOfFrozenRangeWaitsForUnfreeze: a range frozen for a merge takes
// no membership change until the merge ends, as CockroachDB's subsumed
// right-hand range refuses its replica changes. The merge gives the merged
// range a generation past the right range's, read from each server's
// replica of it once that replica holds the freeze; a membership record
// after the freeze, applied by some replicas before their server's merge
// and by others after, gave the merged range different generations (the
// fsm review). Here the merge is aborted (ABORT recorded) and the master
// stopped before the unfreeze: a move of the right range is refused while
// it is frozen, and goes through once the resume has unfrozen it. (Before,
// the move went through and left the moved-off replica frozen for good,
// which the master's delete had to name the aborted freeze to remove.)
func TestMoveOfFrozenRangeWaitsForUnfreeze(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const table = "abortmove"
	c, tcl, mc, acked, ctx, left, right := splitHalves(t, 4, table)
	clustertest.WaitFor(t, 10*time.Second, "both halves led", func() bool {
		l := clustertest.PartitionMap(t, mc).GetLeaders()
		return l[left] != "" && l[right] != ""
	})
	// Both halves on the same three servers (a split keeps them); the
	// replica to move is one that leads neither, the target the fourth.
	var from, to string
	for _, d := range clustertest.TableRanges(clustertest.PartitionMap(t, mc), table) {
		if d.GetRangeId() != right {
			continue
		}
		l := clustertest.PartitionMap(t, mc).GetLeaders()
		for _, s := range c.Servers {
			id := s.Server.ID()
			switch {
			case !clustertest.HasServer(d, id):
				to = id
			case id != l[left] && id != l[right]:
				from = id
			}
		}
	}
	if from == "" || to == "" {
		t.Fatalf("no replica to move off or no free server: %s", describe(clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)))
	}

	failpoint.Enable("master/merge/freeze-wait", nil) // a replica "short of the freeze": ABORT
	var fired atomic.Bool
	failpoint.Enable("master/merge/after-abort", func() error { // stop before the unfreeze
		fired.Store(true)
		return failpoint.ErrInjected
	})
	defer failpoint.Disable("master/merge/freeze-wait")
	defer failpoint.Disable("master/merge/after-abort")
	// A merge refused before the freeze (NOT_READY on a loaded machine)
	// never reaches the failpoint: ask again.
	for attempt := 1; !fired.Load(); attempt++ {
		_, err := clustertest.MergeRetrying(ctx, t, mc, left)
		if err == nil {
			t.Fatal("merge succeeded through master/merge/after-abort")
		}
		if !fired.Load() {
			if attempt == 5 {
				t.Fatalf("master/merge/after-abort never fired (the merge failed before it: %v)", err)
			}
			t.Logf("merge failed before master/merge/after-abort (attempt %d), asking again: %v", attempt, err)
		}
	}
	fromSrv := c.Servers[c.ServerIndex(from)].Server
	clustertest.WaitFor(t, 10*time.Second, "the freeze applied on "+from, func() bool {
		return clustertest.RangeInfo(fromSrv, right).GetFrozen()
	})
	move := func() error {
		return mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			_, err := m.Move(ctx, &pb.MoveRequest{RangeId: right, FromServerId: from, ToServerId: to})
			return err
		})
	}
	moved := func() bool {
		for _, d := range clustertest.TableRanges(clustertest.PartitionMap(t, mc), table) {
			if d.GetRangeId() == right {
				return clustertest.HasServer(d, to) && !clustertest.HasServer(d, from)
			}
		}
		return false
	}
	// While frozen: refused (a resume holding the range, stopped at the
	// failpoint, is answered busy: ask again until the frozen range
	// answers).
	clustertest.WaitFor(t, 30*time.Second, "the move of the frozen range refused as frozen", func() bool {
		err := move()
		if err == nil {
			t.Fatalf("the move of range %d went through while it was frozen", right)
		}
		t.Logf("move while frozen: %v", err)
		return strings.Contains(err.Error(), "frozen")
	})
	// The range's leader refuses too (a move of a master that does not
	// know the range is frozen): not ready, before its configuration
	// changes.
	rl := clustertest.PartitionMap(t, mc).GetLeaders()[right]
	if _, err := c.Servers[c.ServerIndex(rl)].Server.Service().ChangeReplicas(ctx, &pb.ChangeReplicasRequest{
		RangeId: right, AddServerId: to, AddMode: pb.AddMode_ADD_MODE_NONVOTER}); rpcerr.Parse(err).Reason != rpcerr.ReasonNotReady {
		t.Fatalf("ChangeReplicas on the frozen range's leader %s: %v, want NOT_READY", rl, err)
	}
	if moved() || !clustertest.RangeInfo(fromSrv, right).GetFrozen() {
		t.Fatalf("range %d after the refused move: %s, frozen on %s: %v", right, describe(clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)), from, clustertest.RangeInfo(fromSrv, right).GetFrozen())
	}
	// Let the resume unfreeze the range: the right half takes writes.
	failpoint.Disable("master/merge/after-abort")
	failpoint.Disable("master/merge/freeze-wait")
	clustertest.WaitFor(t, 30*time.Second, "a write to the right half after the unfreeze", func() bool {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := tcl.UpsertEntity(wctx, []byte(`{"PartitionKey":"k20","RowKey":"probe"}`), nil)
		return err == nil
	})
	clustertest.WaitFor(t, 60*time.Second, "the right range's replica moved from "+from+" to "+to+" after the unfreeze", func() bool {
		if err := move(); err != nil {
			t.Logf("move: %v", err)
		}
		return moved()
	})
	clustertest.WaitFor(t, 30*time.Second, "the moved-off replica deleted on "+from, func() bool {
		return fromSrv.ReplicaState(right) == "absent"
	})
	clustertest.WriteSeq(t, tcl, acked, "after", 26)
	if rs := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table); len(rs) != 2 {
		t.Fatalf("after an aborted merge: %s, want both halves", describe(rs))
	}
	clustertest.VerifyExactlyOnce(t, tcl, acked)
}

// TestStaleMergeRangeRefused: a MergeRange for a freeze whose merge was
// aborted and undone (what a master of an older build that lost the lead
// mid-merge could send during a rolling upgrade) is refused by the left
// range's leader before it proposes anything: proposed, every replica of
// the left range would stop in fsm applyMerge, and again on replay. Both
// halves then keep serving.
func TestStaleMergeRangeRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const table = "stalemerge"
	c, tcl, mc, acked, ctx, left, right := splitHalves(t, 3, table)

	failpoint.Enable("master/merge/freeze-wait", nil) // a replica "short of the freeze": ABORT
	err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Merge(ctx, &pb.MergeRequest{RangeId: left})
		return err
	})
	failpoint.Disable("master/merge/freeze-wait")
	if !clustertest.MergeAborted(err) {
		t.Fatalf("merge through master/merge/freeze-wait: %v, want an abort", err)
	}
	m := regexp.MustCompile(`freeze at (\d+)`).FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("no freeze index in %v", err)
	}
	freeze, _ := strconv.ParseUint(m[1], 10, 64)
	// Every replica of the right half past the unfreeze, the left half's
	// leader's among them.
	clustertest.WaitFor(t, 20*time.Second, "every replica of the right half unfrozen", func() bool {
		for _, s := range c.Servers {
			if st := clustertest.RangeInfo(s.Server, right); st == nil || st.GetFrozen() {
				return false
			}
		}
		return true
	})
	var rightDesc *pb.RangeDescriptor
	for _, d := range clustertest.TableRanges(clustertest.PartitionMap(t, mc), table) {
		if d.GetRangeId() == right {
			rightDesc = d
		}
	}
	var leader string
	clustertest.WaitFor(t, 10*time.Second, "the left half led", func() bool {
		leader = clustertest.PartitionMap(t, mc).GetLeaders()[left]
		return leader != ""
	})
	_, err = c.Servers[c.ServerIndex(leader)].Server.Service().MergeRange(ctx, &pb.MergeRangeRequest{
		RangeId: left, Right: rightDesc, RightFreezeIndex: freeze,
	})
	if rpcerr.Parse(err).Reason != rpcerr.ReasonNotReady {
		t.Fatalf("MergeRange for the aborted freeze %d on %s: %v, want NOT_READY", freeze, leader, err)
	}
	t.Logf("stale MergeRange refused: %v", err)
	clustertest.WriteSeq(t, tcl, acked, "after", 26)
	if rs := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table); len(rs) != 2 {
		t.Fatalf("after a refused MergeRange: %s, want both halves", describe(rs))
	}
	clustertest.VerifyExactlyOnce(t, tcl, acked)
}

// TestMergeAbortedAfterMasterRestartWithAServerDown: the master
// stops right after a merge's freeze (master/merge/after-freeze-proposed)
// and a server of the right range stops with it. The restarted master has
// never heard from that server, and used to refuse the abort for it
// ("does not apply unfreezes" was assumed of a server not heard from): the
// range stayed frozen until the server came back. Now only a server that
// said so refuses it: the resumed merge is aborted and the right half
// takes writes on its two live replicas.
func TestMergeAbortedAfterMasterRestartWithAServerDown(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const table = "abortdown"
	c, tcl, mc, acked, ctx, left, right := splitHalves(t, 3, table)

	var fired atomic.Bool
	failpoint.Enable("master/merge/after-freeze-proposed", func() error { // the master "dies" frozen, undecided
		fired.Store(true)
		return failpoint.ErrInjected
	})
	defer failpoint.Disable("master/merge/after-freeze-proposed")
	for attempt := 1; !fired.Load(); attempt++ {
		_, err := clustertest.MergeRetrying(ctx, t, mc, left)
		if err == nil {
			t.Fatal("merge succeeded through master/merge/after-freeze-proposed")
		}
		if !fired.Load() {
			if attempt == 5 {
				t.Fatalf("master/merge/after-freeze-proposed never fired (the merge failed before it: %v)", err)
			}
			t.Logf("merge failed before the freeze (attempt %d), asking again: %v", attempt, err)
		}
	}
	failpoint.Disable("master/merge/after-freeze-proposed")
	// Stop a server that leads neither half (each keeps a majority).
	down := -1
	l := clustertest.PartitionMap(t, mc).GetLeaders()
	for i, s := range c.Servers {
		if id := s.Server.ID(); id != l[left] && id != l[right] {
			down = i
			break
		}
	}
	if down < 0 {
		t.Fatalf("no server leads neither half: leaders %v", l)
	}
	if err := c.StopServer(down); err != nil {
		t.Fatal(err)
	}
	defer c.RestartServer(down)
	if err := c.StopMaster(0); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartMaster(0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	clustertest.WaitFor(t, 30*time.Second, "a write to the right half with ps"+strconv.Itoa(down+1)+" down", func() bool {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := tcl.UpsertEntity(wctx, []byte(`{"PartitionKey":"k20","RowKey":"probe"}`), nil)
		return err == nil
	})
	t.Logf("right half writable %v after the master restarted", time.Since(start))
	if rs := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table); len(rs) != 2 {
		t.Fatalf("after the resumed merge: %s, want both halves (aborted)", describe(rs))
	}
	clustertest.WriteSeq(t, tcl, acked, "after", 26)
	acked["k20/probe"] = 0
	clustertest.VerifyExactlyOnce(t, tcl, acked)
}

// splitHalves is the start the merge-abort tests share: a cluster of
// that many partition servers (policies quiet), table with 26 acknowledged
// writes, split at k13 into left and right.
func splitHalves(t *testing.T, servers int, table string) (c *cluster.Cluster, tcl *aztables.Client, mc *masterclient.Client, acked map[string]int64, ctx context.Context, left, right uint64) {
	t.Helper()
	c = clustertest.StartTuned(t, servers, clustertest.QuietPolicies, nil)
	tcl = clustertest.NewTable(t, clustertest.ServiceClient(t, c, 0), table)
	mc = clustertest.MasterClient(t, c)
	acked = map[string]int64{}
	clustertest.WriteSeq(t, tcl, acked, "before", 26)
	ctx = clustertest.Context(t, 3*time.Minute)
	split := clustertest.SplitRange(t, ctx, mc, table, "k13")
	return c, tcl, mc, acked, ctx, split.GetLeft().GetRangeId(), split.GetRight().GetRangeId()
}
