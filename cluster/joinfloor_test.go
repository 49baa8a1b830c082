package cluster_test

import (
	"context"
	"testing"
	"time"

	"tablestore/cluster/clustertest"
	"tablestore/partitionserver"
	pb "tablestore/proto/tablestorepb"
)

// dropToAny is a Raft fault hook that drops every request a server sends
// to any of the given Raft addresses.
type dropToAny map[string]bool

func (d dropToAny) Outgoing(peer string) (time.Duration, bool) { return 0, d[peer] }

// TestRecreatedMemberRefusesStaleMember replays chaos seed 243's loss: a
// member that missed a server's removal must not get the vote of that
// server's replica when a later move creates it again, empty.
//
// The range is on {L, S, X} with leader L and a spare server D. Move X -> D
// ({L, S, D}); S hears it. Then S is cut off from the others, and the
// range moves back D -> X: S still holds {L, S, D}, and D's replica is
// deleted. Writes are acknowledged by L and X. Then L and X stop reaching
// D too (so the real leader cannot hand D its snapshot), S and D reach
// each other, and a move X -> D creates D's replica again, empty. Before
// the join floor, S asked D for its vote, an empty member granted it, and
// S led a majority ({S, D}) of its stale configuration, beside the real
// range (in seed 243 it then overwrote the real leader's log with its own,
// losing the writes it had missed). With the floor, D refuses S: S's log is
// behind the leader's verified (term, commit index).
func TestRecreatedMemberRefusesStaleMember(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := clustertest.StartTuned(t, 4, clustertest.QuietPolicies, func(s *partitionserver.Config) { s.QuiesceAfter = 0 })
	sc := clustertest.ServiceClient(t, c, 0)
	mc := clustertest.MasterClient(t, c)
	acked := map[string]int64{}
	const table = "joinfloor"
	tcl := clustertest.NewTable(t, sc, table)
	clustertest.WriteSeq(t, tcl, acked, "before", 10)
	rng := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
	id := rng.GetRangeId()
	leader, _, spare := clustertest.RangeRoles(t, c, mc, rng)
	var stale, other string
	for _, r := range rng.GetReplicas() {
		switch sid := r.GetServerId(); {
		case sid == leader:
		case stale == "":
			stale = sid
		default:
			other = sid
		}
	}
	server := func(sid string) *partitionserver.Server { return c.Servers[c.ServerIndex(sid)].Server }
	raftAddr := func(sid string) string { return server(sid).RaftAddr() }
	ctx := clustertest.Context(t, 3*time.Minute)
	move := func(ctx context.Context, from, to string) error {
		return mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			_, err := m.Move(ctx, &pb.MoveRequest{RangeId: id, FromServerId: from, ToServerId: to})
			return err
		})
	}
	t.Logf("range %d: leader %s, stale-to-be %s, moved %s <-> %s", id, leader, stale, other, spare)

	// 1. X -> D, and S applies it: S's configuration is {L, S, D}.
	if err := move(ctx, other, spare); err != nil {
		t.Fatalf("move %s -> %s: %v", other, spare, err)
	}
	// Whoever leads now (a spurious election on a loaded machine may have
	// moved the leadership): its applied index includes the move.
	var target uint64
	clustertest.WaitFor(t, 30*time.Second, "a leader's applied index", func() bool {
		for _, sid := range []string{leader, stale, spare} {
			if st := clustertest.RangeInfo(server(sid), id); st.GetLeader() {
				target = st.GetAppliedIndex()
				return true
			}
		}
		return false
	})
	clustertest.WaitFor(t, 30*time.Second, stale+" applied the move", func() bool {
		return clustertest.RangeInfo(server(stale), id).GetAppliedIndex() >= target
	})

	// 2. S is cut off from the others' Raft traffic. (The fault hook
	// drops both a server's requests to a peer and the peer's requests to
	// it: S's own requests to L and X are lost too, and S's reach to D is
	// restored below. In seed 243 the cut was one-way; what matters is
	// that S misses the changes and can still reach D.)
	for _, s := range c.Servers {
		if s.Config.ID != stale {
			s.Server.SetRaftFault(dropToAny{raftAddr(stale): true})
		}
	}
	t.Cleanup(func() {
		for _, s := range c.Servers {
			s.Server.SetRaftFault(nil)
		}
	})

	// 3. D -> X: the range is {L, S, X}, S still holds {L, S, D}, and D's
	// replica is deleted.
	if err := move(ctx, spare, other); err != nil {
		t.Fatalf("move %s -> %s with %s cut off: %v", spare, other, stale, err)
	}
	clustertest.WaitFor(t, 30*time.Second, spare+"'s replica deleted", func() bool {
		return clustertest.RangeInfo(server(spare), id) == nil
	})
	// Acknowledged by L and X only: S never sees them.
	clustertest.WriteSeq(t, tcl, acked, "cut", 10)

	// 4. L and X stop reaching D (D cannot get the real leader's
	// snapshot), S and D reach each other, and a move X -> D creates D's
	// replica again. The
	// configuration change itself cannot commit (L reaches only X of
	// {L, S, X, D}); the move fails or waits, which does not matter here.
	for _, s := range c.Servers {
		switch sid := s.Config.ID; sid {
		case stale:
		case spare:
			s.Server.SetRaftFault(nil)
		default:
			s.Server.SetRaftFault(dropToAny{raftAddr(stale): true, raftAddr(spare): true})
		}
	}
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	moved := make(chan error, 1)
	go func() { moved <- move(mctx, other, spare) }()
	clustertest.WaitFor(t, 30*time.Second, spare+"'s replica created again", func() bool {
		return clustertest.RangeInfo(server(spare), id) != nil
	})
	// S campaigns every election timeout (about a second); before the
	// fix it led within two or three. Ten seconds is many elections. The
	// watch ends sooner once D has refused S eight requests below its
	// join floor (only S reaches D now, and each of S's elections sends
	// D a pre-vote, or a pre-vote and a vote): four elections or more
	// that D's vote would have won for S before the fix.
	const refusals = "tablestore_partitionserver_join_floor_refusals_total"
	refused := clustertest.MetricValue(t, refusals, nil)
	watch := time.Now().Add(10 * time.Second)
	for time.Now().Before(watch) && clustertest.MetricValue(t, refusals, nil)-refused < 8 {
		if resp, err := server(stale).Service().RangeInfo(context.Background(), &pb.RangeInfoRequest{RangeId: id}); err == nil && resp.GetStatus().GetLeader() {
			t.Fatalf("%s, which missed %s's removal, leads range %d with the vote of %s's re-created empty replica", stale, spare, id, spare)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("watched %s campaign for %v: %v requests refused below %s's join floor", stale, time.Since(watch.Add(-10*time.Second)).Round(time.Millisecond), clustertest.MetricValue(t, refusals, nil)-refused, spare)

	// 5. Heal: the move completes (again if it failed), D catches up by
	// snapshot, and every acknowledged write is there.
	for _, s := range c.Servers {
		s.Server.SetRaftFault(nil)
	}
	if err := <-moved; err != nil {
		t.Logf("move %s -> %s while cut: %v (retried)", other, spare, err)
		// The servers' reconcile may have settled the range differently
		// (another replica left for spare): any three replicas with
		// spare among them will do.
		clustertest.WaitFor(t, 60*time.Second, "the move once healed", func() bool {
			got := clustertest.TableRanges(clustertest.PartitionMap(t, mc), table)[0]
			if clustertest.HasServer(got, spare) && len(got.GetReplicas()) == 3 {
				return true
			}
			from := other
			if !clustertest.HasServer(got, other) {
				for _, r := range got.GetReplicas() {
					if sid := r.GetServerId(); sid != spare {
						from = sid
					}
				}
			}
			if err := move(ctx, from, spare); err != nil {
				t.Logf("move %s -> %s once healed: %v", from, spare, err)
			}
			return false
		})
	}
	clustertest.WriteSeq(t, tcl, acked, "after", 10)
	clustertest.VerifyExactlyOnce(t, tcl, acked)
}
