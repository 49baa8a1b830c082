package raftlog

import (
	"bytes"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// indexFSM applies commands by counting them; its snapshot is the count.
type indexFSM struct {
	mu      sync.Mutex
	applied []uint64
}

func (f *indexFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, l.Index)
	return nil
}

func (f *indexFSM) Snapshot() (raft.FSMSnapshot, error) { return indexSnap{}, nil }
func (f *indexFSM) Restore(r io.ReadCloser) error {
	_, err := io.Copy(io.Discard, r)
	r.Close()
	return err
}

type indexSnap struct{}

func (indexSnap) Persist(s raft.SnapshotSink) error {
	_, err := s.Write([]byte("snap"))
	s.Close()
	return err
}
func (indexSnap) Release() {}

// TestSnapshotOlderThanTheLog: a follower whose log runs past the
// snapshot its leader installs (entries it took from a deposed leader, say)
// must not end up with a hole after the snapshot. hashicorp/raft v1.7.3,
// given a raft.MonotonicLogStore, deletes the whole log after the install
// but keeps its in-memory last index; an AppendEntries naming that stale
// index as its previous entry was then accepted, the entries were stored
// after a hole, and applying them panicked with "log not found" (chaos
// seed 26: two replicas of a range crash-looped). The shared log is
// therefore not declared monotonic: raft compacts up to the snapshot
// instead and keeps the entries after it.
func TestSnapshotOlderThanTheLog(t *testing.T) {
	store := open(t, t.TempDir(), Options{})
	defer store.Close()
	logs := store.Log(7)

	conf := raft.DefaultConfig()
	conf.LocalID = "f"
	conf.HeartbeatTimeout = time.Hour // stays a follower: the test is its leader
	conf.ElectionTimeout = time.Hour
	conf.LeaderLeaseTimeout = time.Hour
	conf.LogLevel = "ERROR"
	_, ftrans := raft.NewInmemTransport("f")
	_, ltrans := raft.NewInmemTransport("l")
	ftrans.Connect("l", ltrans)
	ltrans.Connect("f", ftrans)
	fsm := &indexFSM{}
	cached, err := raft.NewLogCache(64, logs)
	if err != nil {
		t.Fatal(err)
	}
	r, err := raft.NewRaft(conf, fsm, cached, logs, raft.NewInmemSnapshotStore(), ftrans)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()

	servers := raft.Configuration{Servers: []raft.Server{{ID: "l", Address: "l"}, {ID: "f", Address: "f"}}}
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("l"), Addr: []byte("l")}
	cfgEntry := &raft.Log{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(servers)}
	var entries []*raft.Log
	entries = append(entries, cfgEntry)
	for i := uint64(2); i <= 10; i++ {
		entries = append(entries, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("x")})
	}
	var resp raft.AppendEntriesResponse
	// Entries 1-10, committed up to 3 only.
	if err := ltrans.AppendEntries("f", "f", &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 1, Entries: entries, LeaderCommitIndex: 3}, &resp); err != nil || !resp.Success {
		t.Fatalf("append 1-10: %v %+v", err, resp)
	}
	// The leader installs its snapshot at 5, behind the follower's last 10.
	var sresp raft.InstallSnapshotResponse
	sreq := &raft.InstallSnapshotRequest{RPCHeader: hdr, SnapshotVersion: raft.SnapshotVersionMax, Term: 1, LastLogIndex: 5, LastLogTerm: 1,
		Size: 4, Configuration: raft.EncodeConfiguration(servers), ConfigurationIndex: 1}
	if err := ltrans.InstallSnapshot("f", "f", sreq, &sresp, bytes.NewReader([]byte("snap"))); err != nil || !sresp.Success {
		t.Fatalf("install snapshot at 5: %v %+v", err, sresp)
	}
	// It continues after 10 and commits 12.
	more := []*raft.Log{{Index: 11, Term: 1, Type: raft.LogCommand, Data: []byte("x")}, {Index: 12, Term: 1, Type: raft.LogCommand, Data: []byte("x")}}
	err = ltrans.AppendEntries("f", "f", &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 1, PrevLogEntry: 10, PrevLogTerm: 1, Entries: more, LeaderCommitIndex: 12}, &resp)
	if err != nil {
		t.Fatal(err)
	}
	// Entries 6-10 are kept after the snapshot (the same term as the
	// leader's), so 11-12 continue the log and must be taken.
	if !resp.Success {
		t.Fatalf("append 11-12 after 10 refused: %+v", resp)
	}
	for i := uint64(6); i <= 12; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d after the snapshot at 5 is missing: %v", i, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.AppliedIndex() < 12 {
		if time.Now().After(deadline) {
			t.Fatalf("applied %d, want 12", r.AppliedIndex())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSetVoteBindsRaft: a vote SetVote recorded while the member was
// closed (a quiet range's replica grants it without opening) binds the
// real member opened afterwards: in that term it grants the same
// candidate again and refuses any other, so no term gets two leaders.
func TestSetVoteBindsRaft(t *testing.T) {
	store := open(t, t.TempDir(), Options{})
	defer store.Close()
	logs := store.Log(9)
	servers := raft.Configuration{Servers: []raft.Server{{ID: "a", Address: "a"}, {ID: "b", Address: "b"}, {ID: "f", Address: "f"}}}
	if err := logs.StoreLogs([]*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(servers)},
		{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("x")},
	}); err != nil {
		t.Fatal(err)
	}
	if err := logs.SetUint64([]byte("CurrentTerm"), 1); err != nil {
		t.Fatal(err)
	}
	// Closed, it votes for a in term 2.
	if err := logs.SetVote(2, []byte("a")); err != nil {
		t.Fatal(err)
	}

	conf := raft.DefaultConfig()
	conf.LocalID = "f"
	conf.HeartbeatTimeout = time.Hour
	conf.ElectionTimeout = time.Hour
	conf.LeaderLeaseTimeout = time.Hour
	conf.LogLevel = "ERROR"
	_, ftrans := raft.NewInmemTransport("f")
	_, atrans := raft.NewInmemTransport("a")
	_, btrans := raft.NewInmemTransport("b")
	ftrans.Connect("a", atrans)
	ftrans.Connect("b", btrans)
	atrans.Connect("f", ftrans)
	btrans.Connect("f", ftrans)
	r, err := raft.NewRaft(conf, &indexFSM{}, logs, logs, raft.NewInmemSnapshotStore(), ftrans)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()

	vote := func(tr *raft.InmemTransport, cand string, term uint64) bool {
		t.Helper()
		req := &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(cand), Addr: []byte(cand)},
			Term: term, LastLogIndex: 2, LastLogTerm: 1}
		var resp raft.RequestVoteResponse
		if err := tr.RequestVote("f", "f", req, &resp); err != nil {
			t.Fatal(err)
		}
		return resp.Granted
	}
	if vote(btrans, "b", 2) {
		t.Error("the member granted b a vote in term 2, after its closed vote for a in that term")
	}
	if !vote(atrans, "a", 2) {
		t.Error("the member refused a, which it voted for in term 2 while closed")
	}
	if !vote(btrans, "b", 3) {
		t.Error("the member refused b in term 3")
	}
}
