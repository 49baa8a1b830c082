package master

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	pb "tablestore/proto/tablestorepb"
)

// masterGroup is n masters bootstrapped together (policies off).
type masterGroup struct {
	t  *testing.T
	ms []*testMaster
}

func startGroup(t *testing.T, n int) *masterGroup {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Raft groups")
	}
	g := &masterGroup{t: t, ms: make([]*testMaster, n)}
	peers := map[string]string{}
	for i := range g.ms {
		cfg := DefaultConfig()
		cfg.ID = fmt.Sprintf("m%d", i+1)
		cfg.DataDir = t.TempDir()
		cfg.GRPCAddr, cfg.RaftAddr = freeAddr(t), freeAddr(t)
		cfg.Policy.Enabled = false
		g.ms[i] = &testMaster{cfg: cfg}
		peers[cfg.ID] = cfg.RaftAddr
	}
	for _, m := range g.ms {
		m.cfg.Peers = peers
		m.s = startMaster(t, m.cfg)
	}
	t.Cleanup(func() {
		for _, m := range g.ms {
			if m.s != nil {
				m.s.SkipHandOff()
				m.s.Close()
			}
		}
	})
	waitUntil(t, 10*time.Second, "a master leader", func() bool { return g.leader() != nil })
	return g
}

func (g *masterGroup) leader() *testMaster {
	for _, m := range g.ms {
		if m.s != nil && m.s.IsLeader() {
			return m
		}
	}
	return nil
}

// others returns the running masters other than m.
func (g *masterGroup) others(m *testMaster) []*testMaster {
	var out []*testMaster
	for _, o := range g.ms {
		if o != m && o.s != nil {
			out = append(out, o)
		}
	}
	return out
}

func (g *masterGroup) stop(m *testMaster) {
	m.s.SkipHandOff()
	m.s.Close()
	m.s = nil
}

// down reports whether peer id has not answered within the window before
// now: the view the tests wait for (a leader that sees a master down).
func (h *peerHealth) down(id string, now time.Time) bool {
	return h.silentSince(id, now.Add(-h.window))
}

// describe says what each running master's Raft thinks, for a failure's
// message: a test that finds no leader shows who stepped down and why.
func (g *masterGroup) describe() string {
	var b strings.Builder
	for _, m := range g.ms {
		if m.s == nil {
			continue
		}
		st := m.s.raft.Stats()
		_, leader := m.s.raft.LeaderWithID()
		fmt.Fprintf(&b, "  %s: %s term %s leader %q last index %s commit %s last contact %s\n", m.cfg.ID,
			st["state"], st["term"], leader, st["last_log_index"], st["commit_index"], st["last_contact"])
	}
	return b.String()
}

// commits reports whether the group takes a write within d.
func (g *masterGroup) commits(v string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if l := g.leader(); l != nil {
			if _, err := (&service{s: l.s}).SetServiceProperties(context.Background(), &pb.SetServicePropertiesRequest{Properties: []byte(v)}); err == nil {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// TestMemberChangeKeepsQuorum: with one of three masters down, removing a
// live one would leave two voters of which one is down, and adding a
// fourth would need three of four: either change stops the master group
// (no quorum) until the down master returns. Both are refused; removing
// the down one (the replace procedure) is not.
func TestMemberChangeKeepsQuorum(t *testing.T) {
	t.Parallel() // its own masters, mostly waiting on elections: beside one other
	g := startGroup(t, 3)
	l := g.leader()
	others := g.others(l)
	down, live := others[0], others[1]
	g.stop(down)
	waitUntil(t, 10*time.Second, "the leader to see "+down.cfg.ID+" down", func() bool {
		l := g.leader()
		return l != nil && l.s.peers.down(down.cfg.ID, time.Now())
	})
	l = g.leader()
	if _, err := l.s.RemoveMember(live.cfg.ID); !errors.Is(err, ErrQuorumLoss) {
		t.Errorf("removing live %s beside down %s: %v, want %v", live.cfg.ID, down.cfg.ID, err, ErrQuorumLoss)
	}
	if _, err := l.s.AddMember("m9", freeAddr(t)); !errors.Is(err, ErrQuorumLoss) {
		t.Errorf("adding m9 beside down %s: %v, want %v", down.cfg.ID, err, ErrQuorumLoss)
	}
	if !g.commits("still", 5*time.Second) {
		t.Fatal("the master group lost its quorum")
	}
	if _, err := g.leader().s.RemoveMember(down.cfg.ID); err != nil {
		t.Fatalf("removing down %s: %v", down.cfg.ID, err)
	}
	if !g.commits("after", 5*time.Second) {
		t.Fatal("no commit after removing the down master")
	}
}

func TestQuorumRefusal(t *testing.T) {
	downOf := func(ids ...string) func(string) bool {
		return func(id string) bool {
			for _, d := range ids {
				if d == id {
					return true
				}
			}
			return false
		}
	}
	for _, tc := range []struct {
		name  string
		after []string
		down  []string
		want  error
	}{
		{"three up", []string{"m1", "m2", "m3"}, nil, nil},
		{"two of three up", []string{"m1", "m2", "m3"}, []string{"m3"}, nil},
		{"one of two up", []string{"m1", "m3"}, []string{"m3"}, ErrQuorumLoss},
		{"two of four up", []string{"m1", "m2", "m3", "m4"}, []string{"m3", "m4"}, ErrQuorumLoss},
		{"three of four up", []string{"m1", "m2", "m3", "m4"}, []string{"m4"}, nil},
		{"the last voter", []string{"m1"}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := quorumRefusal("a change", tc.after, downOf(tc.down...))
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("quorumRefusal = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestPeerHealth: a peer is up only within the window after an answer;
// one never heard from is down, the master itself never.
func TestPeerHealth(t *testing.T) {
	now := time.Now()
	const window = 500 * time.Millisecond
	for _, tc := range []struct {
		name  string
		heard []time.Duration // answers from m2, relative to now
		id    string
		want  bool
	}{
		{"never heard", nil, "m2", true},
		{"just heard", []time.Duration{0}, "m2", false},
		{"heard within the window", []time.Duration{-window + time.Millisecond}, "m2", false},
		{"heard a window ago", []time.Duration{-window}, "m2", true},
		{"the later answer counts", []time.Duration{-time.Millisecond, -time.Hour}, "m2", false},
		{"another peer heard", []time.Duration{0}, "m3", true},
		{"itself", nil, "m1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newPeerHealth("m1", window)
			for _, d := range tc.heard {
				h.heard("m2", now.Add(d))
			}
			if got := h.down(tc.id, now); got != tc.want {
				t.Fatalf("down(%s) = %v, want %v", tc.id, got, tc.want)
			}
		})
	}
}

// TestRemoveLeaderThenAddBack: the leader removes itself (ctl master
// remove of the leader); the other two lead on, and the removed master,
// still running, can be added back and catches up without a restart.
func TestRemoveLeaderThenAddBack(t *testing.T) {
	t.Parallel() // its own masters, mostly waiting on elections: beside one other
	g := startGroup(t, 3)
	old := g.leader()
	resp, err := old.s.RemoveMember(old.cfg.ID)
	if err != nil {
		t.Fatalf("removing the leader %s: %v", old.cfg.ID, err)
	}
	// The answer (ctl's output) is the group without it.
	for _, m := range resp.GetMembers() {
		if m.GetId() == old.cfg.ID {
			t.Errorf("the removal's answer still lists %s: %v", old.cfg.ID, resp.GetMembers())
		}
	}
	if len(resp.GetMembers()) != 2 {
		t.Errorf("the removal's answer lists %d members, want 2", len(resp.GetMembers()))
	}
	waitUntil(t, 10*time.Second, "another leader", func() bool {
		l := g.leader()
		return l != nil && l != old
	})
	if !g.commits("without", 5*time.Second) {
		t.Fatal("no commit after the leader left")
	}
	if _, err := old.s.Members(); err != nil {
		t.Errorf("the removed master cannot list the group: %v", err)
	}
	waitUntil(t, 10*time.Second, "the add back", func() bool {
		l := g.leader()
		if l == nil {
			return false
		}
		_, err := l.s.AddMember(old.cfg.ID, old.cfg.RaftAddr)
		return err == nil
	})
	if !g.commits("back", 5*time.Second) {
		t.Fatal("no commit after the add back")
	}
	waitUntil(t, 10*time.Second, old.cfg.ID+" to apply", func() bool { return props(old.s) == "back" })
}

// TestAddUnreachableMember: adding a master nothing answers at (a typo, a
// master not started yet) is refused: added, it would count in every
// quorum from then on (three of four) without ever voting.
func TestAddUnreachableMember(t *testing.T) {
	g := startGroup(t, 3)
	l := g.leader()
	if _, err := l.s.AddMember("m4", freeAddr(t)); !errors.Is(err, ErrMemberUnreachable) {
		t.Fatalf("adding an unreachable m4: %v, want %v", err, ErrMemberUnreachable)
	}
	cur, err := l.s.Members()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(cur.GetMembers()); n != 3 {
		t.Fatalf("%d members after the refused add, want 3", n)
	}
}

// TestConcurrentMemberChanges: with one of four masters down, removing
// either of two live followers keeps a live quorum, but removing both
// does not (two voters, one down). Asked at once, each change's checks
// read the group of four; the second must see the first's result, so
// one is refused.
func TestConcurrentMemberChanges(t *testing.T) {
	g := startGroup(t, 4)
	l := g.leader()
	others := g.others(l)
	down := others[0]
	g.stop(down)
	waitUntil(t, 10*time.Second, "the leader to see "+down.cfg.ID+" down", func() bool {
		l := g.leader()
		return l != nil && l.s.peers.down(down.cfg.ID, time.Now())
	})
	l = g.leader()
	var targets []string
	for _, o := range g.others(l) {
		targets = append(targets, o.cfg.ID)
	}
	errs := make([]error, len(targets))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, id := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = l.s.RemoveMember(id)
		}()
	}
	close(start)
	wg.Wait()
	ok, refused := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrQuorumLoss):
			refused++
		}
	}
	if ok != 1 || refused != 1 {
		t.Errorf("removing %v at once: %v, want one done and one refused for the quorum", targets, errs)
	}
	if !g.commits("after", 5*time.Second) {
		t.Fatal("the master group lost its quorum")
	}
}

// TestAddMemberRetried: an add asked again for the same id and address
// (ctl's retry on the next leader when the first leader lost the lead
// after the change went out) answers the group, not "exists"; another
// address for the id, or the address under another id, is still refused.
func TestAddMemberRetried(t *testing.T) {
	g := startGroup(t, 3)
	l := g.leader()
	m := g.others(l)[0]
	resp, err := l.s.AddMember(m.cfg.ID, m.cfg.RaftAddr)
	if err != nil {
		t.Fatalf("adding %s again at its address: %v", m.cfg.ID, err)
	}
	if n := len(resp.GetMembers()); n != 3 {
		t.Errorf("%d members, want 3", n)
	}
	if _, err := l.s.AddMember(m.cfg.ID, "127.0.0.1:1"); !errors.Is(err, ErrMemberExists) {
		t.Errorf("%s at another address: %v, want %v", m.cfg.ID, err, ErrMemberExists)
	}
	if _, err := l.s.AddMember("m9", m.cfg.RaftAddr); !errors.Is(err, ErrMemberExists) {
		t.Errorf("%s's address as m9: %v, want %v", m.cfg.ID, err, ErrMemberExists)
	}
}

// blackHole listens at addr and holds every connection without a word: a
// master whose Raft traffic a firewall drops. Raft's RPCs to it wait for
// the transport's timeout (10 s) instead of failing at once.
func blackHole(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
}

// TestNewLeaderSeesSilentPeer: one of three masters goes silent (its Raft
// traffic dropped, not refused) and the leadership moves. The new leader
// has heard nothing from the silent master, so removing the third master
// (two voters, one silent) or adding a fourth (three of four) would stop
// the group: both are refused at once, not after raft's 10 s transport
// timeout (the leader's view was blank: a peer counted as up until a
// heartbeat to it failed). Removing the silent one still works.
func TestNewLeaderSeesSilentPeer(t *testing.T) {
	g := startGroup(t, 3)
	old := g.leader()
	others := g.others(old)
	next, silent := others[0], others[1]
	g.stop(silent)
	blackHole(t, silent.cfg.RaftAddr)
	if err := old.s.raft.LeadershipTransferToServer(raft.ServerID(next.cfg.ID), raft.ServerAddress(next.cfg.RaftAddr)).Error(); err != nil {
		t.Fatalf("moving the leadership to %s: %v", next.cfg.ID, err)
	}
	waitUntil(t, 5*time.Second, next.cfg.ID+" to lead", func() bool { return next.s.IsLeader() })
	// Whichever live master leads when asked (on a loaded machine the
	// leadership may move between the two again: a 250 ms lease) must
	// refuse at once; a refusal for not leading is asked again.
	refuse := func(what string, change func(l, live *testMaster) error) {
		t.Helper()
		start := time.Now()
		for {
			l := g.leader()
			var err error
			if l == nil {
				err = ErrNotLeader
			} else {
				live := g.others(l)[0]
				err = change(l, live)
			}
			switch {
			case errors.Is(err, ErrQuorumLoss):
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("%s: refused after %v", what, d)
				}
				return
			case errors.Is(err, ErrNotLeader) && time.Since(start) < 10*time.Second:
				time.Sleep(20 * time.Millisecond)
			default:
				t.Fatalf("%s beside silent %s: %v, want %v\n%s", what, silent.cfg.ID, err, ErrQuorumLoss, g.describe())
			}
		}
	}
	refuse("removing the other live master", func(l, live *testMaster) error {
		_, err := l.s.RemoveMember(live.cfg.ID)
		return err
	})
	refuse("adding m9", func(l, _ *testMaster) error {
		_, err := l.s.AddMember("m9", freeAddr(t))
		return err
	})
	if !g.commits("still", 10*time.Second) {
		t.Fatalf("the master group lost its quorum\n%s", g.describe())
	}
	if _, err := g.leader().s.RemoveMember(silent.cfg.ID); err != nil {
		t.Fatalf("removing silent %s: %v", silent.cfg.ID, err)
	}
	if !g.commits("after", 5*time.Second) {
		t.Fatal("no commit after removing the silent master")
	}
}

// TestRefuseWithoutQuorumWaits: a change whose quorum needs a peer not
// heard yet waits up to the window for its answer (a leader elected a
// moment ago) and is refused only when none comes.
func TestRefuseWithoutQuorumWaits(t *testing.T) {
	const window = 300 * time.Millisecond
	s := &Server{peers: newPeerHealth("m1", window), ctx: context.Background()}
	after := []string{"m1", "m2"}
	answer := time.AfterFunc(window/3, func() { s.peers.heard("m2", time.Now()) })
	defer answer.Stop()
	if err := s.refuseWithoutQuorum("removing m3", after, s.peerSilentSince); err != nil {
		t.Fatalf("m2 answers within the window: %v", err)
	}
	start := time.Now()
	err := s.refuseWithoutQuorum("removing m2", []string{"m1", "m3"}, s.peerSilentSince)
	if !errors.Is(err, ErrQuorumLoss) {
		t.Fatalf("m3 never answers: %v, want %v", err, ErrQuorumLoss)
	}
	if d := time.Since(start); d < window {
		t.Errorf("refused after %v, before the window (%v) passed", d, window)
	}
	// m3 answered a moment before the change was asked and never since
	// (killed, cut off): it counts down. Counted up, removing m2 left
	// two voters of which one silent, and the group stopped.
	s.peers.heard("m3", time.Now())
	err = s.refuseWithoutQuorum("removing m2", []string{"m1", "m3"}, s.peerSilentSince)
	if !errors.Is(err, ErrQuorumLoss) {
		t.Fatalf("m3 answered only before the change was asked: %v, want %v", err, ErrQuorumLoss)
	}
}
