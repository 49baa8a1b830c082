package grouptransport

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"tablestore/partitionserver/lease"
)

// leaseHeld asks node i's member of group id whether it holds a lease.
func (c *testCluster) leaseHeld(i int, id uint64) bool {
	n := c.nodes[i]
	r := n.rafts[id]
	if r == nil || r.State() != raft.Leader {
		return false
	}
	var voters []string
	for _, s := range r.GetConfiguration().Configuration().Servers {
		voters = append(voters, string(s.ID))
	}
	return n.tr.group(id).LeaseHeld(r.CurrentTerm(), n.addr, voters)
}

// A leader gets a lease from its followers' promises; a promised follower
// refuses another member's votes, pre-votes and campaign, and a transfer
// the leader starts still goes through; the new leader gets a lease.
func TestLeasePromisesAndTransfer(t *testing.T) {
	const d = 200 * time.Millisecond // raftConfig's heartbeat timeout is 400 ms
	c := newLeaseCluster(t, 3, d)
	const id = 1
	// Votes are refused for d after a transport starts: the first
	// election (after a heartbeat timeout) is later than that.
	for i := range c.nodes {
		c.startGroup(i, id, all(3), nil)
	}
	c.waitLeaders([]uint64{id})
	l := c.leader(id)
	c.waitFor("the leader's lease", 10*time.Second, func() bool { return c.leaseHeld(l, id) })

	f, other := (l+1)%3, (l+2)%3
	fAddr := raft.ServerAddress(c.nodes[f].addr)
	og := c.nodes[other].tr.group(id)
	term := c.nodes[l].rafts[id].CurrentTerm()
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(c.nodes[other].addr), Addr: []byte(c.nodes[other].addr)}
	// Promises last d from each answer, renewed by every heartbeat: a
	// follower answering the leader refuses, whenever it is asked, another
	// member's vote, pre-vote and token-less transfer vote (not granted,
	// counted as a lease refusal). Asked in the current term, so that a
	// probe admitted during a stall of the follower does no harm.
	refused := func(name, request string, ask func() bool) {
		t.Helper()
		c.waitFor(name+" refused against a promise", 10*time.Second, func() bool {
			before := counterValue(leaseRefusalsTotal.WithLabelValues(request, "promised"))
			granted := ask()
			return !granted && counterValue(leaseRefusalsTotal.WithLabelValues(request, "promised")) > before
		})
	}
	refused("a vote", "vote", func() bool {
		var resp raft.RequestVoteResponse
		err := og.RequestVote(raft.ServerID(fAddr), fAddr, &raft.RequestVoteRequest{RPCHeader: hdr, Term: term, LastLogIndex: 1 << 40, LastLogTerm: term}, &resp)
		return err == nil && resp.Granted
	})
	refused("a pre-vote", "prevote", func() bool {
		var resp raft.RequestPreVoteResponse
		err := og.RequestPreVote(raft.ServerID(fAddr), fAddr, &raft.RequestPreVoteRequest{RPCHeader: hdr, Term: term, LastLogIndex: 1 << 40, LastLogTerm: term}, &resp)
		return err == nil && resp.Granted
	})
	refused("a transfer vote without a token", "vote", func() bool {
		var resp raft.RequestVoteResponse
		err := og.RequestVote(raft.ServerID(fAddr), fAddr, &raft.RequestVoteRequest{RPCHeader: hdr, Term: term, LastLogIndex: 1 << 40, LastLogTerm: term, LeadershipTransfer: true}, &resp)
		return err == nil && resp.Granted
	})
	// The follower's own campaign (a woken range's) is refused; asked of
	// its transport without starting one.
	c.waitFor("the follower's campaign refused", 10*time.Second, func() bool {
		pending, err := c.nodes[f].tr.leases.admit(id, lease.Request{Kind: lease.TimeoutNow}, 0)
		if pending {
			c.nodes[f].tr.leases.done(id)
		}
		return errors.Is(err, lease.ErrPromised)
	})
	if got := c.leader(id); got != l {
		t.Fatalf("leader moved from %d to %d", l, got)
	}

	// A transfer the leader starts goes through.
	lr, lg := c.nodes[l].rafts[id], c.nodes[l].tr.group(id)
	lg.StartTransfer(lr.CurrentTerm())
	if err := lr.LeadershipTransferToServer(raft.ServerID(fAddr), fAddr).Error(); err != nil {
		t.Fatalf("transfer: %v", err)
	}
	lg.DisableLease(lr.CurrentTerm())
	c.waitFor("the transfer target leading", 10*time.Second, func() bool { return c.leader(id) == f })
	if c.leaseHeld(l, id) {
		t.Fatal("the old leader still holds a lease")
	}
	c.waitFor("the new leader's lease", 10*time.Second, func() bool { return c.leaseHeld(f, id) })
}

// A server refuses every vote for a lease duration after it starts: its
// promises died with the process before.
func TestLeaseRefusesVotesAfterStart(t *testing.T) {
	c := newLeaseCluster(t, 2, time.Hour)
	g, err := c.nodes[0].tr.Group(7, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.nodes[1].tr.Group(7, nil); err != nil {
		t.Fatal(err)
	}
	before := counterValue(leaseRefusalsTotal.WithLabelValues("vote", "starting"))
	var resp raft.RequestVoteResponse
	err = g.RequestVote("x", raft.ServerAddress(c.nodes[1].addr), &raft.RequestVoteRequest{Term: 1}, &resp)
	if err != nil || resp.Granted || counterValue(leaseRefusalsTotal.WithLabelValues("vote", "starting")) != before+1 {
		t.Fatalf("vote right after start: %v, granted %v; want refused by the start guard", err, resp.Granted)
	}
}

// The lease fields on the wire: a vote's transfer token, a TimeoutNow's
// transfer term, and a promised answer's duration.
func TestLeaseWireFields(t *testing.T) {
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("L"), Addr: []byte("l:1")}
	e, kind, err := encodeRequest(nil, voteOut{&raft.RequestVoteRequest{RPCHeader: hdr, Term: 4, LeadershipTransfer: true}, lease.Token{Leader: "L", Term: 3}})
	if err != nil {
		t.Fatal(err)
	}
	msg, tok, err := decodeRequestToken(kind, e)
	if err != nil || tok != (lease.Token{Leader: "L", Term: 3}) || !msg.(*raft.RequestVoteRequest).LeadershipTransfer {
		t.Fatalf("vote: %+v, %+v, %v", msg, tok, err)
	}
	e, kind, err = encodeRequest(nil, timeoutNowOut{&raft.TimeoutNowRequest{RPCHeader: hdr}, 7})
	if err != nil {
		t.Fatal(err)
	}
	if _, tok, err = decodeRequestToken(kind, e); err != nil || tok != (lease.Token{Leader: "L", Term: 7}) {
		t.Fatalf("TimeoutNow: %+v, %v", tok, err)
	}
	// A bare vote (no token) still decodes, with none.
	e, kind, _ = encodeRequest(nil, &raft.RequestVoteRequest{RPCHeader: hdr, Term: 4})
	if _, tok, err = decodeRequestToken(kind, e); err != nil || tok != (lease.Token{}) {
		t.Fatalf("bare vote: %+v, %v", tok, err)
	}
	out, err := encodeResponse(enc([]byte{statusPromised}).u(250_000), &raft.AppendEntriesResponse{RPCHeader: hdr, Term: 4, Success: true})
	if err != nil {
		t.Fatal(err)
	}
	var resp raft.AppendEntriesResponse
	if d, err := promisedResult(out, &resp); err != nil || d != 250*time.Millisecond || !resp.Success || resp.Term != 4 {
		t.Fatalf("promised answer: %v, %+v, %v", d, resp, err)
	}
	if _, err := promisedResult([]byte{statusPromised, 0xff}, &resp); !errors.Is(err, ErrFrame) {
		t.Fatalf("truncated promise: %v, want ErrFrame", err)
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
