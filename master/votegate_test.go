package master

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

func TestRefuseVote(t *testing.T) {
	tests := []struct {
		name      string
		amnesiac  bool
		own, cand uint64
		want      bool
	}{
		{"first start of a group: candidates hold the bootstrap entry alone", true, 1, 1, false},
		{"started empty with --join, candidate holds only bootstrap", true, 0, 1, false},
		{"started empty, candidate has entries: refused", true, 1, 7, true},
		{"started empty with --join, candidate has entries: refused", true, 0, 7, true},
		{"caught up from a leader since", true, 9, 7, false},
		{"started on its own state", false, 1, 7, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := refuseVote(tt.amnesiac, tt.own, tt.cand); got != tt.want {
				t.Errorf("refuseVote(%v, %d, %d) = %v, want %v", tt.amnesiac, tt.own, tt.cand, got, tt.want)
			}
		})
	}
}

// TestWipedMasterKeepsCommittedEntries is the loss the vote gate prevents:
// an entry committed on A and C while B is down; all stop; C's data
// directory is lost; B and C start. C must not elect B (which lacks the
// entry); once A is back the entry is on every master.
func TestWipedMasterKeepsCommittedEntries(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Raft groups")
	}
	ms := make([]*testMaster, 3)
	peers := map[string]string{}
	for i := range ms {
		cfg := DefaultConfig()
		cfg.ID = fmt.Sprintf("m%d", i+1)
		cfg.DataDir = t.TempDir()
		cfg.GRPCAddr, cfg.RaftAddr = freeAddr(t), freeAddr(t)
		cfg.Policy.Enabled = false
		ms[i] = &testMaster{cfg: cfg}
		peers[cfg.ID] = cfg.RaftAddr
	}
	for _, m := range ms {
		m.cfg.Peers = peers
		m.s = startMaster(t, m.cfg)
	}
	t.Cleanup(func() {
		for _, m := range ms {
			if m.s != nil {
				m.s.Close()
			}
		}
	})
	leader := func() *testMaster {
		for _, m := range ms {
			if m.s != nil && m.s.IsLeader() {
				return m
			}
		}
		return nil
	}
	waitUntil(t, 10*time.Second, "a master leader", func() bool { return leader() != nil })
	a := leader()
	var b, c *testMaster
	for _, m := range ms {
		if m != a {
			if b == nil {
				b = m
			} else {
				c = m
			}
		}
	}
	// B holds an entry past the bootstrap one before it stops: a
	// candidate whose log is the bootstrap entry alone looks like a first
	// start's, which the gate lets elect (the rule's residual, see
	// votegate.go).
	waitUntil(t, 10*time.Second, "B to hold the first leader's entries", func() bool {
		l := leader()
		if l == nil {
			return false
		}
		_, err := (&service{s: l.s}).SetServiceProperties(context.Background(), &pb.SetServicePropertiesRequest{Properties: []byte("first")})
		return err == nil && props(b.s) == "first"
	})
	b.s.SkipHandOff()
	b.s.Close()
	b.s = nil
	waitUntil(t, 10*time.Second, "the entry committed on A and C", func() bool {
		l := leader()
		if l == nil {
			return false
		}
		_, err := (&service{s: l.s}).SetServiceProperties(context.Background(), &pb.SetServicePropertiesRequest{Properties: []byte("kept")})
		return err == nil && props(c.s) == "kept"
	})
	for _, m := range []*testMaster{a, c} {
		m.s.SkipHandOff()
		m.s.Close()
		m.s = nil
	}
	c.cfg.DataDir = t.TempDir() // C's disk is lost
	b.s = startMaster(t, b.cfg)
	c.s = startMaster(t, c.cfg)
	// Several election rounds: B may not lead on C's vote.
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		if l := leader(); l != nil {
			t.Fatalf("%s leads with only B and the emptied C up: C voted for a candidate missing an entry it had acknowledged", l.cfg.ID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	a.s = startMaster(t, a.cfg)
	for _, m := range ms {
		waitUntil(t, 15*time.Second, m.cfg.ID+" to hold the committed entry", func() bool { return props(m.s) == "kept" })
	}
}
