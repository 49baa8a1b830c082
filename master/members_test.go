package master

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "tablestore/proto/tablestorepb"
)

// handedOut are the addresses freeAddr gave in this test binary: the
// kernel may give a port just closed again, and two masters of one test
// on one address failed CI's first run (bootstrap: duplicate address).
var handedOut = struct {
	sync.Mutex
	addrs map[string]bool
}{addrs: map[string]bool{}}

func freeAddr(t *testing.T) string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if !handedOut.addrs[addr] {
			handedOut.addrs[addr] = true
			return addr
		}
	}
}

type testMaster struct {
	cfg Config
	s   *Server
}

// leadingMaster starts a one-master group (m1, policies off, its Config
// changed by tune, nil: none), closed when the test ends, and waits for it
// to lead.
func leadingMaster(t *testing.T, tune func(*Config)) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID, cfg.DataDir = "m1", t.TempDir()
	cfg.GRPCAddr, cfg.RaftAddr = freeAddr(t), freeAddr(t)
	cfg.Policy.Enabled = false
	if tune != nil {
		tune(&cfg)
	}
	s := startMaster(t, cfg)
	t.Cleanup(func() { s.Close() })
	waitUntil(t, 10*time.Second, "the master to lead", s.IsLeader)
	return s
}

func startMaster(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	return s
}

func waitUntil(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func props(s *Server) string { return string(s.PartitionMap().GetServiceProperties()) }

// TestReplaceMaster replaces a lost master the way docs/deploy.md says:
// remove it, start an empty master with --join, add it; then the group
// survives the loss of one of the original masters, which needs the new one.
func TestReplaceMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Raft groups")
	}
	t.Parallel() // its own masters, mostly waiting on elections: beside one other
	ms := make([]*testMaster, 4)
	peers := map[string]string{}
	for i := range ms {
		cfg := DefaultConfig()
		cfg.ID = fmt.Sprintf("m%d", i+1)
		cfg.DataDir = t.TempDir()
		cfg.GRPCAddr, cfg.RaftAddr = freeAddr(t), freeAddr(t)
		cfg.Policy.Enabled = false
		ms[i] = &testMaster{cfg: cfg}
		if i < 3 {
			peers[cfg.ID] = cfg.RaftAddr
		}
	}
	for i := 0; i < 3; i++ {
		ms[i].cfg.Peers = peers
		ms[i].s = startMaster(t, ms[i].cfg)
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
	setProps := func(v string) {
		t.Helper()
		waitUntil(t, 10*time.Second, "a leader to take "+v, func() bool {
			l := leader()
			if l == nil {
				return false
			}
			_, err := (&service{s: l.s}).SetServiceProperties(context.Background(), &pb.SetServicePropertiesRequest{Properties: []byte(v)})
			return err == nil
		})
	}
	setProps("before")

	// The operator's commands, through the real gRPC service.
	ctl := func(m *testMaster, args ...string) ([]*pb.MasterMember, error) {
		t.Helper()
		conn := pb.NewMasterServiceClient(dial(t, m.s.GRPCAddr()))
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		var resp *pb.ListMembersResponse
		var err error
		switch args[0] {
		case "list":
			resp, err = conn.ListMembers(ctx, &pb.ListMembersRequest{})
		case "add":
			resp, err = conn.AddMember(ctx, &pb.AddMemberRequest{Id: args[1], RaftAddr: args[2]})
		case "remove":
			resp, err = conn.RemoveMember(ctx, &pb.RemoveMemberRequest{Id: args[1]})
		}
		return resp.GetMembers(), err
	}
	ids := func(members []*pb.MasterMember) string {
		var out []string
		for _, m := range members {
			out = append(out, m.GetId())
		}
		return strings.Join(out, ",")
	}
	l := leader()
	got, err := ctl(l, "list")
	if err != nil || ids(got) != "m1,m2,m3" {
		t.Fatalf("list: %v %v", ids(got), err)
	}
	if _, err := ctl(l, "remove", "m9"); err == nil {
		t.Fatal("removing an unknown member succeeded")
	}
	if _, err := ctl(l, "add", "m2", "127.0.0.1:1"); err == nil {
		t.Fatal("adding an existing member succeeded")
	}

	// m3 is lost (its disk too): remove it, start m4 empty with --join, add.
	lost := ms[2]
	if lost == l {
		lost = ms[1]
	}
	lost.s.Close()
	lost.s = nil
	waitUntil(t, 10*time.Second, "a leader after the loss", func() bool { return leader() != nil })
	got, err = ctl(leader(), "remove", lost.cfg.ID)
	if err != nil || strings.Contains(ids(got), lost.cfg.ID) {
		t.Fatalf("remove %s: %v %v", lost.cfg.ID, ids(got), err)
	}
	ms[3].cfg.Join = true
	ms[3].s = startMaster(t, ms[3].cfg)
	got, err = ctl(leader(), "add", "m4", ms[3].cfg.RaftAddr)
	if err != nil || !strings.Contains(ids(got), "m4") {
		t.Fatalf("add m4: %v %v", ids(got), err)
	}
	waitUntil(t, 10*time.Second, "m4 to catch up", func() bool { return props(ms[3].s) == "before" })

	// Lose the leader: the survivor and m4 are a majority only together.
	old := leader()
	old.s.Close()
	old.s = nil
	setProps("after")
	for _, m := range ms {
		if m.s != nil {
			waitUntil(t, 10*time.Second, m.cfg.ID+" to apply", func() bool { return props(m.s) == "after" })
		}
	}
	if leader() == nil {
		t.Fatal("no leader")
	}
}

func TestJoinExcludesPeers(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Join = true
	cfg.Peers = map[string]string{"m1": "127.0.0.1:1"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "join") {
		t.Fatalf("Validate = %v, want a join/peers error", err)
	}
}

func TestMembershipErrors(t *testing.T) {
	for _, err := range []error{ErrUnknownMember, ErrMemberExists, ErrLastMember, ErrBadMember, ErrQuorumLoss, ErrMemberUnreachable} {
		st := toStatus(fmt.Errorf("wrapped: %w", err))
		if st == nil || !bytes.Contains([]byte(st.Error()), []byte(err.Error())) {
			t.Errorf("toStatus(%v) = %v", err, st)
		}
		if errors.Is(st, ErrNotLeader) {
			t.Errorf("%v translated as not-leader", err)
		}
	}
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestMemberRemovalRefusal: the last voter stays; a non-voter may always
// leave (it was refused whenever one voter remained).
func TestMemberRemovalRefusal(t *testing.T) {
	one := []*pb.MasterMember{{Id: "m1", Voter: true}, {Id: "m2"}}
	three := []*pb.MasterMember{{Id: "m1", Voter: true}, {Id: "m2", Voter: true}, {Id: "m3", Voter: true}}
	for _, tc := range []struct {
		name    string
		members []*pb.MasterMember
		id      string
		want    error
	}{
		{"a voter of three", three, "m2", nil},
		{"the last voter", one, "m1", ErrLastMember},
		{"a non-voter beside the last voter", one, "m2", nil},
		{"unknown", three, "m9", ErrUnknownMember},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := memberRemovalRefusal(tc.members, tc.id)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("memberRemovalRefusal(%s) = %v, want %v", tc.id, err, tc.want)
			}
		})
	}
}

// TestAddUnreachableMemberRefused: adding a master at an address where
// nothing listens (a typo, a master not started) is refused before the
// configuration changes: the quorum would grow at once, and a group of one
// could then commit nothing (its add itself timed out after 10 s, the group
// stuck until the member came).
func TestAddUnreachableMemberRefused(t *testing.T) {
	_, s := startSoloMaster(t)
	defer s.Close()
	waitUntil(t, 10*time.Second, "the master leads", s.IsLeader)
	_, err := s.AddMember("m2", freeAddr(t))
	if !errors.Is(err, ErrMemberUnreachable) {
		t.Fatalf("err %v, want ErrMemberUnreachable", err)
	}
	if st := toStatus(err); status.Code(st) != codes.FailedPrecondition {
		t.Errorf("status %v", st)
	}
	m, err := s.Members()
	if err != nil || len(m.GetMembers()) != 1 {
		t.Fatalf("members %v %v", m.GetMembers(), err)
	}
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REGISTER_SERVER, &pb.RegisterServerCommand{Server: &pb.ServerInfo{ServerId: "a"}}); err != nil {
		t.Errorf("the group no longer commits: %v", err)
	}
}

// TestRemoveLeaderAnswersTheRest: the leader removing itself answers the
// members left (ctl master remove prints them; it printed the members
// before the removal, the removed leader still listed as leader).
func TestRemoveLeaderAnswersTheRest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft group")
	}
	peers := map[string]string{}
	var cfgs []Config
	for i := range 3 {
		cfg := DefaultConfig()
		cfg.ID = fmt.Sprintf("m%d", i+1)
		cfg.DataDir = t.TempDir()
		cfg.GRPCAddr, cfg.RaftAddr = freeAddr(t), freeAddr(t)
		cfg.Policy.Enabled = false
		peers[cfg.ID] = cfg.RaftAddr
		cfgs = append(cfgs, cfg)
	}
	var ms []*Server
	for _, cfg := range cfgs {
		cfg.Peers = peers
		s := startMaster(t, cfg)
		t.Cleanup(func() { s.Close() })
		ms = append(ms, s)
	}
	var leader *Server
	waitUntil(t, 10*time.Second, "a master leader", func() bool {
		for _, s := range ms {
			if s.IsLeader() {
				leader = s
				return true
			}
		}
		return false
	})
	resp, err := leader.RemoveMember(leader.cfg.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetMembers()) != 2 {
		t.Fatalf("members %v, want the two left", resp.GetMembers())
	}
	for _, m := range resp.GetMembers() {
		if m.GetId() == leader.cfg.ID || m.GetLeader() {
			t.Errorf("member %v: the removed leader, or a leader not known yet", m)
		}
	}
}

// TestGrowFromOneMaster: a lone master can be grown to three with
// --join masters (the quorum check counts a new member as down, except
// beside a lone master, where it would forbid growing at all), and the
// group then survives the loss of the first master.
func TestGrowFromOneMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Raft groups")
	}
	t.Parallel() // its own masters, mostly waiting on elections: beside one other
	_, first := startSoloMaster(t)
	defer func() {
		if first != nil {
			first.Close()
		}
	}()
	waitUntil(t, 10*time.Second, "the master leads", first.IsLeader)
	var joined []*Server
	for _, id := range []string{"m2", "m3"} {
		c := DefaultConfig()
		c.ID, c.DataDir, c.Join = id, t.TempDir(), true
		c.GRPCAddr, c.RaftAddr = freeAddr(t), freeAddr(t)
		c.Policy.Enabled = false
		s := startMaster(t, c)
		defer s.Close()
		joined = append(joined, s)
		if _, err := first.AddMember(id, c.RaftAddr); err != nil {
			t.Fatalf("add %s to a group of %d: %v", id, len(joined), err)
		}
	}
	if _, err := (&service{s: first}).SetServiceProperties(context.Background(), &pb.SetServicePropertiesRequest{Properties: []byte("grown")}); err != nil {
		t.Fatal(err)
	}
	for _, s := range joined {
		waitUntil(t, 10*time.Second, "a joined master to apply", func() bool { return props(s) == "grown" })
	}
	first.SkipHandOff()
	first.Close()
	first = nil
	waitUntil(t, 10*time.Second, "a leader among the joined masters", func() bool {
		return joined[0].IsLeader() || joined[1].IsLeader()
	})
}
