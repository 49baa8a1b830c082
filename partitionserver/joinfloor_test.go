package partitionserver

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/partitionserver/grouptransport"
	"tablestore/partitionserver/raftlog"
	pb "tablestore/proto/tablestorepb"
)

func TestFloorRefusal(t *testing.T) {
	floor := joinFloor{term: 5, index: 40}
	vote := func(lastTerm, lastIndex uint64) *raft.RequestVoteRequest {
		return &raft.RequestVoteRequest{Term: 9, LastLogTerm: lastTerm, LastLogIndex: lastIndex}
	}
	preVote := func(lastTerm, lastIndex uint64) *raft.RequestPreVoteRequest {
		return &raft.RequestPreVoteRequest{Term: 9, LastLogTerm: lastTerm, LastLogIndex: lastIndex}
	}
	tests := []struct {
		name   string
		floor  joinFloor
		msg    any
		refuse bool
	}{
		{name: "no floor: an empty log's candidate", floor: joinFloor{}, msg: vote(0, 0)},
		{name: "no floor: a stale leader", floor: joinFloor{}, msg: &raft.AppendEntriesRequest{Term: 1}},
		{name: "vote: log at the floor", floor: floor, msg: vote(5, 40)},
		{name: "vote: log past the floor in its term", floor: floor, msg: vote(5, 41)},
		{name: "vote: later last term, shorter log", floor: floor, msg: vote(6, 10)},
		{name: "vote: the floor's term, short of its index (missed the removal)", floor: floor, msg: vote(5, 39), refuse: true},
		{name: "vote: older last term, longer log", floor: floor, msg: vote(4, 90), refuse: true},
		{name: "pre-vote: at the floor", floor: floor, msg: preVote(5, 40)},
		{name: "pre-vote: behind the floor", floor: floor, msg: preVote(4, 90), refuse: true},
		{name: "append: the floor's term", floor: floor, msg: &raft.AppendEntriesRequest{Term: 5}},
		{name: "append: a later term", floor: floor, msg: &raft.AppendEntriesRequest{Term: 7}},
		{name: "append: a stale leader's heartbeat", floor: floor, msg: &raft.AppendEntriesRequest{Term: 4}, refuse: true},
		{name: "append: a stale leader's entries", floor: floor, msg: &raft.AppendEntriesRequest{Term: 4, Entries: []*raft.Log{{Index: 41, Term: 4}}}, refuse: true},
		{name: "snapshot: the floor's term", floor: floor, msg: &raft.InstallSnapshotRequest{Term: 5}},
		{name: "snapshot: a stale leader's", floor: floor, msg: &raft.InstallSnapshotRequest{Term: 3}, refuse: true},
		{name: "timeout-now carries no term", floor: floor, msg: &raft.TimeoutNowRequest{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := floorRefusal(tc.floor, tc.msg)
			if (resp != nil) != tc.refuse {
				t.Fatalf("refused = %v (%#v), want %v", resp != nil, resp, tc.refuse)
			}
			if resp == nil {
				return
			}
			// The answer carries the floor's term: hashicorp steps a
			// leader down on a newer term in an answer (replicateTo,
			// sendLatestSnapshot) and makes a candidate of an older term
			// fall back; it never grants or succeeds.
			switch r := resp.(type) {
			case *raft.RequestVoteResponse:
				if r.Granted || r.Term != tc.floor.term {
					t.Fatalf("vote answer %#v", r)
				}
			case *raft.RequestPreVoteResponse:
				if r.Granted || r.Term != tc.floor.term {
					t.Fatalf("pre-vote answer %#v", r)
				}
			case *raft.AppendEntriesResponse:
				if r.Success || r.Term != tc.floor.term {
					t.Fatalf("append answer %#v", r)
				}
			case *raft.InstallSnapshotResponse:
				if r.Success || r.Term != tc.floor.term {
					t.Fatalf("snapshot answer %#v", r)
				}
			default:
				t.Fatalf("answer of type %T to %T", resp, tc.msg)
			}
		})
	}
}

// The floor is kept in the group's stable keys: it survives a restart of
// the server's shared log, only ever rises, and goes with the group.
func TestJoinFloorStored(t *testing.T) {
	dir := t.TempDir()
	store, err := raftlog.Open(dir, raftlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logs := store.Log(7)
	steps := []struct {
		raise, want joinFloor
	}{
		{raise: joinFloor{}, want: joinFloor{}},
		{raise: joinFloor{3, 10}, want: joinFloor{3, 10}},
		{raise: joinFloor{2, 50}, want: joinFloor{3, 10}}, // behind: kept
		{raise: joinFloor{3, 12}, want: joinFloor{3, 12}},
		{raise: joinFloor{}, want: joinFloor{3, 12}}, // a reopen names none
	}
	for i, s := range steps {
		got, err := raiseFloor(logs, s.raise)
		if err != nil || got != s.want {
			t.Fatalf("step %d: raise %v: %v, %v; want %v", i, s.raise, got, err, s.want)
		}
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	store, err = raftlog.Open(dir, raftlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if got, err := storedFloor(store.Log(7)); err != nil || got != (joinFloor{3, 12}) {
		t.Fatalf("after a reopen: %v, %v; want {3 12}", got, err)
	}
	if err := store.Log(7).Drop(); err != nil {
		t.Fatal(err)
	}
	if got, err := storedFloor(store.Log(7)); err != nil || got.set() {
		t.Fatalf("after the group was dropped: %v, %v; want none", got, err)
	}
}

func newTestTransport(t *testing.T) *grouptransport.Transport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := grouptransport.New(grouptransport.Config{Listener: ln, Timeout: 5 * time.Second})
	t.Cleanup(func() { tr.Close() })
	return tr
}

// A refused snapshot reaches its sender as the refusal, not as a failed
// RPC: the snapshot streams after its request and the sender reads the
// answer only once it has written it all, so the gate's answer waits until
// the stream is read. Answered unread, a snapshot larger than the socket
// buffers failed to send, and a stale leader retried it forever instead of
// stepping down on the answer's term.
func TestRefusedSnapshotAnswered(t *testing.T) {
	st, rt := newTestTransport(t), newTestTransport(t)
	sg, err := st.Group(3, nil)
	if err != nil {
		t.Fatal(err)
	}
	rg, err := rt.Group(3, nil)
	if err != nil {
		t.Fatal(err)
	}
	rg.SetGate(memberGate(joinFloor{term: 9, index: 100}, nil))
	data := bytes.Repeat([]byte("snapshot"), 4<<20) // 32 MiB
	req := &raft.InstallSnapshotRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax},
		SnapshotVersion: raft.SnapshotVersionMax, Term: 4, LastLogIndex: 90, LastLogTerm: 4, Size: int64(len(data))}
	var resp raft.InstallSnapshotResponse
	if err := sg.InstallSnapshot("r", raft.ServerAddress(rt.Addr().String()), req, &resp, bytes.NewReader(data)); err != nil {
		t.Fatalf("refused snapshot: %v, want the refusal as an answer", err)
	}
	if resp.Success || resp.Term != 9 {
		t.Fatalf("answer %#v, want a refusal at the floor's term 9", resp)
	}
}

// A leader of a term below a member's floor, which the member's group
// already counts (a member that missed the removal of the server, as in
// seed 243), steps down when it first replicates to the floored member,
// and the member takes nothing from it.
func TestStaleLeaderStepsDownAtFloor(t *testing.T) {
	config := func(id string) *raft.Config { return testRaftConfig(id, 200*time.Millisecond, 0, 0) }
	const group = 11
	lt, jt := newTestTransport(t), newTestTransport(t)
	lg, err := lt.Group(group, nil)
	if err != nil {
		t.Fatal(err)
	}
	leader, _, _ := startTestLeader(t, config("stale"), lg)
	for range 5 {
		if err := leader.Apply([]byte("x"), 5*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	term := leader.CurrentTerm()

	jg, err := jt.Group(group, nil)
	if err != nil {
		t.Fatal(err)
	}
	jlogs, jsnaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	jg.SetGate(memberGate(joinFloor{term: term + 5, index: 100}, nil))
	jfsm := &countFSM{}
	joiner, err := raft.NewRaft(config("joiner"), jfsm, jlogs, jlogs, jsnaps, jg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { joiner.Shutdown().Error() })
	// A non-voter: the stale leader keeps its one-member quorum, so only
	// the floor's answer can make it step down.
	// Its future may report the step-down itself (ErrLeadershipLost) when
	// the leader loop handles the floor's answer first.
	if err := leader.AddNonvoter("joiner", raft.ServerAddress(jt.Addr().String()), 0, 5*time.Second).Error(); err != nil && !errors.Is(err, raft.ErrLeadershipLost) {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for leader.State() == raft.Leader && leader.CurrentTerm() == term {
		if time.Now().After(deadline) {
			t.Fatalf("the leader of term %d still leads 20 s after replicating to a member with floor term %d", term, term+5)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := jfsm.n.Load(); n != 0 {
		t.Fatalf("the floored member applied %d entries of the stale leader", n)
	}
	if last, err := jlogs.LastIndex(); err != nil || last != 0 {
		t.Fatalf("the floored member's log: last index %d, %v; want empty", last, err)
	}
}

// A move's CreateReplica names the range as it is, without this server: a
// replica still here at an older generation is the one an earlier move
// removed (its delete not run yet), which createReplica deletes and
// creates again rather than keep for the late delete to remove.
func TestRemovedLeftover(t *testing.T) {
	s, _, _ := quietServer(t) // range 1 at generation 1 on server f
	replicas := func(ids ...string) []*pb.Replica {
		var out []*pb.Replica
		for _, id := range ids {
			out = append(out, &pb.Replica{ServerId: id})
		}
		return out
	}
	tests := []struct {
		name string
		desc *pb.RangeDescriptor
		want bool
	}{
		{name: "move back: newer descriptor without this server", desc: &pb.RangeDescriptor{RangeId: 1, Generation: 3, Replicas: replicas("a", "b", "c")}, want: true},
		{name: "heartbeat join: the descriptor lists this server", desc: &pb.RangeDescriptor{RangeId: 1, Generation: 3, Replicas: replicas("a", "b", "f")}},
		{name: "replica as new as the descriptor (an unrecorded AddVoter)", desc: &pb.RangeDescriptor{RangeId: 1, Generation: 1, Replicas: replicas("a", "b", "c")}},
		{name: "range not hosted", desc: &pb.RangeDescriptor{RangeId: 2, Generation: 3, Replicas: replicas("a", "b", "c")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := s.removedLeftover(tc.desc.GetRangeId(), tc.desc); got != tc.want {
				t.Fatalf("removedLeftover = %v, want %v", got, tc.want)
			}
		})
	}
}

// groupPair is group on two fresh transports, a leader's and a
// follower's, and the follower's Raft address.
func groupPair(t *testing.T, group uint64) (leader, follower *grouptransport.Group, followerAddr raft.ServerAddress) {
	t.Helper()
	lt, ft := newTestTransport(t), newTestTransport(t)
	lg, err := lt.Group(group, nil)
	if err != nil {
		t.Fatal(err)
	}
	fg, err := ft.Group(group, nil)
	if err != nil {
		t.Fatal(err)
	}
	return lg, fg, raft.ServerAddress(ft.Addr().String())
}
