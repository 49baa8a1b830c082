package partitionserver

import (
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/failpoint"
	"tablestore/partitionserver/fsm"
	"tablestore/partitionserver/lifecycle"
	"tablestore/partitionserver/raftlog"
	pb "tablestore/proto/tablestorepb"
)

// quietServer is a server hosting range 1 as a quiet follower that closed
// at its QUIESCE marker, entry 42 of term 5, with voters a, b and f (this
// server). No raft member and no transport: Answer decides alone.
func quietServer(t *testing.T) (*Server, *slot, *raftlog.Log) {
	t.Helper()
	dir := t.TempDir()
	store, err := fsm.OpenWithInterval(filepath.Join(dir, "state.db"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.CreateRange(&pb.RangeDescriptor{RangeId: 1, Table: "t", TableId: 7, Generation: 1}, false); err != nil {
		t.Fatal(err)
	}
	r, err := store.OpenRange(1, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	logs, err := raftlog.Open(filepath.Join(dir, "raft"), raftlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logs.Close() })
	lg := logs.Log(1)
	var entries []*raft.Log
	for i := uint64(1); i <= 42; i++ {
		entries = append(entries, &raft.Log{Index: i, Term: 5, Type: raft.LogCommand, Data: []byte("x")})
	}
	if err := lg.StoreLogs(entries); err != nil {
		t.Fatal(err)
	}
	if err := lg.SetUint64([]byte("CurrentTerm"), 5); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.AdvertiseRaft = "f-addr"
	sl := newSlot(1, r.Group(), &cfg)
	s := &Server{id: "f", store: store, logs: logs, cfg: cfg, logger: slog.New(slog.DiscardHandler), slots: map[uint64]*slot{1: sl}, spanGroup: map[uint64]uint64{1: 1}}
	sl.state.Store(int32(lifecycle.Quiet))
	sl.mark.Store(&lifecycle.Mark{Term: 5, LastIndex: 42, LastTerm: 5, Applied: 42})
	sl.quietVoters.Store(&quietVoters{at: 42, voters: []raft.Server{
		{ID: "a", Address: "a-addr", Suffrage: raft.Voter}, {ID: "b", Address: "b-addr", Suffrage: raft.Voter},
		{ID: "f", Address: "f-addr", Suffrage: raft.Voter}, {ID: "n", Address: "n-addr", Suffrage: raft.Nonvoter}}})
	sl.wasLeader.Store(true)
	return s, sl, lg
}

func voteReq(cand string, term uint64) *raft.RequestVoteRequest {
	return &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(cand), Addr: []byte(cand + "-addr")},
		Term: term, LastLogIndex: 42, LastLogTerm: 5}
}

func appendReq(leader string, term, prev, prevTerm uint64, entries ...*raft.Log) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(leader), Addr: []byte(leader + "-addr")},
		Term: term, PrevLogEntry: prev, PrevLogTerm: prevTerm, LeaderCommitIndex: 42, Entries: entries}
}

// TestClosedVote: a quiet replica grants one candidate per term without
// opening, durably, and leaves every other vote to its real member.
func TestClosedVote(t *testing.T) {
	s, sl, lg := quietServer(t)
	if r := s.Answer(1, voteReq("n", 6)); r != nil {
		t.Fatalf("a non-voter's vote was answered closed: %+v", r)
	}
	resp, ok := s.Answer(1, voteReq("a", 6)).(*raft.RequestVoteResponse)
	if !ok || !resp.Granted || resp.Term != 6 {
		t.Fatalf("a's vote in term 6: %+v, want granted in term 6", resp)
	}
	// The same term again, for another candidate or the same one: the
	// member decides (it refuses b, grants a again), never closed.
	if r := s.Answer(1, voteReq("b", 6)); r != nil {
		t.Fatalf("b's vote in term 6, after a's, was answered closed: %+v", r)
	}
	if r := s.Answer(1, voteReq("a", 6)); r != nil {
		t.Fatalf("a's second vote in term 6 was answered closed: %+v", r)
	}
	for k, want := range map[string]string{"CurrentTerm": "\x00\x00\x00\x00\x00\x00\x00\x06", "LastVoteTerm": "\x00\x00\x00\x00\x00\x00\x00\x06", "LastVoteCand": "a-addr"} {
		if v, err := lg.Get([]byte(k)); err != nil || string(v) != want {
			t.Errorf("%s = %q, %v; want %q", k, v, err, want)
		}
	}
	if m := sl.mark.Load(); m.Term != 6 || m.LastIndex != 42 || !m.Unsettled() {
		t.Errorf("mark after the vote: %+v", *m)
	}
	if sl.wasLeader.Load() || !sl.followed.Load() || sl.State() != lifecycle.Quiet {
		t.Errorf("after the vote: wasLeader %v, followed %v, state %v", sl.wasLeader.Load(), sl.followed.Load(), sl.State())
	}
	// A candidate behind the replica's log is for the member to refuse.
	behind := voteReq("b", 7)
	behind.LastLogIndex = 41
	if r := s.Answer(1, behind); r != nil {
		t.Fatalf("a candidate behind the log was answered closed: %+v", r)
	}
}

// TestClosedStore: the leader's entries are stored without opening when
// they extend the log at its end; anything else is for the member.
func TestClosedStore(t *testing.T) {
	s, sl, lg := quietServer(t)
	if _, ok := s.Answer(1, voteReq("a", 6)).(*raft.RequestVoteResponse); !ok {
		t.Fatal("vote not answered closed")
	}
	e := func(i uint64, typ raft.LogType) *raft.Log {
		return &raft.Log{Index: i, Term: 6, Type: typ, Data: []byte("w")}
	}
	refused := []struct {
		name string
		req  *raft.AppendEntriesRequest
	}{
		{"an older term", appendReq("a", 5, 42, 5, &raft.Log{Index: 43, Term: 5, Type: raft.LogCommand})},
		{"a previous entry it does not hold", appendReq("a", 6, 43, 6, e(44, raft.LogCommand))},
		{"a gap after the previous entry", appendReq("a", 6, 42, 5, e(44, raft.LogCommand))},
		{"overwriting its own entries", appendReq("a", 6, 41, 5, e(42, raft.LogCommand), e(43, raft.LogCommand))},
		{"a configuration change", appendReq("a", 6, 42, 5, e(43, raft.LogConfiguration))},
		{"entries of a later term than the request's", appendReq("a", 6, 42, 5, &raft.Log{Index: 43, Term: 7, Type: raft.LogCommand})},
	}
	for _, tc := range refused {
		if r := s.Answer(1, tc.req); r != nil {
			t.Errorf("%s: answered closed: %+v", tc.name, r)
		}
	}
	if last, _ := lg.LastIndex(); last != 42 {
		t.Fatalf("refused appends changed the log: last %d", last)
	}
	resp, ok := s.Answer(1, appendReq("a", 6, 42, 5, e(43, raft.LogNoop), e(44, raft.LogCommand))).(*raft.AppendEntriesResponse)
	if !ok || !resp.Success || resp.LastLog != 44 || resp.Term != 6 {
		t.Fatalf("the leader's entries: %+v, want stored up to 44", resp)
	}
	var got raft.Log
	if err := lg.GetLog(44, &got); err != nil || got.Term != 6 || string(got.Data) != "w" {
		t.Fatalf("entry 44: %+v, %v", got, err)
	}
	if m := sl.mark.Load(); m.LastIndex != 44 || m.LastTerm != 6 || m.Applied != 42 {
		t.Errorf("mark after the store: %+v", *m)
	}
	if l := sl.lastLeader.Load(); l == nil || *l != "a" {
		t.Errorf("the replica follows %v after storing a's entries, want a", l)
	}
	// The next entries continue where the store left the log.
	if resp, ok := s.Answer(1, appendReq("a", 6, 44, 6, e(45, raft.LogCommand))).(*raft.AppendEntriesResponse); !ok || resp.LastLog != 45 {
		t.Fatalf("entry 45: %+v", resp)
	}
}

// TestSplitLeftover: only a split's new range that lists no replica here
// and never ran here (no Raft log) is deleted at start; a replica that ran
// may still be a voter of its group whatever its descriptor says.
func TestSplitLeftover(t *testing.T) {
	desc := func(servers ...string) *pb.RangeDescriptor {
		d := &pb.RangeDescriptor{RangeId: 9, Table: "t", Generation: 3}
		for _, s := range servers {
			d.Replicas = append(d.Replicas, &pb.Replica{ServerId: s})
		}
		return d
	}
	for _, tc := range []struct {
		name     string
		st       *pb.RangeState
		ran      bool
		leftover bool
	}{
		{"split child not listing this server, never run", &pb.RangeState{Range: desc("a", "b", "c"), Bootstrap: true}, false, true},
		{"split child listing this server, not yet bootstrapped", &pb.RangeState{Range: desc("a", "b", "f"), Bootstrap: true}, false, false},
		{"split child not listing this server that ran here", &pb.RangeState{Range: desc("a", "b", "c"), Bootstrap: true}, true, false},
		{"a move's replica (no bootstrap) not listed", &pb.RangeState{Range: desc("a", "b", "c")}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := splitLeftover(tc.st, "f", tc.ran); got != tc.leftover {
				t.Fatalf("splitLeftover = %v, want %v", got, tc.leftover)
			}
		})
	}
}

// TestRemovalLeftPartWay: a delete whose state delete or log drop failed
// leaves the replica removing; a request meeting it is refused and does not
// end the removal (before, the registry reported it removed, its state
// still in the file, hosted again at the next start); the master's
// assignment does not count it as hosted (but for a generation-1 range);
// the next delete runs it again and finishes it.
func TestRemovalLeftPartWay(t *testing.T) {
	for _, point := range []string{"partitionserver/delete/state", "partitionserver/delete/drop-log"} {
		t.Run(point, func(t *testing.T) {
			s, sl, _ := quietServer(t)
			failpoint.Enable(point, nil)
			err := s.deleteReplica(1, 0, 0)
			failpoint.Disable(point)
			if err == nil {
				t.Fatal("delete with a failing action succeeded")
			}
			if sl.State() != lifecycle.Removing || !s.hosts(1) {
				t.Fatalf("after the failed delete: state %v, hosted %v; want removing, hosted", sl.State(), s.hosts(1))
			}
			stored, err := s.store.HasRange(1)
			if err != nil || stored != (point == "partitionserver/delete/state") {
				t.Fatalf("after the failed delete: state stored %v (%v)", stored, err)
			}
			if _, err := s.acquire(1); !errors.Is(err, ErrRangeNotHosted) {
				t.Fatalf("a request to the half-removed replica: %v, want ErrRangeNotHosted", err)
			}
			if sl.State() != lifecycle.Removing || !s.hosts(1) {
				t.Fatalf("a request ended the removal: state %v, hosted %v", sl.State(), s.hosts(1))
			}
			// Assigned again by the master at a later generation, it is
			// not kept as hosted; at generation 1 it is (no bootstrap of
			// a range this server was removed from).
			d := proto.Clone(sl.primary().Descriptor()).(*pb.RangeDescriptor)
			if a, _ := s.assignment(d); !a.Hosted {
				t.Fatal("a half-removed generation-1 replica does not count as hosted: it could be bootstrapped again")
			}
			d.Generation = 2
			if a, _ := s.assignment(d); a.Hosted {
				t.Fatal("a half-removed replica counts as hosted for the master's assignment")
			}
			// An event the removing machine takes without an action (a
			// late quiesce marker) must not end it either.
			sl.lock()
			_, err = s.step(sl, lifecycle.Input{Event: lifecycle.Quiesced}, "test", nil)
			sl.unlock()
			if err != nil || sl.State() != lifecycle.Removing || !s.hosts(1) {
				t.Fatalf("a quiesce marker ended the removal: %v, state %v, hosted %v", err, sl.State(), s.hosts(1))
			}
			if err := s.deleteReplica(1, 0, 0); err != nil {
				t.Fatalf("the delete asked again: %v", err)
			}
			if s.hosts(1) {
				t.Fatal("still hosted after the second delete")
			}
			if has, err := s.store.HasRange(1); err != nil || has {
				t.Fatalf("state still stored after the second delete: %v, %v", has, err)
			}
			if slices.Contains(s.logs.Groups(), 1) {
				t.Fatal("the raft log group is still there after the second delete")
			}
		})
	}
}
