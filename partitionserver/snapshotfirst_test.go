package partitionserver

import (
	"encoding/binary"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"tablestore/partitionserver/grouptransport"

	"github.com/hashicorp/raft"
)

func TestSnapshotFirst(t *testing.T) {
	entries := &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 7, PrevLogTerm: 2, Entries: []*raft.Log{{Index: 8, Term: 3, Type: raft.LogCommand}}}
	heartbeat := &raft.AppendEntriesRequest{Term: 3}
	vote := &raft.RequestVoteRequest{Term: 3}
	install := &raft.InstallSnapshotRequest{Term: 3}

	tests := []struct {
		name       string
		generation uint64
		applied    uint64
		bootstrap  bool
		logged     bool // the member's log holds an entry
		snapshot   bool // the member has a snapshot
		wantGate   bool
	}{
		{name: "empty joiner of a split-born range", generation: 3, wantGate: true},
		{name: "first range of a table", generation: 1},
		{name: "member that applied the split (bootstraps)", generation: 3, bootstrap: true},
		{name: "member with applied state", generation: 3, applied: 12},
		{name: "member with a log", generation: 3, logged: true},
		{name: "member with a snapshot", generation: 3, snapshot: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs := raft.NewInmemStore()
			if tc.logged {
				if err := logs.StoreLog(&raft.Log{Index: 1, Term: 1, Type: raft.LogConfiguration}); err != nil {
					t.Fatal(err)
				}
			}
			snaps := raft.NewInmemSnapshotStore()
			if tc.snapshot {
				takeSnapshot(t, snaps)
			}
			gate, err := snapshotFirst(tc.generation, tc.applied, tc.bootstrap, logs, snaps)
			if err != nil {
				t.Fatal(err)
			}
			if (gate != nil) != tc.wantGate {
				t.Fatalf("gate installed = %v, want %v", gate != nil, tc.wantGate)
			}
			if gate == nil {
				return
			}
			for _, msg := range []any{heartbeat, vote, install} {
				if resp, err := gate(msg); resp != nil || err != nil {
					t.Fatalf("%T refused: %v, %v", msg, resp, err)
				}
			}
			// Refused as raft refuses entries past its log: the leader
			// steps back to index 1 (and from there to a snapshot).
			// A failed RPC would make it resend the same entries.
			resp, err := gate(entries)
			ae, ok := resp.(*raft.AppendEntriesResponse)
			if err != nil || !ok || ae.Success || ae.LastLog != 0 || ae.Term != entries.Term {
				t.Fatalf("log entries before a snapshot: got %#v, %v; want a rejection at term %d with an empty log", resp, err, entries.Term)
			}
			takeSnapshot(t, snaps)
			if resp, err := gate(entries); resp != nil || err != nil {
				t.Fatalf("log entries after the snapshot refused: %v, %v", resp, err)
			}
		})
	}
}

func takeSnapshot(t *testing.T, snaps raft.SnapshotStore) {
	t.Helper()
	sink, err := snaps.Create(raft.SnapshotVersionMax, 20, 2, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
}

// countFSM counts applied commands; its snapshot is the count.
type countFSM struct{ n atomic.Int64 }

func (f *countFSM) Apply(*raft.Log) any { return f.n.Add(1) }
func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) {
	return countSnap(f.n.Load()), nil
}
func (f *countFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var b [8]byte
	if _, err := io.ReadFull(rc, b[:]); err != nil {
		return err
	}
	f.n.Store(int64(binary.BigEndian.Uint64(b[:])))
	return nil
}

type countSnap int64

func (s countSnap) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(binary.BigEndian.AppendUint64(nil, uint64(s))); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}
func (countSnap) Release() {}

// An empty joiner of a split-born range whose leader compacted its log,
// first sent entries past its empty log (here: the leader's log grew while
// the joiner's group was not open yet; in a move, a write landing between
// the compaction and the AddVoter), gets the snapshot and catches up. With
// the gate answering a failed RPC, the leader resent those entries forever
// and the joiner stayed empty until the leader's next compaction
// (TestManualSplitMergeMove/transfer_leader timed out transferring to it).
func TestSnapshotFirstJoinerCatchesUp(t *testing.T) {
	newTransport := func() *grouptransport.Transport {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tr := grouptransport.New(grouptransport.Config{Listener: ln, Timeout: 2 * time.Second})
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	config := func(id string) *raft.Config {
		c := raft.DefaultConfig()
		c.LocalID = raft.ServerID(id)
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 200*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond
		c.CommitTimeout = 10 * time.Millisecond
		// Snapshots only when the test asks, compacting the whole log.
		c.SnapshotThreshold, c.SnapshotInterval, c.TrailingLogs = 1<<30, time.Hour, 0
		c.LogLevel = "ERROR"
		return c
	}
	const group = 9
	lt, jt := newTransport(), newTransport()
	lg, err := lt.Group(group, nil)
	if err != nil {
		t.Fatal(err)
	}
	lcfg := config("leader")
	llogs, lsnaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	boot := raft.Configuration{Servers: []raft.Server{{ID: "leader", Address: lg.LocalAddr()}}}
	if err := raft.BootstrapCluster(lcfg, llogs, llogs, lsnaps, lg, boot); err != nil {
		t.Fatal(err)
	}
	leader, err := raft.NewRaft(lcfg, &countFSM{}, llogs, llogs, lsnaps, lg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leader.Shutdown().Error() })
	deadline := time.Now().Add(10 * time.Second)
	for leader.State() != raft.Leader {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	apply := func(n int) {
		t.Helper()
		for range n {
			if err := leader.Apply([]byte("x"), 5*time.Second).Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	apply(20)
	if err := leader.Snapshot().Error(); err != nil { // as a move compacts first
		t.Fatal(err)
	}
	// A non-voter replicates exactly as a voter does and needs no quorum
	// while its group is closed.
	if err := leader.AddNonvoter("joiner", raft.ServerAddress(jt.Addr().String()), 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	apply(10)

	jg, err := jt.Group(group, nil)
	if err != nil {
		t.Fatal(err)
	}
	jlogs, jsnaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	gate, err := snapshotFirst(2, 0, false, jlogs, jsnaps)
	if err != nil || gate == nil {
		t.Fatalf("gate = %v, %v; want one", gate != nil, err)
	}
	jg.SetGate(gate)
	jfsm := &countFSM{}
	joiner, err := raft.NewRaft(config("joiner"), jfsm, jlogs, jlogs, jsnaps, jg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { joiner.Shutdown().Error() })
	apply(1)
	want := int64(31)
	deadline = time.Now().Add(10 * time.Second)
	for jfsm.n.Load() < want {
		if time.Now().After(deadline) {
			list, _ := jsnaps.List()
			t.Fatalf("joiner applied %d of %d entries in 10 s (%d snapshots installed)", jfsm.n.Load(), want, len(list))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
