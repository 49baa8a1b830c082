package master

import (
	"context"
	"net"
	"testing"

	pb "tablestore/proto/tablestorepb"
)

// TestDebugAddresses: ctl debug zip's way to every process. A master's
// ListMembers answer names the master answering and its own listeners (a
// listener on every interface with its Raft host); a partition server's
// metrics and pprof addresses are registered from its heartbeat into the
// replicated registry, and registered again when they change (a restart
// on other ports).
func TestDebugAddresses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft group")
	}
	s := leadingMaster(t, func(cfg *Config) { cfg.MetricsAddr, cfg.PprofAddr = "[::]:9090", "127.0.0.1:6060" })
	cfg := s.cfg

	m, err := s.Members()
	if err != nil {
		t.Fatal(err)
	}
	raftHost, _, _ := net.SplitHostPort(cfg.RaftAddr)
	if m.GetSelfId() != "m1" || m.GetSelfMetricsAddr() != net.JoinHostPort(raftHost, "9090") || m.GetSelfPprofAddr() != "127.0.0.1:6060" {
		t.Errorf("ListMembers names itself %q at metrics %q, pprof %q", m.GetSelfId(), m.GetSelfMetricsAddr(), m.GetSelfPprofAddr())
	}

	beat := func(metrics, pprof string) {
		t.Helper()
		if _, err := (&service{s: s}).Heartbeat(context.Background(), &pb.HeartbeatRequest{
			Server: &pb.ServerInfo{ServerId: "ps1", GrpcAddr: "ps1:7200", RaftAddr: "ps1:7300", MetricsAddr: metrics, PprofAddr: pprof},
			Full:   true,
		}); err != nil {
			t.Fatal(err)
		}
	}
	registered := func() (metrics, pprof string) {
		var sv *pb.ServerInfo
		s.fsm.read(func(st *state) { sv = st.servers["ps1"] })
		return sv.GetMetricsAddr(), sv.GetPprofAddr()
	}
	listed := func() string {
		for _, sv := range s.PartitionMap().GetServers() {
			if sv.GetServerId() == "ps1" {
				return sv.GetMetricsAddr()
			}
		}
		return ""
	}
	beat("ps1:9090", "")
	if m, p := registered(); m != "ps1:9090" || p != "" || listed() != "ps1:9090" {
		t.Errorf("registered metrics %q pprof %q, map %q; want ps1:9090, none", m, p, listed())
	}
	beat("ps1:9191", "ps1:6060")
	if m, p := registered(); m != "ps1:9191" || p != "ps1:6060" || listed() != "ps1:9191" {
		t.Errorf("after a restart on other ports: registered metrics %q pprof %q, map %q", m, p, listed())
	}
	// Not host:port (a path would have ctl debug zip fetch another page
	// of that host): kept out of the registry, the rest registered.
	beat("ps1:9191/private?", "ps1:6060")
	if m, p := registered(); m != "" || p != "ps1:6060" {
		t.Errorf("a metrics address with a path: registered metrics %q pprof %q, want none and ps1:6060", m, p)
	}
}
