package master

import (
	"context"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

func TestRefuseVote(t *testing.T) {
	tests := []struct {
		name      string
		own, cand uint64
		want      bool
	}{
		{"first start of a group: candidates hold the bootstrap entry alone", 1, 1, false},
		{"started empty with --join, candidate holds only bootstrap", 0, 1, false},
		{"started empty, candidate has entries: refused", 1, 7, true},
		{"started empty with --join, candidate has entries: refused", 0, 7, true},
		{"caught up from a leader since", 9, 7, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := refuseVote(tt.own, tt.cand); got != tt.want {
				t.Errorf("refuseVote(%d, %d) = %v, want %v", tt.own, tt.cand, got, tt.want)
			}
		})
	}
}

// TestWipedMasterKeepsCommittedEntries is the loss the vote gate prevents:
// an entry committed on A and C while B is down; all stop; C's data
// directory is lost; B and C start. C must not elect B (which lacks the
// entry); once A is back the entry is on every master.
func TestWipedMasterKeepsCommittedEntries(t *testing.T) {
	t.Parallel() // its own masters, mostly waiting on elections: beside one other
	g := startGroup(t, 3)
	a := g.leader()
	others := g.others(a)
	b, c := others[0], others[1]
	setProps := func(v string, on *testMaster) {
		t.Helper()
		waitUntil(t, 10*time.Second, v+" applied on "+on.cfg.ID, func() bool {
			l := g.leader()
			if l == nil {
				return false
			}
			_, err := (&service{s: l.s}).SetServiceProperties(context.Background(), &pb.SetServicePropertiesRequest{Properties: []byte(v)})
			return err == nil && props(on.s) == v
		})
	}
	// B holds an entry past the bootstrap one before it stops: a
	// candidate whose log is the bootstrap entry alone looks like a first
	// start's, which the gate lets elect (the rule's residual, see
	// votegate.go).
	setProps("first", b)
	g.stop(b)
	setProps("kept", c) // committed on A and C
	g.stop(a)
	g.stop(c)
	c.cfg.DataDir = t.TempDir() // C's disk is lost
	b.s = startMaster(t, b.cfg)
	c.s = startMaster(t, c.cfg)
	// Several election rounds: B may not lead on C's vote.
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		if l := g.leader(); l != nil {
			t.Fatalf("%s leads with only B and the emptied C up: C voted for a candidate missing an entry it had acknowledged", l.cfg.ID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	a.s = startMaster(t, a.cfg)
	for _, m := range g.ms {
		waitUntil(t, 15*time.Second, m.cfg.ID+" to hold the committed entry", func() bool { return props(m.s) == "kept" })
	}
}
