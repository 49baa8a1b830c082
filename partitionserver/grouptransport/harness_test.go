package grouptransport

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// listFSM keeps every applied command; Restore may be slowed down to make a
// snapshot install take a while.
type listFSM struct {
	mu          sync.Mutex
	entries     [][]byte
	restoreWait time.Duration
}

func (f *listFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, append([]byte(nil), l.Data...))
	return len(f.entries)
}

func (f *listFSM) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.entries)
}

func (f *listFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &listSnap{entries: append([][]byte(nil), f.entries...)}, nil
}

func (f *listFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var entries [][]byte
	var n [4]byte
	for {
		if _, err := io.ReadFull(rc, n[:]); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		b := make([]byte, binary.BigEndian.Uint32(n[:]))
		if _, err := io.ReadFull(rc, b); err != nil {
			return err
		}
		entries = append(entries, b)
		if f.restoreWait > 0 {
			time.Sleep(f.restoreWait)
		}
	}
	f.mu.Lock()
	f.entries = entries
	f.mu.Unlock()
	return nil
}

type listSnap struct{ entries [][]byte }

func (s *listSnap) Persist(sink raft.SnapshotSink) error {
	var buf bytes.Buffer
	for _, e := range s.entries {
		buf.Write(binary.BigEndian.AppendUint32(nil, uint32(len(e))))
		buf.Write(e)
	}
	if _, err := sink.Write(buf.Bytes()); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *listSnap) Release() {}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// node is one test server: a transport and its groups' Raft members.
type node struct {
	addr  string
	ln    *countingListener
	tr    *Transport
	rafts map[uint64]*raft.Raft
	fsms  map[uint64]*listFSM
	logs  map[uint64]*raft.InmemStore
	snaps map[uint64]*raft.InmemSnapshotStore
}

type testCluster struct {
	t     *testing.T
	nodes []*node
	lease time.Duration // the transports' LeaseDuration
}

func raftConfig(id string) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(id)
	c.HeartbeatTimeout = 400 * time.Millisecond
	c.ElectionTimeout = 400 * time.Millisecond
	c.LeaderLeaseTimeout = 200 * time.Millisecond
	c.CommitTimeout = 20 * time.Millisecond
	c.SnapshotThreshold = 1 << 30
	c.SnapshotInterval = time.Hour
	c.LogLevel = "ERROR"
	return c
}

func listen(t *testing.T, addr string) *countingListener {
	t.Helper()
	var ln net.Listener
	var err error
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err = net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	return &countingListener{Listener: ln}
}

func newTestCluster(t *testing.T, servers int) *testCluster {
	return newLeaseCluster(t, servers, 0)
}

// newLeaseCluster is newTestCluster with read leases of duration lease.
func newLeaseCluster(t *testing.T, servers int, lease time.Duration) *testCluster {
	c := &testCluster{t: t, lease: lease}
	for range servers {
		ln := listen(t, "127.0.0.1:0")
		n := &node{addr: ln.Addr().String(), ln: ln}
		n.tr = New(Config{Listener: ln, Timeout: 2 * time.Second, LeaseDuration: lease})
		n.rafts, n.fsms = map[uint64]*raft.Raft{}, map[uint64]*listFSM{}
		n.logs, n.snaps = map[uint64]*raft.InmemStore{}, map[uint64]*raft.InmemSnapshotStore{}
		c.nodes = append(c.nodes, n)
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			c.stop(n)
		}
	})
	return c
}

// startGroup starts group id's member on node i with the given voters,
// bootstrapping on first start.
func (c *testCluster) startGroup(i int, id uint64, voters []int, fsm *listFSM) {
	c.t.Helper()
	n := c.nodes[i]
	g, err := n.tr.Group(id, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	logs, ok := n.logs[id]
	if !ok {
		logs = raft.NewInmemStore()
		n.logs[id] = logs
		n.snaps[id] = raft.NewInmemSnapshotStore()
	}
	if fsm == nil {
		fsm = &listFSM{}
	}
	cfg := raftConfig(n.addr)
	if has, _ := raft.HasExistingState(logs, logs, n.snaps[id]); !has && len(voters) > 0 {
		var conf raft.Configuration
		for _, v := range voters {
			a := c.nodes[v].addr
			conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(a), Address: raft.ServerAddress(a)})
		}
		if err := raft.BootstrapCluster(cfg, logs, logs, n.snaps[id], g, conf); err != nil {
			c.t.Fatal(err)
		}
	}
	r, err := raft.NewRaft(cfg, fsm, logs, logs, n.snaps[id], g)
	if err != nil {
		c.t.Fatal(err)
	}
	g.SetFollowing(func(term uint64) bool { return r.State() == raft.Follower && r.CurrentTerm() == term })
	n.rafts[id], n.fsms[id] = r, fsm
}

// stop shuts a node's groups and its transport down.
func (c *testCluster) stop(n *node) {
	for id, r := range n.rafts {
		r.Shutdown().Error()
		delete(n.rafts, id)
	}
	n.tr.Close()
}

// restart brings a stopped node back on the same address with its stores.
func (c *testCluster) restart(i int) {
	n := c.nodes[i]
	n.ln = listen(c.t, n.addr)
	n.tr = New(Config{Listener: n.ln, Timeout: 2 * time.Second, LeaseDuration: c.lease})
	for id := range n.logs {
		c.startGroup(i, id, nil, nil)
	}
}

func all(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// leader returns the node index leading group id, or -1.
func (c *testCluster) leader(id uint64) int {
	for i, n := range c.nodes {
		if r, ok := n.rafts[id]; ok && r.State() == raft.Leader {
			return i
		}
	}
	return -1
}

func (c *testCluster) waitFor(what string, timeout time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *testCluster) waitLeaders(ids []uint64) {
	c.t.Helper()
	c.waitFor("a leader in every group", 30*time.Second, func() bool {
		for _, id := range ids {
			if c.leader(id) < 0 {
				return false
			}
		}
		return true
	})
}

// apply writes count entries to group id through its current leader.
func (c *testCluster) apply(id uint64, count int, size int) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for k := 0; k < count; {
		l := c.leader(id)
		if l < 0 {
			if time.Now().After(deadline) {
				c.t.Fatalf("group %d: no leader", id)
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		data := bytes.Repeat([]byte{byte(k)}, size)
		copy(data, fmt.Sprintf("%d/%d", id, k))
		if err := c.nodes[l].rafts[id].Apply(data, 5*time.Second).Error(); err != nil {
			if time.Now().After(deadline) {
				c.t.Fatalf("group %d: apply: %v", id, err)
			}
			continue
		}
		k++
	}
}

func (c *testCluster) waitReplicated(ids []uint64, nodes []int, want int) {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("%d entries on every member", want), 30*time.Second, func() bool {
		for _, id := range ids {
			for _, i := range nodes {
				if f := c.nodes[i].fsms[id]; f == nil || f.len() < want {
					return false
				}
			}
		}
		return true
	})
}

func groupIDs(n int) []uint64 {
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	return ids
}
