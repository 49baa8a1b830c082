package master

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// TestDashboardMethods: the dashboard and its data are read-only: GET (and
// HEAD) answer, anything else is 405 with Allow, so a form or script
// POSTing to the page learns it changes nothing.
func TestDashboardMethods(t *testing.T) {
	_, s := startSoloMaster(t)
	defer s.Close()
	waitUntil(t, 10*time.Second, "the master leads", s.IsLeader)
	srv := httptest.NewServer(s.DashboardHandler())
	defer srv.Close()
	for _, path := range []string{"/dashboard", "/dashboard/state", "/dashboard/history?after=0"} {
		for _, tc := range []struct {
			method string
			want   int
		}{
			{http.MethodGet, http.StatusOK},
			{http.MethodHead, http.StatusOK},
			{http.MethodPost, http.StatusMethodNotAllowed},
			{http.MethodPut, http.StatusMethodNotAllowed},
			{http.MethodDelete, http.StatusMethodNotAllowed},
		} {
			req, _ := http.NewRequest(tc.method, srv.URL+path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s %s: %d, want %d", tc.method, path, resp.StatusCode, tc.want)
			}
			if tc.want == http.StatusMethodNotAllowed && resp.Header.Get("Allow") == "" {
				t.Errorf("%s %s: 405 without Allow", tc.method, path)
			}
		}
	}
	for q, want := range map[string]int{"": http.StatusOK, "?after=": http.StatusOK, "?after=12": http.StatusOK, "?after=x": http.StatusBadRequest} {
		resp, err := http.Get(srv.URL + "/dashboard/history" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /dashboard/history%s: %d, want %d", q, resp.StatusCode, want)
		}
	}
}

// TestDashboardStateServers: the servers the page lists carry the drain
// mark, their disk space and their zone, as ctl servers shows them.
func TestDashboardStateServers(t *testing.T) {
	_, s := startSoloMaster(t)
	defer s.Close()
	waitUntil(t, 10*time.Second, "the master leads", s.IsLeader)
	for _, id := range []string{"a", "b"} {
		if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REGISTER_SERVER, &pb.RegisterServerCommand{Server: &pb.ServerInfo{ServerId: id, Zone: map[string]string{"a": "eu-1a"}[id]}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_SERVER_DRAINING, &pb.SetServerDrainingCommand{ServerId: "b", Draining: true}); err != nil {
		t.Fatal(err)
	}
	s.noteSpace("a", space(100))
	st := s.dashboardState()
	if len(st.Servers) != 2 || st.Servers[0].Draining || !st.Servers[1].Draining {
		t.Errorf("servers %+v, want a, then b draining", st.Servers)
	}
	if a, b := st.Servers[0], st.Servers[1]; a.Zone != "eu-1a" || b.Zone != "" {
		t.Errorf("servers %+v, want a in zone eu-1a, b in none", st.Servers)
	}
	if a, b := st.Servers[0], st.Servers[1]; a.Disk != "full" || a.DiskAvailableBytes != 100<<20 || a.DiskCapacityBytes != 100<<30 || b.Disk != "" {
		t.Errorf("servers %+v, want a's disk full with its figures, b's unknown", st.Servers)
	}
}

// TestDashboardStateOnFollower: a follower's page data carries no range
// leaders, load or liveness (what it last heard as leader, if ever: its
// page showed every server DOWN) and names the leader.
func TestDashboardStateOnFollower(t *testing.T) {
	m := &pb.PartitionMap{
		Tables:  []*pb.Table{{Name: "t", TableId: 1}},
		Ranges:  []*pb.RangeDescriptor{{RangeId: 1, Table: "t", TableId: 1, Replicas: []*pb.Replica{{ServerId: "a"}}}},
		Servers: []*pb.ServerInfo{{ServerId: "a", Alive: true}},
		Leaders: map[uint64]string{1: "a"},
		Loads:   map[uint64]*pb.RangeLoad{1: {EntitiesPerSec: 50, EntityCount: 7}},
	}
	lead := dashboardStateOf(m, true, "m1")
	if r := lead.Tables[0].Ranges[0]; r.Leader != "a" || r.EntitiesPerSec != 50 || !lead.Servers[0].Alive || lead.Servers[0].Leaders != 1 {
		t.Errorf("leader's view: range %+v, server %+v", r, lead.Servers[0])
	}
	f := dashboardStateOf(m, false, "m2")
	if r := f.Tables[0].Ranges[0]; r.Leader != "" || r.EntitiesPerSec != 0 || r.Entities != 0 || f.Servers[0].Leaders != 0 || f.Servers[0].Alive {
		t.Errorf("follower's view shows what it heard as leader: range %+v, server %+v", r, f.Servers[0])
	}
	if f.Leader || f.LeaderID != "m2" {
		t.Errorf("follower's view: leader %v, leader_id %q", f.Leader, f.LeaderID)
	}
}

// TestDashboardStateBounded: the state the page polls each second stays
// small with many tables and a table of many ranges, keeps the busiest
// tables, and still counts every replica and leadership per server.
func TestDashboardStateBounded(t *testing.T) {
	m := &pb.PartitionMap{Servers: []*pb.ServerInfo{{ServerId: "a", Alive: true}}, Leaders: map[uint64]string{}, Loads: map[uint64]*pb.RangeLoad{}}
	id := uint64(0)
	add := func(table uint64, start, end string, eps float64) {
		id++
		m.Ranges = append(m.Ranges, &pb.RangeDescriptor{RangeId: id, TableId: table, Start: start, End: end, Replicas: []*pb.Replica{{ServerId: "a"}}})
		m.Leaders[id] = "a"
		m.Loads[id] = &pb.RangeLoad{EntitiesPerSec: eps, EntityCount: 1}
	}
	for i := range 1000 {
		m.Tables = append(m.Tables, &pb.Table{Name: fmt.Sprintf("t%04d", i), TableId: uint64(i + 1)})
		add(uint64(i+1), "", "", 0)
	}
	m.Tables = append(m.Tables, &pb.Table{Name: "big", TableId: 5000})
	for i := range 5000 {
		start, end := fmt.Sprintf("k%05d", i), fmt.Sprintf("k%05d", i+1)
		if i == 0 {
			start = ""
		}
		if i == 4999 {
			end = ""
		}
		add(5000, start, end, 1)
	}
	st := dashboardStateOf(m, true, "m1")
	b, _ := json.Marshal(st)
	if len(b) > 128<<10 {
		t.Errorf("state is %d bytes", len(b))
	}
	if st.TablesTotal != 1001 || len(st.Tables) != dashboardTables || st.Tables[0].Name != "big" {
		t.Fatalf("%d of %d tables, first %s: want the busiest (big) among %d", len(st.Tables), st.TablesTotal, st.Tables[0].Name, dashboardTables)
	}
	big := st.Tables[0]
	var n int
	var eps float64
	var entities uint64
	for i, r := range big.Ranges {
		if (i == 0) != (r.Start == "") || (i == len(big.Ranges)-1) != (r.End == "") || (i > 0 && big.Ranges[i-1].End != r.Start) {
			t.Fatalf("entry %d [%q, %q) does not follow the previous one", i, r.Start, r.End)
		}
		n += max(r.Merged, 1)
		eps += r.EntitiesPerSec
		entities += r.Entities
	}
	if len(big.Ranges) > dashboardRanges || n != 5000 || eps != 5000 || entities != 5000 {
		t.Errorf("big: %d entries for %d ranges, %v entities/s, %d entities", len(big.Ranges), n, eps, entities)
	}
	if sv := st.Servers[0]; sv.Replicas != 6000 || sv.Leaders != 6000 {
		t.Errorf("server a: %d replicas, %d leaders, want 6000 each", sv.Replicas, sv.Leaders)
	}
}

// TestDashboardStateGroups: each range names the Raft group serving it (its
// own id unless its descriptor names another range's group); an entry that
// stands for several ranges names none.
func TestDashboardStateGroups(t *testing.T) {
	m := &pb.PartitionMap{
		Tables: []*pb.Table{{Name: "t", TableId: 1}},
		Ranges: []*pb.RangeDescriptor{
			{RangeId: 1, TableId: 1, End: "f"},
			{RangeId: 2, TableId: 1, Start: "f", End: "m", GroupId: 1},
			{RangeId: 3, TableId: 1, Start: "m", GroupId: 3},
		},
	}
	rs := dashboardStateOf(m, true, "m1").Tables[0].Ranges
	got := map[uint64]uint64{}
	for _, r := range rs {
		got[r.ID] = r.Group
	}
	if want := map[uint64]uint64{1: 1, 2: 1, 3: 3}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("groups by range %v, want %v", got, want)
	}
	if merged := mergeRanges(rs, 1); len(merged) != 1 || merged[0].Merged != 3 || merged[0].Group != 0 {
		t.Errorf("merged entry %+v: want 3 ranges and no group", merged)
	}
}

// TestDashboardStateAnchors: an anchor range (the reserved table's range
// naming its group) is marked, and every range carries its group's span
// count, the anchor included; a merged entry carries neither.
func TestDashboardStateAnchors(t *testing.T) {
	m := &pb.PartitionMap{
		Tables: []*pb.Table{{Name: "_groups/7", TableId: 3}, {Name: "a", TableId: 4}, {Name: "c", TableId: 6}},
		Ranges: []*pb.RangeDescriptor{
			{RangeId: 7, GroupId: 7, Table: "_groups/7", TableId: 3},
			{RangeId: 8, GroupId: 7, Table: "a", TableId: 4},
			{RangeId: 10, Table: "c", TableId: 6},
		},
	}
	got := map[uint64]string{}
	for _, tb := range dashboardStateOf(m, true, "m1").Tables {
		for _, r := range tb.Ranges {
			got[r.ID] = fmt.Sprintf("anchor=%v spans=%d", r.Anchor, r.GroupSpans)
		}
	}
	want := map[uint64]string{7: "anchor=true spans=2", 8: "anchor=false spans=2", 10: "anchor=false spans=1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ranges %v, want %v", got, want)
	}
	rs := []dashboardRange{{ID: 7, Anchor: true, GroupSpans: 2}, {ID: 8, GroupSpans: 2}}
	if merged := mergeRanges(rs, 1); merged[0].Anchor || merged[0].GroupSpans != 0 {
		t.Errorf("merged entry %+v: want no anchor, no span count", merged[0])
	}
}

// TestDashboardServersInNaturalOrder: the page lists servers as ctl servers
// does, ps2 before ps10 (it listed ps1, ps10, ps2).
func TestDashboardServersInNaturalOrder(t *testing.T) {
	m := &pb.PartitionMap{Servers: []*pb.ServerInfo{{ServerId: "ps10"}, {ServerId: "ps2"}, {ServerId: "a"}}}
	var ids []string
	for _, sv := range dashboardStateOf(m, true, "m1").Servers {
		ids = append(ids, sv.ID)
	}
	if strings.Join(ids, ",") != "a,ps2,ps10" {
		t.Errorf("servers listed %v, want a, ps2, ps10", ids)
	}
}
