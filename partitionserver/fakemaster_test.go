package partitionserver

import (
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "tablestore/proto/tablestorepb"
)

// newAgainstMaster serves m as the only master on a loopback port and
// returns a server (not started) that reports to it every 20 ms, without
// quiescence, its Config changed by tune (nil: none).
func newAgainstMaster(t *testing.T, m pb.MasterServiceServer, tune func(*Config)) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterMasterServiceServer(srv, m)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	cfg := DefaultConfig()
	cfg.ID = "f"
	cfg.DataDir = filepath.Join(t.TempDir(), "ps")
	cfg.GRPCAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Masters = []string{ln.Addr().String()}
	cfg.QuiesceAfter = 0
	cfg.HeartbeatInterval = 20 * time.Millisecond
	if tune != nil {
		tune(&cfg)
	}
	s, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// started starts s and closes it when the test ends.
func started(t *testing.T, s *Server) *Server {
	t.Helper()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
