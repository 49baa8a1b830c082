package partitionserver

import (
	"context"
	"errors"
	"flag"
	"strings"
	"sync"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// TestZoneFlag: --zone sets the server's failure domain, empty by
// default, and Validate refuses a name the master's tables (ctl servers,
// the dashboard) could not show on one line.
func TestZoneFlag(t *testing.T) {
	if z := DefaultConfig().Zone; z != "" {
		t.Fatalf("default zone %q, want empty (none named)", z)
	}
	for _, tc := range []struct {
		zone string
		ok   bool
	}{
		{"", true},
		{"eu-west-1a", true},
		{"rack/7:row=3", true},
		{"zone-é", true},
		{strings.Repeat("z", MaxZoneLen), true},
		{strings.Repeat("z", MaxZoneLen+1), false},
		{"eu west", false},
		{"a\tb", false},
		{"a\nb", false},
		{"a\x00b", false},
		{"\xff", false},
	} {
		cfg := DefaultConfig()
		fs := flag.NewFlagSet("ps", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		if err := fs.Parse([]string{"--zone", tc.zone}); err != nil {
			t.Fatal(err)
		}
		if cfg.Zone != tc.zone {
			t.Fatalf("--zone %q set zone %q", tc.zone, cfg.Zone)
		}
		err := cfg.Validate()
		if tc.ok && err != nil {
			t.Errorf("zone %q: %v, want valid", tc.zone, err)
		}
		if !tc.ok && !errors.Is(err, ErrBadZone) {
			t.Errorf("zone %q: %v, want ErrBadZone", tc.zone, err)
		}
	}
}

// zoneMaster records the server info of the heartbeats it is sent.
type zoneMaster struct {
	pb.UnimplementedMasterServiceServer
	mu     sync.Mutex
	server *pb.ServerInfo
}

func (m *zoneMaster) Heartbeat(_ context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.server = req.GetServer()
	return &pb.HeartbeatResponse{}, nil
}

func (m *zoneMaster) last() *pb.ServerInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.server
}

// TestHeartbeatCarriesZone: the server's heartbeats register its --zone
// with its addresses (the master keeps it in its catalog, and its
// placement reads it).
func TestHeartbeatCarriesZone(t *testing.T) {
	m := &zoneMaster{}
	const zone = "us-east-1b"
	started(t, newAgainstMaster(t, m, func(cfg *Config) { cfg.ID, cfg.Zone = "z", zone }))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if got := m.last(); got != nil {
			if got.GetZone() != zone || got.GetServerId() != "z" {
				t.Fatalf("heartbeat's server %v, want zone %q", got, zone)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no heartbeat reached the master")
		}
	}
}
