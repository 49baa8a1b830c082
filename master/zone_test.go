package master

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// TestZoneFromHeartbeat: the wiring of a running master. A heartbeat's
// zone is registered in the catalog (replicated with the addresses, so a
// new master leader knows it), reaches the scheduler's snapshot and the
// partition map's server list (ctl servers, the dashboard); a server
// restarted with another --zone re-registers with it, keeping its drain
// mark.
func TestZoneFromHeartbeat(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft group")
	}
	_, s := startSoloMaster(t)
	defer s.Close()
	waitUntil(t, 10*time.Second, "the master leads", s.IsLeader)
	beat := func(sid, zone string) {
		t.Helper()
		if _, err := (&service{s: s}).Heartbeat(context.Background(), &pb.HeartbeatRequest{
			Server: &pb.ServerInfo{ServerId: sid, GrpcAddr: "127.0.0.1:1", RaftAddr: "127.0.0.1:2", Zone: zone},
			Full:   true,
		}); err != nil {
			t.Fatalf("heartbeat of %s: %v", sid, err)
		}
	}
	zonesSeen := func() (catalog, snap, listed map[string]string) {
		catalog, snap, listed = map[string]string{}, map[string]string{}, map[string]string{}
		s.fsm.read(func(st *state) {
			for id, sv := range st.servers {
				catalog[id] = sv.GetZone()
			}
		})
		for _, sv := range s.snapshot(time.Now()).Servers {
			snap[sv.ID] = sv.Zone
		}
		for _, sv := range s.PartitionMap().GetServers() {
			listed[sv.GetServerId()] = sv.GetZone()
		}
		return catalog, snap, listed
	}
	beat("z-a", "eu-1a")
	beat("z-none", "")
	want := map[string]string{"z-a": "eu-1a", "z-none": ""}
	catalog, snap, listed := zonesSeen()
	if !mapsEqual(catalog, want) || !mapsEqual(snap, want) || !mapsEqual(listed, want) {
		t.Fatalf("zones in the catalog %v, the snapshot %v, the map %v: want %v", catalog, snap, listed, want)
	}
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_SERVER_DRAINING,
		&pb.SetServerDrainingCommand{ServerId: "z-a", Draining: true}); err != nil {
		t.Fatal(err)
	}
	beat("z-a", "eu-1b") // restarted in another zone
	catalog, snap, _ = zonesSeen()
	if catalog["z-a"] != "eu-1b" || snap["z-a"] != "eu-1b" {
		t.Fatalf("after a new zone, catalog %v, snapshot %v: want z-a in eu-1b", catalog, snap)
	}
	var draining bool
	s.fsm.read(func(st *state) { draining = st.servers["z-a"].GetDraining() })
	if !draining {
		t.Fatal("re-registering with a new zone lost the drain mark")
	}
	// The catalog's snapshot (a new master, a restart) keeps it.
	var restored *state
	s.fsm.read(func(st *state) { restored = stateFromSnapshot(st.snapshot()) })
	if z := restored.servers["z-a"].GetZone(); z != "eu-1b" {
		t.Fatalf("zone after snapshot and restore %q, want eu-1b", z)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestPlacementSpreadsZones: a new table's range goes to as many zones as
// the live servers are in, the fewest replicas first within that; with
// fewer zones than replicas, two share one; servers that name no zone
// are placed as before zones existed; disk room still comes first.
func TestPlacementSpreadsZones(t *testing.T) {
	s, err := New(DefaultConfig(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.cancel()
	set := func(zones map[string]string, counts map[string]int) {
		s.fsm.st.servers = map[string]*pb.ServerInfo{}
		var ids []string
		for id, z := range zones {
			s.fsm.st.servers[id] = &pb.ServerInfo{ServerId: id, Zone: z}
			s.fsm.st.replicaCount[id] = counts[id]
			ids = append(ids, id)
		}
		s.reports.greet(ids, time.Now())
	}
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
		slices.Sort(out)
		return out
	}
	counts := map[string]int{"a1": 0, "a2": 1, "b1": 5, "b2": 6, "c1": 9, "c2": 3}
	set(map[string]string{"a1": "A", "a2": "A", "b1": "B", "b2": "B", "c1": "C", "c2": "C"}, counts)
	if got := placed(); !slices.Equal(got, []string{"a1", "b1", "c2"}) {
		t.Fatalf("placement %v over three zones, want a1, b1, c2 (one per zone, the fewest replicas of each)", got)
	}
	set(map[string]string{"a1": "A", "a2": "A", "c2": "A", "b1": "B"}, counts)
	if got := placed(); !slices.Equal(got, []string{"a1", "a2", "b1"}) {
		t.Fatalf("placement %v over two zones, want a1, a2 and b1 (2+1)", got)
	}
	set(map[string]string{"a1": "", "a2": "", "b1": "", "c2": ""}, counts)
	if got := placed(); !slices.Equal(got, []string{"a1", "a2", "c2"}) {
		t.Fatalf("placement %v without zones, want a1, a2, c2 (the fewest replicas)", got)
	}
	set(map[string]string{"a1": "A", "a2": "A", "c2": "A", "b1": "B"}, counts)
	s.noteSpace("b1", space(1<<10)) // low: 1 GiB of 100
	if got := placed(); !slices.Equal(got, []string{"a1", "a2", "c2"}) {
		t.Fatalf("placement %v with zone B's server low, want a1, a2, c2 (room before zones)", got)
	}
}
