package master

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// space is a heartbeat's disk space report, in MiB of a 100 GiB file
// system with the default 256 MiB reserve.
func space(freeMiB uint64) *pb.DiskSpace {
	return &pb.DiskSpace{AvailableBytes: freeMiB << 20, CapacityBytes: 100 << 30, ReserveBytes: 256 << 20}
}

// TestDiskSpaceFromHeartbeat: the wiring of a running master. A
// heartbeat's disk space reaches the scheduler's snapshot (the figures
// the placement and shedding rules read), the partition map's server list
// (ctl servers, the dashboard) and the per-server gauges; a server that
// reports none (an older version) has no figures, which the scheduler
// treats as space, and a report without them drops the last figures.
func TestDiskSpaceFromHeartbeat(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft group")
	}
	_, s := startSoloMaster(t)
	defer s.Close()
	waitUntil(t, 10*time.Second, "the master leads", s.IsLeader)
	beat := func(sid string, d *pb.DiskSpace) {
		t.Helper()
		if _, err := (&service{s: s}).Heartbeat(context.Background(), &pb.HeartbeatRequest{
			Server: &pb.ServerInfo{ServerId: sid, GrpcAddr: "127.0.0.1:1", RaftAddr: "127.0.0.1:2"},
			Full:   true, DiskSpace: d,
		}); err != nil {
			t.Fatalf("heartbeat of %s: %v", sid, err)
		}
	}
	beat("ds-full", space(100))
	beat("ds-older", nil)
	disks := func() map[string]scheduler.Disk {
		out := map[string]scheduler.Disk{}
		for _, sv := range s.snapshot(time.Now()).Servers {
			out[sv.ID] = sv.Disk
		}
		return out
	}
	got := disks()
	if want := (scheduler.Disk{Available: 100 << 20, Capacity: 100 << 30, Reserve: 256 << 20}); got["ds-full"] != want {
		t.Fatalf("snapshot's disk of ds-full = %+v, want %+v", got["ds-full"], want)
	}
	if got["ds-full"].State() != scheduler.DiskFull || got["ds-older"] != (scheduler.Disk{}) || got["ds-older"].State() != scheduler.DiskOK {
		t.Fatalf("snapshot's disks %+v: want ds-full full, ds-older without figures (ok)", got)
	}
	listed := map[string]*pb.DiskSpace{}
	for _, sv := range s.PartitionMap().GetServers() {
		listed[sv.GetServerId()] = sv.GetDiskSpace()
	}
	if !proto.Equal(listed["ds-full"], space(100)) || listed["ds-older"] != nil {
		t.Fatalf("the map's servers carry disk space %v, want ds-full's report and none for ds-older", listed)
	}
	publishSpace(s.reports.seen(), s.reports.spaces())
	if v := gaugeValue(t, serverDiskFullGauge.WithLabelValues("ds-full")); v != 1 {
		t.Fatalf("server_disk_full{ds-full} = %v, want 1", v)
	}
	if v := gaugeValue(t, serverDiskAvailableGauge.WithLabelValues("ds-full")); v != 100<<20 {
		t.Fatalf("server_disk_available_bytes{ds-full} = %v, want %d", v, 100<<20)
	}

	beat("ds-full", nil) // downgraded to a version without the report
	if d := disks()["ds-full"]; d != (scheduler.Disk{}) {
		t.Fatalf("after a report without figures, ds-full's disk is %+v, want none", d)
	}
}

// TestPlacementPrefersRoom: a new table's range goes to servers with room
// on their disk before those holding fewer replicas; a low or full server
// is chosen only when too few others are live, and a full one campaigns
// for the leadership last, after a slow one.
func TestPlacementPrefersRoom(t *testing.T) {
	cfg := DefaultConfig()
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.cancel()
	now := time.Now()
	ids := []string{"a", "b", "c", "d"}
	for i, id := range ids {
		s.fsm.st.servers[id] = &pb.ServerInfo{ServerId: id}
		s.fsm.st.replicaCount[id] = i // a holds the fewest, d the most
	}
	s.reports.greet(ids, now)
	placed := func() []string {
		t.Helper()
		reps, _, err := s.placement()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range reps {
			out = append(out, r.GetServerId())
		}
		return out
	}
	if got := placed(); got[0] != "a" || got[1] != "b" || got[2] != "c" {
		t.Fatalf("placement %v, want a, b, c (the fewest replicas)", got)
	}
	s.noteSpace("a", space(1<<10)) // low: 1 GiB of 100
	if got := placed(); got[0] != "b" || got[1] != "c" || got[2] != "d" {
		t.Fatalf("placement %v with a low, want b, c, d", got)
	}
	s.noteSpace("b", space(100)) // full
	s.noteSpace("c", space(100))
	if got := placed(); got[0] != "d" || got[1] != "a" || got[2] != "b" {
		t.Fatalf("placement %v with a low and b, c full, want d, a (low) then b (full)", got)
	}
	s.noteSpace("d", space(100))
	if got := placed(); got[0] != "a" {
		t.Fatalf("placement %v with only a not full, want a to campaign", got)
	}
	// A slow disk with room leads better than a full one, which refuses
	// writes.
	s.noteSpace("a", space(50<<10))
	s.noteDisk("a", &pb.HeartbeatRequest{DiskLatency: disk(40, 152*time.Millisecond, 0, 0)}, now)
	if got := placed(); got[0] != "a" {
		t.Fatalf("placement %v with a slow and the others full, want a to campaign", got)
	}
}

// TestServerDiskGauges: the per-server disk gauges follow the scheduler's
// rule; a server without figures is neither low nor full and has no
// free-bytes series.
func TestServerDiskGauges(t *testing.T) {
	now := time.Now()
	seen := map[string]time.Time{"dg-ok": now, "dg-low": now, "dg-full": now, "dg-older": now}
	publishSpace(seen, map[string]*pb.DiskSpace{"dg-ok": space(50 << 10), "dg-low": space(1 << 10), "dg-full": space(10)})
	for id, want := range map[string][2]float64{"dg-ok": {0, 0}, "dg-low": {1, 0}, "dg-full": {1, 1}, "dg-older": {0, 0}} {
		low, full := gaugeValue(t, serverDiskLowGauge.WithLabelValues(id)), gaugeValue(t, serverDiskFullGauge.WithLabelValues(id))
		if low != want[0] || full != want[1] {
			t.Fatalf("%s: server_disk_low %v, server_disk_full %v; want %v", id, low, full, want)
		}
	}
	if serverDiskAvailableGauge.DeleteLabelValues("dg-older") {
		t.Fatal("server_disk_available_bytes has a series for a server that reports no figures")
	}
}

func gaugeValue(t *testing.T, g interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}
