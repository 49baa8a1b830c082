package master

import (
	"testing"
	"time"
)

// TestMemberAddressChange: a master restarted on its data under another
// Raft address is a down member at the old one until the operator removes
// it and adds it at the new address; it then catches up from its own log.
func TestMemberAddressChange(t *testing.T) {
	g := startGroup(t, 3)
	if !g.commits("one", 5*time.Second) {
		t.Fatal("no commit")
	}
	m := g.others(g.leader())[0]
	g.stop(m)
	m.cfg.RaftAddr = freeAddr(t)
	m.s = startMaster(t, m.cfg)
	waitUntil(t, 10*time.Second, "a leader seeing "+m.cfg.ID+" down", func() bool {
		l := g.leader()
		return l != nil && l != m && l.s.peers.down(m.cfg.ID, time.Now())
	})
	if _, err := g.leader().s.AddMember(m.cfg.ID, m.cfg.RaftAddr); err == nil {
		t.Fatal("adding an existing id at a new address succeeded")
	}
	if _, err := g.leader().s.RemoveMember(m.cfg.ID); err != nil {
		t.Fatalf("removing %s: %v", m.cfg.ID, err)
	}
	if _, err := g.leader().s.AddMember(m.cfg.ID, m.cfg.RaftAddr); err != nil {
		t.Fatalf("adding %s at its new address: %v", m.cfg.ID, err)
	}
	if !g.commits("two", 5*time.Second) {
		t.Fatal("no commit")
	}
	waitUntil(t, 10*time.Second, m.cfg.ID+" to apply", func() bool { return props(m.s) == "two" })
	waitUntil(t, 10*time.Second, m.cfg.ID+" ready", func() bool { return m.s.Ready().Ready() })
}
