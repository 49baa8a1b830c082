package grouptransport

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// resetter listens on addr and resets every connection it accepts, as the
// chaos harness's fault proxy does for a cut-off server: the dial
// succeeds, the request is written, and the answer is a reset.
func resetter(t *testing.T, addr string) (stop func()) {
	t.Helper()
	ln := listen(t, addr)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			conn.Close()
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { ln.Close(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

func testAppend(g *Group, addr string) error {
	var resp raft.AppendEntriesResponse
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}, Term: 1,
		Entries: []*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("x")}}}
	return g.AppendEntries("n1", raft.ServerAddress(addr), req, &resp)
}

// A follower cut off by a proxy that accepts and resets was not covered by
// the wait for a peer the lane cannot connect to: each append failed at
// once, raft's backoff doubled to seconds, and the follower was caught up
// long after the cut healed (chaos seed 32: 3.8 s without a leader).
func TestAppendRetriesResetPeer(t *testing.T) {
	t.Parallel() // its own transports, mostly waiting on their timers: beside one other
	c := newTestCluster(t, 2)
	g, err := c.nodes[0].tr.Group(7, nil)
	if err != nil {
		t.Fatal(err)
	}
	down := c.nodes[1]
	c.stop(down)
	stopReset := resetter(t, down.addr)

	start := time.Now()
	if err := testAppend(g, down.addr); err == nil {
		t.Fatal("an append to a peer that resets every connection succeeded")
	}
	if d := time.Since(start); d < downPeerWait-100*time.Millisecond {
		t.Fatalf("the append failed after %v, before retrying the peer for %v", d, downPeerWait)
	}

	done := make(chan error, 1)
	go func() { done <- testAppend(g, down.addr) }()
	time.Sleep(100 * time.Millisecond)
	stopReset()
	c.restart(1)
	// The restarted server hosts no group 7: it answers, which proves the
	// append in progress reached it once the resets stopped.
	if err := <-done; !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("append while the resets stopped: %v, want the peer's ErrUnknownGroup answer", err)
	}
}

// A failed snapshot (its stream cannot be replayed) returns only once the
// peer was heard from again or after downPeerWait, so that raft's backoff
// counts one failure per wait, not one per reset.
func TestSnapshotFailureWaitsForPeer(t *testing.T) {
	t.Parallel() // its own transports, mostly waiting on their timers: beside one other
	c := newTestCluster(t, 2)
	g, err := c.nodes[0].tr.Group(7, nil)
	if err != nil {
		t.Fatal(err)
	}
	down := c.nodes[1]
	c.stop(down)
	resetter(t, down.addr)
	data := bytes.Repeat([]byte("s"), 4096)
	args := &raft.InstallSnapshotRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}, Term: 1,
		LastLogIndex: 10, LastLogTerm: 1, Size: int64(len(data))}
	start := time.Now()
	var resp raft.InstallSnapshotResponse
	if err := g.InstallSnapshot("n1", raft.ServerAddress(down.addr), args, &resp, bytes.NewReader(data)); err == nil {
		t.Fatal("a snapshot to a peer that resets every connection succeeded")
	}
	if d := time.Since(start); d < downPeerWait-100*time.Millisecond {
		t.Fatalf("the snapshot failed after %v, before waiting %v for the peer", d, downPeerWait)
	}
}
