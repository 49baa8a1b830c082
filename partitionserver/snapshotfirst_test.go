package partitionserver

import (
	"encoding/binary"
	"io"
	"sync/atomic"
	"testing"
	"time"

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
			// The first rejection lets the leader retry at once (the
			// pacing after it: TestGatePace).
			if !ae.NoRetryBackoff {
				t.Fatal("first rejection without NoRetryBackoff: the leader's backoff keeps doubling")
			}
			takeSnapshot(t, snaps)
			if resp, err := gate(entries); resp != nil || err != nil {
				t.Fatalf("log entries after the snapshot refused: %v, %v", resp, err)
			}
		})
	}
}

// TestGatePace: a snapshotFirst rejection resets the leader's backoff at
// most every gateRetryEvery (more often, the leader would retry in a hot
// loop), and none does from gateFreeFor after the first rejection.
func TestGatePace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at   time.Duration
		want bool
	}{
		{0, true},
		{time.Millisecond, false},
		{gateRetryEvery - time.Millisecond, false},
		{gateRetryEvery, true},
		{gateRetryEvery + 10*time.Millisecond, false},
		{3 * gateRetryEvery, true},
		{gateFreeFor - time.Millisecond, true},
		{gateFreeFor + gateRetryEvery, false},
		{10 * gateFreeFor, false},
	}
	var p gatePace
	for i, s := range steps {
		if got := p.free(t0.Add(s.at)); got != s.want {
			t.Fatalf("step %d (at %v): free %v, want %v", i, s.at, got, s.want)
		}
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
	config := func(id string) *raft.Config { return testRaftConfig(id, 200*time.Millisecond, 0, 0) }
	const group = 9
	lt, jt := newTestTransport(t), newTestTransport(t)
	lg, err := lt.Group(group, nil)
	if err != nil {
		t.Fatal(err)
	}
	leader, _, _ := startTestLeader(t, config("leader"), lg)
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
	deadline := time.Now().Add(10 * time.Second)
	for jfsm.n.Load() < want {
		if time.Now().After(deadline) {
			list, _ := jsnaps.List()
			t.Fatalf("joiner applied %d of %d entries in 10 s (%d snapshots installed)", jfsm.n.Load(), want, len(list))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A joiner created while its range's birth log is still there (a server
// healed within seconds of the split) is refused entries until the leader
// compacts, and must get its snapshot soon after the compaction. Raft's
// backoff doubles with every rejection: after ten (about 1.3 s of them) the
// leader waited 2.56 s before its next try, so the joiner caught up about
// 2.5 s after the compaction (cluster/TestStaleParentDoesNotHoldUpSplitRange:
// 5.2 s after the heal). The gate now lets the leader retry without
// backoff at most every gateRetryEvery.
func TestSnapshotFirstJoinerCatchesUpSoonAfterCompaction(t *testing.T) {
	config := func(id string) *raft.Config { return testRaftConfig(id, 200*time.Millisecond, 0, 0) }
	const group = 9
	lt, jt := newTestTransport(t), newTestTransport(t)
	lg, err := lt.Group(group, nil)
	if err != nil {
		t.Fatal(err)
	}
	leader, _, _ := startTestLeader(t, config("leader"), lg)
	for range 20 { // the birth log: not compacted yet
		if err := leader.Apply([]byte("x"), 5*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	jg, err := jt.Group(group, nil)
	if err != nil {
		t.Fatal(err)
	}
	jlogs, jsnaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	gate, err := snapshotFirst(2, 0, false, jlogs, jsnaps)
	if err != nil || gate == nil {
		t.Fatalf("gate = %v, %v; want one", gate != nil, err)
	}
	var refused atomic.Int64
	jg.SetGate(func(msg any) (any, error) {
		resp, err := gate(msg)
		if resp != nil {
			refused.Add(1)
		}
		return resp, err
	})
	jfsm := &countFSM{}
	joiner, err := raft.NewRaft(config("joiner"), jfsm, jlogs, jlogs, jsnaps, jg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { joiner.Shutdown().Error() })
	if err := leader.AddNonvoter("joiner", raft.ServerAddress(jt.Addr().String()), 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for refused.Load() < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("the leader's entries were refused %d times in 20 s, want 10", refused.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A snapshot covers the configuration change only once a command
	// after it is applied.
	if err := leader.Apply([]byte("x"), 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if err := leader.Snapshot().Error(); err != nil { // the birth log's compaction
		t.Fatal(err)
	}
	compacted := time.Now()
	want := int64(21)
	deadline = compacted.Add(20 * time.Second)
	for jfsm.n.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("joiner applied %d of %d entries in 20 s after the compaction", jfsm.n.Load(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The leader waits at most about gateRetryEvery/2 between tries now;
	// 1.5 s leaves a loaded machine room and still fails raft's 2.56 s.
	took := time.Since(compacted)
	if took > 1500*time.Millisecond {
		t.Fatalf("joiner caught up %v after the compaction (%d refusals), want within 1.5 s", took.Round(time.Millisecond), refused.Load())
	}
	t.Logf("joiner caught up %v after the compaction (%d refusals)", took.Round(time.Millisecond), refused.Load())
}
