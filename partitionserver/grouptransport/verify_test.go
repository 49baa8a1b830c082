package grouptransport

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// holdingTransport is a leader's raft transport that can hold the answer
// to one heartbeat to a peer after it arrived (the process stalled between
// the answer's arrival and raft's handling of it) and fail every other
// append to that peer meanwhile, as a network losing them would. Appends
// go one by one (no pipeline), so every one passes here.
type holdingTransport struct {
	*Group
	mu      sync.Mutex
	peer    raft.ServerID // armed for this peer; "" when not armed
	holding bool
	held    chan struct{} // closed once an answer is held
	release chan struct{}
}

func (h *holdingTransport) arm(peer raft.ServerID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.peer, h.holding = peer, false
	h.held, h.release = make(chan struct{}), make(chan struct{})
}

func (h *holdingTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func (h *holdingTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	h.mu.Lock()
	armed := h.peer != "" && id == h.peer
	hold := armed && !h.holding && isHeartbeat(args)
	if hold {
		h.holding = true
	}
	held, release := h.held, h.release
	h.mu.Unlock()
	if armed && !hold {
		return errors.New("holdingTransport: append dropped while an answer is held")
	}
	err := h.Group.AppendEntries(id, target, args, resp)
	if hold {
		close(held)
		<-release
		h.mu.Lock()
		h.peer = ""
		h.mu.Unlock()
	}
	return err
}

// A leader deposed by a transfer-flagged election must not pass a
// leadership check that begins after the new leader committed a write:
// hashicorp/raft's VerifyLeader counts any success its replication
// goroutines report once the check is registered, including the answer to
// a heartbeat sent (and answered) before the check began and handled only
// after it (the leader's process stalled). Group.VerifyLeader counts only
// answers to requests sent after it began.
func TestVerifyLeaderIgnoresAnswersSentBeforeIt(t *testing.T) {
	t.Parallel() // its own transports, mostly waiting on their timers: beside one other
	const d = 50 * time.Millisecond
	c, hold := startVerifyCluster(t, 3, 3, d)
	const id = verifyGroup
	l := c.nodes[0].rafts[id]
	f, x := c.nodes[1], c.nodes[2]

	// Node 0 and x no longer hear each other; node 0's next heartbeat to
	// f is answered and the answer held, every other append to f lost.
	c.nodes[0].tr.SetFault(&dropPeers{drop: map[string]bool{x.addr: true}})
	hold.arm(raft.ServerID(f.addr))
	select {
	case <-hold.held:
	case <-time.After(10 * time.Second):
		t.Fatal("no heartbeat answer from f held")
	}
	defer func() {
		select {
		case <-hold.release:
		default:
			close(hold.release)
		}
	}()
	heldAt := time.Now()
	// x campaigns (transfer-flagged, as a woken range's member or a
	// transfer's target does) once f's and its own promises to node 0
	// ran out, wins with f's vote and commits a write.
	c.waitFor("x campaigning", 10*time.Second, func() bool {
		return time.Since(heldAt) > 2*d && x.tr.group(id).Campaign(time.Second) == nil
	})
	c.waitFor("x leading", 10*time.Second, func() bool { return x.rafts[id].State() == raft.Leader })
	if err := x.rafts[id].Apply([]byte("after"), 5*time.Second).Error(); err != nil {
		t.Fatalf("the new leader's write: %v", err)
	}
	if l.State() != raft.Leader {
		t.Skip("node 0 stepped down on its own before the check: the scenario was not reached")
	}
	// A read on node 0 begins now: it notes its commit index (without the
	// write) and checks its leadership; meanwhile the held answer reaches
	// raft.
	idx := l.CommitIndex()
	done := make(chan error, 1)
	go func() { done <- verifyLeader(c.nodes[0].tr.group(id), l, raft.ServerID(c.nodes[0].addr)) }()
	// The check registers with raft's leader loop at once; there is no
	// signal of it to poll for.
	time.Sleep(100 * time.Millisecond)
	close(hold.release)
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("the deposed leader confirmed its leadership (commit index %d) after the new leader (term %d) committed a write",
				idx, x.rafts[id].CurrentTerm())
		}
		t.Logf("refused: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("leadership check hung")
	}
}

// verifyGroup is the group the leadership-check tests run.
const verifyGroup = 1

// startVerifyCluster starts verifyGroup on n nodes over transports with
// leases of d, the first voters of them voters (the others join as
// non-voters), node 0 (on a holdingTransport) leading. Its timeouts are
// long: raft's own leader lease (which would depose a leader cut off from
// its voters on its own) must outlast a test's scenario, and no election
// may start but those a test asks for.
func startVerifyCluster(t *testing.T, n, voters int, d time.Duration) (*testCluster, *holdingTransport) {
	t.Helper()
	c := newLeaseCluster(t, n, d)
	began := time.Now()
	const id = verifyGroup
	cfg := func(i int) *raft.Config {
		cf := raftConfig(c.nodes[i].addr)
		cf.HeartbeatTimeout, cf.ElectionTimeout, cf.LeaderLeaseTimeout = 3*time.Second, 3*time.Second, 3*time.Second
		return cf
	}
	var conf raft.Configuration
	for _, m := range c.nodes[:voters] {
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(m.addr), Address: raft.ServerAddress(m.addr)})
	}
	var hold *holdingTransport
	for i, nd := range c.nodes {
		g, err := nd.tr.Group(id, nil)
		if err != nil {
			t.Fatal(err)
		}
		logs, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
		nd.logs[id], nd.snaps[id] = logs, snaps
		var tr raft.Transport = g
		if i == 0 {
			hold = &holdingTransport{Group: g}
			tr = hold
		}
		if i < voters {
			if err := raft.BootstrapCluster(cfg(i), logs, logs, snaps, tr, conf); err != nil {
				t.Fatal(err)
			}
		}
		fsm := &listFSM{}
		r, err := raft.NewRaft(cfg(i), fsm, logs, logs, snaps, tr)
		if err != nil {
			t.Fatal(err)
		}
		g.SetFollowing(func(term uint64) bool { return r.State() == raft.Follower && r.CurrentTerm() == term })
		nd.rafts[id], nd.fsms[id] = r, fsm
	}
	// Node 0 leads (its own campaign: every transport refuses votes for d
	// after its start).
	c.waitFor("node 0 campaigning", 10*time.Second, func() bool {
		return time.Since(began) > 2*d && c.nodes[0].tr.group(id).Campaign(time.Second) == nil
	})
	c.waitFor("node 0 leading", 10*time.Second, func() bool { return c.leader(id) == 0 })
	l := c.nodes[0].rafts[id]
	for _, nd := range c.nodes[voters:] {
		if err := l.AddNonvoter(raft.ServerID(nd.addr), raft.ServerAddress(nd.addr), 0, 5*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Apply([]byte("before"), 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	c.waitReplicated([]uint64{id}, all(n), 1)
	return c, hold
}

// A leader cut off from its voters but not from a non-voter (a move's
// joiner) must not pass a leadership check once the voters elected
// another leader, which committed a write: raft's VerifyLeader counts the
// non-voter's answers as votes.
func TestVerifyLeaderCountsVotersOnly(t *testing.T) {
	t.Parallel() // its own transports, mostly waiting on their timers: beside one other
	const d = 50 * time.Millisecond
	c, _ := startVerifyCluster(t, 4, 3, d)
	const id = verifyGroup
	l := c.nodes[0].rafts[id]
	f, x, nv := c.nodes[1], c.nodes[2], c.nodes[3]
	// Node 0 hears only the non-voter; the voters' new leader x does not
	// reach the non-voter, which goes on following node 0.
	c.nodes[0].tr.SetFault(&dropPeers{drop: map[string]bool{f.addr: true, x.addr: true}})
	x.tr.SetFault(&dropPeers{drop: map[string]bool{nv.addr: true, c.nodes[0].addr: true}})
	cut := time.Now()
	c.waitFor("x campaigning", 10*time.Second, func() bool {
		return time.Since(cut) > 2*d && x.tr.group(id).Campaign(time.Second) == nil
	})
	c.waitFor("x leading", 10*time.Second, func() bool { return x.rafts[id].State() == raft.Leader })
	if err := x.rafts[id].Apply([]byte("after"), 5*time.Second).Error(); err != nil {
		t.Fatalf("the new leader's write: %v", err)
	}
	if l.State() != raft.Leader {
		t.Skip("node 0 stepped down on its own before the check: the scenario was not reached")
	}
	idx := l.CommitIndex()
	if err := verifyLeader(c.nodes[0].tr.group(id), l, raft.ServerID(c.nodes[0].addr)); err == nil {
		t.Fatalf("the deposed leader confirmed its leadership (commit index %d) on a non-voter's answers after the new leader (term %d) committed a write",
			idx, x.rafts[id].CurrentTerm())
	} else {
		t.Logf("refused: %v", err)
	}
}

// verifyLeader is the leadership check under test.
func verifyLeader(g *Group, r *raft.Raft, self raft.ServerID) error {
	return g.VerifyLeader(r, self)
}

// A leader its voters follow passes the check, promptly, under a stream
// of writes whose pipelined answers (sent before each check began) keep
// arriving: the check waits for the answers to raft's fresh heartbeats,
// it does not fail on the older ones.
func TestVerifyLeaderConfirmsAFollowedLeader(t *testing.T) {
	c, _ := startVerifyCluster(t, 3, 3, 50*time.Millisecond)
	const id = verifyGroup
	l := c.nodes[0].rafts[id]
	g := c.nodes[0].tr.group(id)
	self := raft.ServerID(c.nodes[0].addr)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = l.Apply([]byte("w"), time.Second).Error()
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	const n = 200
	var ours, rafts time.Duration
	for range n {
		start := time.Now()
		if err := g.VerifyLeader(l, self); err != nil {
			t.Fatalf("a followed leader failed the check: %v", err)
		}
		ours += time.Since(start)
		start = time.Now()
		if err := l.VerifyLeader().Error(); err != nil {
			t.Fatalf("raft's check: %v", err)
		}
		rafts += time.Since(start)
	}
	t.Logf("mean check under writes: %v (raft's alone: %v)", ours/n, rafts/n)
}
