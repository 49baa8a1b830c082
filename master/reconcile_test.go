package master

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

func TestPlanReplicaFix(t *testing.T) {
	cases := []struct {
		name       string
		replicas   []string
		voters     []string
		nonvoters  []string
		leader     string
		down       []string
		broken     []string
		draining   []string
		counts     map[string]int
		servers    []string
		zones      map[string]string
		disks      map[string]scheduler.DiskState
		wantSync   bool
		wantRemove string
		wantAdd    string
		// wantNonvoter: the removal is of a non-voter.
		wantNonvoter bool
		// wantVerify: planned from the descriptor alone, the fix records
		// the Raft configuration first (replicaFix.verify).
		wantVerify bool
	}{
		{name: "in step", replicas: []string{"a", "b", "c"}, voters: []string{"c", "a", "b"}, leader: "a"},
		{name: "voters unknown, three replicas", replicas: []string{"a", "b", "c"}, leader: "a"},
		{name: "Raft configuration ahead of the descriptor", replicas: []string{"a", "b", "c"}, voters: []string{"a", "b", "c", "d"}, leader: "a", wantSync: true},
		{name: "removal not recorded", replicas: []string{"a", "b", "c"}, voters: []string{"a", "b", "d"}, leader: "a", wantSync: true},
		{name: "move interrupted after the add: busiest server's replica goes", replicas: []string{"a", "b", "c", "d"}, voters: []string{"a", "b", "c", "d"}, leader: "a",
			counts: map[string]int{"a": 5, "b": 9, "c": 4, "d": 1}, wantRemove: "b"},
		{name: "never the leader", replicas: []string{"a", "b", "c", "d"}, leader: "b",
			counts: map[string]int{"a": 5, "b": 9, "c": 4, "d": 1}, wantRemove: "a", wantVerify: true},
		{name: "a down server's replica first (re-replication)", replicas: []string{"a", "b", "c", "d"}, leader: "a", down: []string{"c"},
			counts: map[string]int{"a": 5, "b": 9, "c": 4, "d": 1}, wantRemove: "c", wantVerify: true},
		{name: "a broken replica first, like a down server's (an interrupted replacement)", replicas: []string{"a", "b", "c", "d"}, voters: []string{"a", "b", "c", "d"}, leader: "a", broken: []string{"d"},
			counts: map[string]int{"a": 5, "b": 9, "c": 4, "d": 1}, wantRemove: "d"},
		{name: "then a draining server's", replicas: []string{"a", "b", "c", "d"}, leader: "a", draining: []string{"d"},
			counts: map[string]int{"a": 5, "b": 9, "c": 4, "d": 1}, wantRemove: "d", wantVerify: true},
		{name: "ties: the greater id", replicas: []string{"a", "b", "c", "d"}, leader: "a", wantRemove: "d", wantVerify: true},
		{name: "no leader known: wait", replicas: []string{"a", "b", "c", "d"}},
		{name: "under-replicated: the live server with the fewest replicas gets a voter", replicas: []string{"a", "b"}, voters: []string{"a", "b"}, leader: "a",
			servers: []string{"a", "b", "c", "d", "e"}, counts: map[string]int{"a": 5, "b": 5, "c": 7, "d": 2, "e": 3}, wantAdd: "d"},
		{name: "under-replicated: never a down or draining server", replicas: []string{"a", "b"}, voters: []string{"a", "b"}, leader: "a",
			servers: []string{"a", "b", "c", "d", "e"}, down: []string{"d"}, draining: []string{"e"}, counts: map[string]int{"c": 7, "d": 2, "e": 3}, wantAdd: "c"},
		{name: "under-replicated: ties go to the smaller id", replicas: []string{"b"}, leader: "b", servers: []string{"d", "c", "b"}, wantAdd: "c", wantVerify: true},
		{name: "under-replicated, no server to add: nothing", replicas: []string{"a", "b"}, leader: "a", servers: []string{"a", "b", "c"}, down: []string{"c"}},
		{name: "under-replicated, descriptor behind the Raft configuration: sync first", replicas: []string{"a", "b"}, voters: []string{"a", "b", "c"}, leader: "a",
			servers: []string{"a", "b", "c", "d"}, wantSync: true},
		{name: "under-replicated, no leader known: wait", replicas: []string{"a", "b"}, servers: []string{"a", "b", "c"}},
		{name: "a non-voter an interrupted move left goes", replicas: []string{"a", "b", "c"}, voters: []string{"a", "b", "c"}, nonvoters: []string{"d"}, leader: "a",
			wantRemove: "d", wantNonvoter: true},
		{name: "a non-voter goes before a fourth voter", replicas: []string{"a", "b", "c", "d"}, voters: []string{"a", "b", "c", "d"}, nonvoters: []string{"e"}, leader: "a",
			counts: map[string]int{"a": 5, "b": 9, "c": 4, "d": 1}, wantRemove: "e", wantNonvoter: true},
		{name: "a non-voter goes before an add", replicas: []string{"a", "b"}, voters: []string{"a", "b"}, nonvoters: []string{"d"}, leader: "a",
			servers: []string{"a", "b", "c", "d"}, wantRemove: "d", wantNonvoter: true},
		{name: "a non-voter, descriptor behind the Raft configuration: sync first", replicas: []string{"a", "b", "c"}, voters: []string{"a", "b", "d"}, nonvoters: []string{"c"}, leader: "a",
			wantSync: true},
		{name: "a non-voter, no leader known: wait", replicas: []string{"a", "b", "c"}, nonvoters: []string{"d"}},
		{name: "zones: a replica in a shared zone goes before the busiest server's", replicas: []string{"a", "b", "c", "d"}, voters: []string{"a", "b", "c", "d"}, leader: "a",
			counts: map[string]int{"a": 5, "b": 9, "c": 4, "d": 1}, zones: map[string]string{"a": "A", "b": "B", "c": "C", "d": "A"}, wantRemove: "d"},
		{name: "zones: a down server's replica still first", replicas: []string{"a", "b", "c", "d"}, voters: []string{"a", "b", "c", "d"}, leader: "a", down: []string{"b"},
			counts: map[string]int{"a": 5, "b": 9, "c": 4, "d": 1}, zones: map[string]string{"a": "A", "b": "B", "c": "C", "d": "A"}, wantRemove: "b"},
		{name: "zones: unnamed zones share nothing", replicas: []string{"a", "b", "c", "d"}, voters: []string{"a", "b", "c", "d"}, leader: "a",
			counts: map[string]int{"a": 5, "b": 4, "c": 9, "d": 1}, zones: map[string]string{"a": "", "b": "", "c": "C", "d": ""}, wantRemove: "c"},
		{name: "zones: the add goes to a zone the range lacks", replicas: []string{"a", "b"}, voters: []string{"a", "b"}, leader: "a",
			servers: []string{"a", "b", "c", "d", "e"}, counts: map[string]int{"a": 5, "b": 5, "c": 7, "d": 2, "e": 3},
			zones: map[string]string{"a": "A", "b": "B", "c": "C", "d": "A", "e": "B"}, wantAdd: "c"},
		{name: "zones: none lacking, the fewest replicas", replicas: []string{"a", "b"}, voters: []string{"a", "b"}, leader: "a",
			servers: []string{"a", "b", "d", "e"}, counts: map[string]int{"a": 5, "b": 5, "d": 2, "e": 3},
			zones: map[string]string{"a": "A", "b": "B", "d": "A", "e": "B"}, wantAdd: "d"},
		{name: "disks: never a full server, a low one after those with room", replicas: []string{"a", "b"}, voters: []string{"a", "b"}, leader: "a",
			servers: []string{"a", "b", "c", "d", "e"}, counts: map[string]int{"a": 5, "b": 5, "c": 1, "d": 2, "e": 9},
			zones: map[string]string{"a": "A", "b": "B", "c": "C", "d": "C", "e": "A"},
			disks: map[string]scheduler.DiskState{"c": scheduler.DiskFull, "d": scheduler.DiskLow}, wantAdd: "e"},
		{name: "disks: a low server when none has room", replicas: []string{"a", "b"}, voters: []string{"a", "b"}, leader: "a",
			servers: []string{"a", "b", "c", "d"}, counts: map[string]int{"a": 5, "b": 5, "c": 1, "d": 2},
			disks: map[string]scheduler.DiskState{"c": scheduler.DiskFull, "d": scheduler.DiskLow}, wantAdd: "d"},
	}
	set := func(ids []string) map[string]bool {
		m := map[string]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := planReplicaFix(replicaCheck{factor: 3, replicas: c.replicas, voters: c.voters, nonvoters: c.nonvoters, leader: c.leader,
				down: set(c.down), broken: set(c.broken), draining: set(c.draining), counts: c.counts, servers: c.servers, zones: c.zones, disks: c.disks})
			if got.sync != c.wantSync || got.remove != c.wantRemove || got.add != c.wantAdd || got.nonvoter != c.wantNonvoter || got.verify != c.wantVerify {
				t.Fatalf("fix %+v, want sync %v remove %q (non-voter %v) add %q verify %v", got, c.wantSync, c.wantRemove, c.wantNonvoter, c.wantAdd, c.wantVerify)
			}
			if !got.none() && got.reason == "" {
				t.Fatal("a fix without a reason")
			}
		})
	}
}

// TestReplanSynced: a fix planned from the descriptor alone is planned
// again from the Raft configuration recorded first. The descriptor can be
// behind the configuration (a change whose record a master failover cut
// off); acting on it could add a server that is a voter already (and a
// failed add deletes that replica unguarded, undoAdd) or remove a voter
// from a configuration at the replication factor.
func TestReplanSynced(t *testing.T) {
	desc := func(ids ...string) *pb.RangeDescriptor {
		d := &pb.RangeDescriptor{RangeId: 7, Generation: 4}
		for _, id := range ids {
			d.Replicas = append(d.Replicas, &pb.Replica{ServerId: id})
		}
		return d
	}
	cases := []struct {
		name       string
		replicas   []string
		synced     *pb.RangeDescriptor
		counts     map[string]int
		wantAdd    string
		wantRemove string
	}{
		{name: "the promotion of c was not recorded: nothing to add", replicas: []string{"a", "b"}, synced: desc("a", "b", "c")},
		{name: "under-replicated indeed: the add stands", replicas: []string{"a", "b"}, synced: desc("a", "b"), wantAdd: "c"},
		{name: "the removal of d was not recorded: nothing to remove", replicas: []string{"a", "b", "c", "d"}, synced: desc("a", "b", "c")},
		{name: "a voter too many indeed: the removal stands", replicas: []string{"a", "b", "c", "d"}, synced: desc("a", "b", "c", "d"),
			counts: map[string]int{"b": 9}, wantRemove: "b"},
		{name: "more behind: the configuration decides", replicas: []string{"a", "b", "c", "d"}, synced: desc("a", "b"), wantAdd: "c"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			check := replicaCheck{factor: 3, replicas: c.replicas, leader: "a", down: map[string]bool{}, draining: map[string]bool{},
				counts: c.counts, servers: []string{"a", "b", "c", "d", "e"}}
			if first := planReplicaFix(check); first.none() || !first.verify {
				t.Fatalf("first plan %+v: want a fix to verify", first)
			}
			got := replanSynced(check, c.synced)
			if got.sync || got.verify || got.nonvoter || got.add != c.wantAdd || got.remove != c.wantRemove {
				t.Fatalf("replanned %+v, want add %q remove %q", got, c.wantAdd, c.wantRemove)
			}
		})
	}
}

// TestNewTermRestartsGrace: a master that lost the lead and regained it
// between two policy ticks starts every range's grace anew (an interim
// leader's operation may be finishing); in the same term it keeps them.
func TestNewTermRestartsGrace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	pending := map[uint64]time.Time{7: t0}
	last := checkInputs{catalog: 3, reports: 9, at: t0}
	term := newTerm(pending, &last, 4, 4)
	if term != 4 || len(pending) != 1 || last.at.IsZero() {
		t.Fatalf("same term: term %d, pending %v, last %+v: want all kept", term, pending, last)
	}
	term = newTerm(pending, &last, term, 6)
	if term != 6 || len(pending) != 0 || !last.at.IsZero() {
		t.Fatalf("new term: term %d, pending %v, last %+v: want both cleared", term, pending, last)
	}
}

// TestRecoverGroupClaimsTheGroup: a replica-set fix of one span of a Raft
// group claims every span of it, so a fix of a sibling, which reports the
// same difference, does not run at once (review, session 32: two spans'
// fixes could each add a server for one dead); a range of another group
// is not held up.
func TestRecoverGroupClaimsTheGroup(t *testing.T) {
	s, _ := raceMaster(t)
	reps := []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}
	mustApply(t, s, pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "T1", Replicas: reps})
	mustApply(t, s, pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: "T2", Replicas: reps})
	t1 := tableRangesOf(t, s, "T1")
	t2 := tableRangesOf(t, s, "T2")
	left := proto.Clone(t1[0]).(*pb.RangeDescriptor)
	left.End, left.Generation = "m", 2
	right := proto.Clone(t1[0]).(*pb.RangeDescriptor)
	right.RangeId, right.Start, right.Generation, right.GroupId = 99, "m", 2, t1[0].GetRangeId()
	mustApply(t, s, pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: []*pb.RangeDescriptor{left, right}})

	release := make(chan struct{})
	running := make(chan struct{})
	if !s.recoverGroup(99, func(context.Context) error { close(running); <-release; return nil }) {
		t.Fatal("the first fix did not start")
	}
	<-running
	if s.recoverGroup(left.GetRangeId(), func(context.Context) error { return nil }) {
		t.Errorf("a fix of range %d started while one of range 99, a span of its group, runs", left.GetRangeId())
	}
	other := make(chan struct{})
	if !s.recoverGroup(t2[0].GetRangeId(), func(context.Context) error { close(other); return nil }) {
		t.Errorf("a fix of range %d, another group's, did not start", t2[0].GetRangeId())
	} else {
		<-other
	}
	close(release)
	waitUntil(t, 10*time.Second, "the group's claim released", func() bool {
		return s.recoverGroup(left.GetRangeId(), func(context.Context) error { return nil })
	})
}

// tableRangesOf is table name's ranges in s's map.
func tableRangesOf(t *testing.T, s *Server, name string) []*pb.RangeDescriptor {
	t.Helper()
	var out []*pb.RangeDescriptor
	s.fsm.read(func(st *state) {
		for _, d := range st.ranges {
			if d.GetTable() == name {
				out = append(out, proto.Clone(d).(*pb.RangeDescriptor))
			}
		}
	})
	if len(out) == 0 {
		t.Fatalf("no range of table %s", name)
	}
	return out
}
