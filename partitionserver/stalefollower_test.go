package partitionserver

import (
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/partitionserver/grouptransport"
	"tablestore/partitionserver/raftlog"
)

// lastIndexFSM remembers the last index it applied; its snapshot is that index.
type lastIndexFSM struct {
	mu   sync.Mutex
	last uint64
}

func (f *lastIndexFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = l.Index
	return nil
}

func (f *lastIndexFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return lastIndexSnap(f.last), nil
}

func (f *lastIndexFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var b [8]byte
	if _, err := io.ReadFull(rc, b[:]); err != nil {
		return err
	}
	f.mu.Lock()
	f.last = binary.BigEndian.Uint64(b[:])
	f.mu.Unlock()
	return nil
}

type lastIndexSnap uint64

func (s lastIndexSnap) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(binary.BigEndian.AppendUint64(nil, uint64(s))); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (lastIndexSnap) Release() {}

// staleNode is one member of the test's group on a transport of its own.
type staleNode struct {
	name  string
	ln    net.Listener
	tr    *grouptransport.Transport
	g     *grouptransport.Group
	store *raftlog.Store
	logs  *raftlog.Log
	snaps raft.SnapshotStore
	raft  *raft.Raft
}

// TestFollowerWithStaleTailCatchesUp is chaos seeds 243 and 286 (docs/
// reliability.md section 17) in one group of three members: the follower f
// once led a term that committed nothing past index 8, holds that term's
// entries 9-12 in its log, and has dropped its log up to 8 into a snapshot
// (a split-born range's birth compaction); the others, l and c, hold the
// log of term 3 to index 20, after a snapshot at 5 (the seeds) or from
// index 1 (a leader that never compacted). The leader (l or c) finds no
// entry it can match in f's log. hashicorp/raft's follower keeps its
// entries 9-12 after an installed snapshot and does not hold 5 (or 1) in
// its log, so it refuses every append: without the transport's
// stuck-follower handler the leader sent the same snapshot (or its first
// entries) again every few milliseconds and f never caught up (the range
// ran on two members of three, and stopped taking writes when one of those
// stopped). With it the leader snapshots past f's log and f catches up;
// then the group commits with the other member stopped.
func TestFollowerWithStaleTailCatchesUp(t *testing.T) {
	for _, tc := range []struct {
		name      string
		snapIndex uint64 // l's and c's snapshot; 0: none, their log starts at 1
	}{
		{"leader snapshot older than the follower's", 5},
		{"leader log from the start", 0},
	} {
		t.Run(tc.name, func(t *testing.T) { testStaleTail(t, tc.snapIndex) })
	}
}

func testStaleTail(t *testing.T, leaderSnap uint64) {
	names := []string{"l", "c", "f"}
	nodes := map[string]*staleNode{}
	var conf raft.Configuration
	for _, name := range names {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tr := grouptransport.New(grouptransport.Config{Listener: ln, Timeout: 2 * time.Second})
		g, err := tr.Group(1, nil)
		if err != nil {
			t.Fatal(err)
		}
		store, err := raftlog.Open(t.TempDir(), raftlog.Options{})
		if err != nil {
			t.Fatal(err)
		}
		snaps, err := raft.NewFileSnapshotStore(t.TempDir(), 2, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		n := &staleNode{name: name, ln: ln, tr: tr, g: g, store: store, logs: store.Log(1), snaps: snaps}
		nodes[name] = n
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(name), Address: raft.ServerAddress(ln.Addr().String())})
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if n.raft != nil {
				n.raft.Shutdown().Error()
			}
			n.g.Close()
			n.tr.Close()
			n.store.Close()
		}
	})

	entry := func(index, term uint64) *raft.Log {
		if index == 1 {
			return &raft.Log{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(conf)}
		}
		return &raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: []byte("x")}
	}
	seed := func(n *staleNode, term, snapIndex uint64, log []*raft.Log) {
		t.Helper()
		if snapIndex > 0 {
			sink, err := n.snaps.Create(raft.SnapshotVersionMax, snapIndex, 1, conf, 1, n.g)
			if err != nil {
				t.Fatal(err)
			}
			if err := lastIndexSnap(snapIndex).Persist(sink); err != nil {
				t.Fatal(err)
			}
		}
		if err := n.logs.StoreLogs(log); err != nil {
			t.Fatal(err)
		}
		if err := n.logs.SetUint64([]byte("CurrentTerm"), term); err != nil {
			t.Fatal(err)
		}
	}
	var current []*raft.Log // 1-8 of term 1, 9-20 of term 3, after the snapshot
	for i := leaderSnap + 1; i <= 20; i++ {
		current = append(current, entry(i, map[bool]uint64{true: 1, false: 3}[i <= 8]))
	}
	seed(nodes["l"], 3, leaderSnap, current)
	seed(nodes["c"], 3, leaderSnap, current)
	var stale []*raft.Log // 9-12 of term 2, never committed
	for i := uint64(9); i <= 12; i++ {
		stale = append(stale, entry(i, 2))
	}
	seed(nodes["f"], 2, 8, stale)

	for _, name := range names {
		n := nodes[name]
		rc := raft.DefaultConfig()
		rc.LocalID = raft.ServerID(name)
		rc.HeartbeatTimeout = 500 * time.Millisecond
		rc.ElectionTimeout = 500 * time.Millisecond
		rc.LeaderLeaseTimeout = 250 * time.Millisecond
		rc.CommitTimeout = 50 * time.Millisecond
		rc.SnapshotThreshold = 1 << 30 // no scheduled snapshot ends it by chance
		rc.SnapshotInterval = time.Hour
		rc.LogOutput = io.Discard
		r, err := raft.NewRaft(rc, &lastIndexFSM{}, n.logs, n.logs, n.snaps, n.g)
		if err != nil {
			t.Fatal(err)
		}
		n.raft = r
		n.g.SetStuckFollower(snapshotPastFollower(r, new(sync.Mutex), slog.New(slog.DiscardHandler)))
	}

	// A leader (l or c: f's last term is older) commits an entry of its
	// term with the other.
	var leader *staleNode
	deadline := time.Now().Add(20 * time.Second)
	for leader == nil {
		for _, name := range []string{"l", "c"} {
			if n := nodes[name]; n.raft.State() == raft.Leader && n.raft.Barrier(2*time.Second).Error() == nil {
				leader = n
			}
		}
		if leader == nil {
			if time.Now().After(deadline) {
				t.Fatal("no leader committed in 20s")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	want := leader.raft.AppliedIndex()
	f := nodes["f"]
	for f.raft.AppliedIndex() < want {
		if time.Now().After(deadline.Add(10 * time.Second)) {
			st := f.raft.Stats()
			t.Fatalf("f stuck at applied %d (last log %s, last snapshot %s), leader %s applied %d: it never caught up",
				f.raft.AppliedIndex(), st["last_log_index"], st["last_snapshot_index"], leader.name, want)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// With the other member stopped, the leader commits with f.
	other := nodes["c"]
	if leader == other {
		other = nodes["l"]
	}
	if err := other.raft.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	// Either survivor may lead by now (a lease lost on a loaded machine
	// moves leadership): ask whichever does, until a deadline.
	applyDeadline := time.Now().Add(30 * time.Second)
	var lastErr error
	for {
		for _, n := range []*staleNode{leader, f} {
			if n.raft.State() != raft.Leader {
				continue
			}
			if lastErr = n.raft.Apply([]byte("y"), 5*time.Second).Error(); lastErr == nil {
				return
			}
		}
		if time.Now().After(applyDeadline) {
			t.Fatalf("no apply with %s stopped within 30s: %v", other.name, lastErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
