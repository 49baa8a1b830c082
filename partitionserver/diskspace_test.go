package partitionserver

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// heartbeatMaster records the disk space of the heartbeats it is sent.
type heartbeatMaster struct {
	pb.UnimplementedMasterServiceServer
	mu    sync.Mutex
	space []*pb.DiskSpace
}

func (m *heartbeatMaster) Heartbeat(_ context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.space = append(m.space, req.GetDiskSpace())
	return &pb.HeartbeatResponse{}, nil
}

func (m *heartbeatMaster) last() (*pb.DiskSpace, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.space) == 0 {
		return nil, 0
	}
	return m.space[len(m.space)-1], len(m.space)
}

// TestHeartbeatCarriesDiskSpace: a partition server's heartbeats tell the
// master its data directory's free and total bytes, as the write guard
// reads them, and its --disk-reserve (the master's placement and
// shedding rules read them; without them it would keep placing replicas on
// a full server); where the free space is unknown they carry none (the
// master treats the server as having space).
func TestHeartbeatCarriesDiskSpace(t *testing.T) {
	m := &heartbeatMaster{}
	s := newAgainstMaster(t, m, func(cfg *Config) { cfg.DiskReserve = 123 << 20 })
	cfg := s.cfg
	// Before Start: the heartbeat loop reads the hook.
	s.disk.space = func(dir string) (uint64, uint64, bool) {
		if dir != cfg.DataDir {
			t.Errorf("free space asked of %q, want the data directory %q", dir, cfg.DataDir)
		}
		return 7 << 30, 100 << 30, true
	}
	started(t, s)

	want := &pb.DiskSpace{AvailableBytes: 7 << 30, CapacityBytes: 100 << 30, ReserveBytes: 123 << 20}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		got, n := m.last()
		if n > 0 {
			if !proto.Equal(got, want) {
				t.Fatalf("heartbeat's disk space %v, want %v", got, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no heartbeat reached the master")
		}
	}

	// A server of its own: the running one's heartbeats read its hook.
	unknown := &Server{cfg: cfg, disk: &diskGuard{reserve: cfg.DiskReserve,
		space: func(string) (uint64, uint64, bool) { return 0, 0, false }}}
	if got := unknown.diskSpaceReport(); got != nil {
		t.Fatalf("disk space %v where it is unknown, want none", got)
	}
}
