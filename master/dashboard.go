package master

import (
	"bytes"
	"embed"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"tablestore/internal/natural"
	"tablestore/internal/rangegroup"
	"tablestore/internal/webchart"

	pb "tablestore/proto/tablestorepb"
)

//go:embed dashboard/index.html
var dashboardFS embed.FS

// dashboardHistoryState is the Server's part for the dashboard's history.
type dashboardHistoryState struct {
	historyMu      sync.Mutex
	historyRing    *historyRing
	historyStarted bool
}

// dashboardState is what the dashboard page polls: the partition map with
// leaders and load, the servers, and the latest events.
type dashboardState struct {
	Leader bool `json:"leader"`
	// LeaderID is the master leading the group as this one knows it ("":
	// none known); a follower's page names it.
	LeaderID string    `json:"leader_id"`
	Time     time.Time `json:"time"`
	// Tables are the dashboardTables busiest of TablesTotal (by name).
	Tables      []dashboardTable `json:"tables"`
	TablesTotal int              `json:"tables_total"`
	Servers     []dashboardSrv   `json:"servers"`
	Events      []dashboardEvent `json:"events"`
}

type dashboardTable struct {
	Name   string           `json:"name"`
	Ranges []dashboardRange `json:"ranges"`
}

type dashboardRange struct {
	ID uint64 `json:"id"`
	// Group is the Raft group serving the range (rangegroup.GroupOf); 0
	// in an entry that stands for several ranges.
	Group uint64 `json:"group,omitempty"`
	// Anchor: the range is an anchor (rangegroup.IsAnchor), the empty
	// range of a reserved table founding a group tables share.
	Anchor bool `json:"anchor,omitempty"`
	// GroupSpans is how many ranges of the map the range's group serves
	// (the anchor included); 0 in an entry that stands for several.
	GroupSpans      int      `json:"group_spans,omitempty"`
	Start           string   `json:"start"`
	End             string   `json:"end"`
	Generation      uint64   `json:"generation"`
	Replicas        []string `json:"replicas"`
	Leader          string   `json:"leader"`
	EntitiesPerSec  float64  `json:"entities_per_sec"`
	ThrottledPerSec float64  `json:"throttled_per_sec"`
	Entities        uint64   `json:"entities"`
	Bytes           uint64   `json:"bytes"`
	HotKeys         []string `json:"hot_keys"`
	// Merged is how many neighbouring ranges the entry stands for when
	// more than one (dashboardRanges): its figures are their sums, and it
	// has no leader, replicas or hot keys.
	Merged int `json:"merged,omitempty"`
}

// The state the page polls each second stays small however large the
// cluster: at most dashboardTables tables (the busiest) and
// dashboardRanges entries per table (neighbours merged beyond it). A
// cluster of 10,000 ranges was ~2 MB a second per open page, each redrawn.
const (
	dashboardTables = 100
	dashboardRanges = 200
)

type dashboardSrv struct {
	ID string `json:"id"`
	// Zone is the server's failure domain (--zone; "" for none), as ctl
	// servers shows it.
	Zone  string `json:"zone"`
	Alive bool   `json:"alive"`
	// Draining is set by ctl drain (as ctl servers shows it).
	Draining       bool    `json:"draining"`
	Replicas       int     `json:"replicas"`
	Leaders        int     `json:"leaders"`
	EntitiesPerSec float64 `json:"entities_per_sec"`
	// Disk is the master's verdict on the server's free disk space (ok,
	// low, full; "" without figures), with the figures, as ctl servers
	// shows them.
	Disk               string `json:"disk"`
	DiskAvailableBytes uint64 `json:"disk_available_bytes"`
	DiskCapacityBytes  uint64 `json:"disk_capacity_bytes"`
}

type dashboardEvent struct {
	Seq      uint64             `json:"seq"`
	Time     time.Time          `json:"time"`
	Kind     string             `json:"kind"`
	Table    string             `json:"table"`
	Message  string             `json:"message"`
	Cause    string             `json:"cause"`
	Duration float64            `json:"duration_seconds"`
	Figures  map[string]float64 `json:"figures"`
}

// DashboardHandler serves the live dashboard (/dashboard) and its data
// (/dashboard/state, /dashboard/history?after=UNIX_MS): the partition map
// per table with load heat and leaders, the servers, the event timeline,
// and the last ten minutes of load per table, per server and per range. Only the leader has load
// and leaders; a follower says so.
func (s *Server) DashboardHandler() http.Handler {
	ring := s.dashboardHistory()
	page := dashboardPage()
	mux := http.NewServeMux()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.dashboardHistory()
		mux.ServeHTTP(w, r)
	})
	// GET patterns (HEAD included): the dashboard changes nothing, and
	// the mux answers any other method 405 with Allow.
	mux.HandleFunc("GET /dashboard", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page)
	})
	mux.HandleFunc("GET /dashboard/history", func(w http.ResponseWriter, r *http.Request) {
		var after int64
		if a := r.URL.Query().Get("after"); a != "" {
			var err error
			if after, err = strconv.ParseInt(a, 10, 64); err != nil {
				http.Error(w, "after: not a Unix time in milliseconds: "+strconv.Quote(a), http.StatusBadRequest)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(ring.after(after))
	})
	mux.HandleFunc("GET /dashboard/state", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.dashboardState())
	})
	return handler
}

// dashboardPage is the page with the chart library inlined, so it is one
// self-contained file.
func dashboardPage() []byte {
	b, _ := dashboardFS.ReadFile("dashboard/index.html")
	return bytes.Replace(b, []byte("<!--webchart-->"), []byte("<script>"+webchart.JS+"</script>"), 1)
}

// dashboardHistory returns the dashboard's history and starts its sampler
// once the master has started: at once if it has, else on the first
// dashboard request (a master process builds its handler before Start).
func (s *Server) dashboardHistory() *historyRing {
	s.historyMu.Lock()
	defer s.historyMu.Unlock()
	if s.historyRing == nil {
		s.historyRing = newHistoryRing(historySamples)
	}
	if !s.historyStarted && s.ctx != nil {
		s.historyStarted = true
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.recordHistory(s.historyRing)
		}()
	}
	return s.historyRing
}

// dashboardServer is the page's row of server sv, without its counts
// (dashboardStateOf adds them). Its liveness and disk figures are the
// leader's soft state: a follower shows none.
func dashboardServer(sv *pb.ServerInfo, leader bool) *dashboardSrv {
	ds := &dashboardSrv{ID: sv.GetServerId(), Zone: sv.GetZone(), Alive: leader && sv.GetAlive(), Draining: sv.GetDraining()}
	if d := sv.GetDiskSpace(); d != nil && leader {
		ds.Disk, ds.DiskAvailableBytes, ds.DiskCapacityBytes = diskOf(d).State().String(), d.GetAvailableBytes(), d.GetCapacityBytes()
	}
	return ds
}

func (s *Server) dashboardState() dashboardState {
	_, leaderID := s.raft.LeaderWithID()
	st := dashboardStateOf(s.PartitionMap(), s.IsLeader(), string(leaderID))
	st.Events = s.dashboardEvents()
	return st
}

// dashboardStateOf is the page's view of map m. On a follower (not leader)
// it shows no range leaders, load or liveness: the follower's figures are
// what it last heard as leader, if ever (its page showed every server DOWN
// and leaders long gone); the page says so and names leaderID.
func dashboardStateOf(m *pb.PartitionMap, leader bool, leaderID string) dashboardState {
	st := dashboardState{Leader: leader, LeaderID: leaderID, Time: time.Now()}
	leaders, loads := m.GetLeaders(), m.GetLoads()
	if !leader {
		leaders, loads = nil, nil
	}
	byTable := map[uint64]*dashboardTable{}
	for _, t := range m.GetTables() {
		byTable[t.GetTableId()] = &dashboardTable{Name: t.GetName()}
	}
	srv := map[string]*dashboardSrv{}
	for _, sv := range m.GetServers() {
		srv[sv.GetServerId()] = dashboardServer(sv, leader)
	}
	spans := rangegroup.GroupSpans(m.GetRanges())
	for _, r := range m.GetRanges() {
		t := byTable[r.GetTableId()]
		if t == nil {
			continue
		}
		load := loads[r.GetRangeId()]
		dr := dashboardRange{
			ID: r.GetRangeId(), Group: rangegroup.GroupOf(r), Anchor: rangegroup.IsAnchor(r), GroupSpans: spans[rangegroup.GroupOf(r)],
			Start: r.GetStart(), End: r.GetEnd(), Generation: r.GetGeneration(),
			Leader: leaders[r.GetRangeId()], EntitiesPerSec: load.GetEntitiesPerSec(),
			ThrottledPerSec: load.GetThrottledPerSec(), Entities: load.GetEntityCount(), Bytes: load.GetBytes(),
		}
		for _, rep := range r.GetReplicas() {
			dr.Replicas = append(dr.Replicas, rep.GetServerId())
			if sv := srv[rep.GetServerId()]; sv != nil {
				sv.Replicas++
			}
		}
		if sv := srv[dr.Leader]; sv != nil {
			sv.Leaders++
			sv.EntitiesPerSec += dr.EntitiesPerSec
		}
		for i, k := range load.GetHotKeys() {
			if i == 3 {
				break
			}
			dr.HotKeys = append(dr.HotKeys, k.GetPartitionKey())
		}
		t.Ranges = append(t.Ranges, dr)
	}
	for _, t := range byTable {
		sort.Slice(t.Ranges, func(i, j int) bool { return t.Ranges[i].Start < t.Ranges[j].Start })
		t.Ranges = mergeRanges(t.Ranges, dashboardRanges)
		st.Tables = append(st.Tables, *t)
	}
	st.TablesTotal = len(st.Tables)
	st.Tables = busiestTables(st.Tables, dashboardTables)
	for _, sv := range srv {
		st.Servers = append(st.Servers, *sv)
	}
	// As ctl servers lists them: ps2 before ps10.
	sort.Slice(st.Servers, func(i, j int) bool { return natural.Compare(st.Servers[i].ID, st.Servers[j].ID) < 0 })
	return st
}

// busiestTables returns the n busiest of ts (entities/s plus throttled/s;
// ties by name) in name order.
func busiestTables(ts []dashboardTable, n int) []dashboardTable {
	busy := func(t dashboardTable) (v float64) {
		for _, r := range t.Ranges {
			v += r.EntitiesPerSec + r.ThrottledPerSec
		}
		return v
	}
	if len(ts) > n {
		sort.Slice(ts, func(i, j int) bool {
			a, b := busy(ts[i]), busy(ts[j])
			return a > b || a == b && ts[i].Name < ts[j].Name
		})
		ts = ts[:n]
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	return ts
}

// mergeRanges returns rs (in key order) as at most n entries: runs of
// neighbours of about equal length share one, with their figures summed.
func mergeRanges(rs []dashboardRange, n int) []dashboardRange {
	if len(rs) <= n {
		return rs
	}
	out := make([]dashboardRange, 0, n)
	for i := range n {
		lo, hi := i*len(rs)/n, (i+1)*len(rs)/n
		c := dashboardRange{ID: rs[lo].ID, Start: rs[lo].Start, End: rs[hi-1].End, Replicas: []string{}, Merged: hi - lo}
		for _, r := range rs[lo:hi] {
			c.Generation = max(c.Generation, r.Generation)
			c.EntitiesPerSec += r.EntitiesPerSec
			c.ThrottledPerSec += r.ThrottledPerSec
			c.Entities += r.Entities
			c.Bytes += r.Bytes
		}
		out = append(out, c)
	}
	return out
}

// dashboardEvents returns the last 50 events, newest first.
func (s *Server) dashboardEvents() []dashboardEvent {
	var events []*pb.Event
	s.fsm.read(func(fs *state) {
		n := len(fs.events)
		events = append(events, fs.events[max(0, n-50):]...)
	})
	var out []dashboardEvent
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		out = append(out, dashboardEvent{
			Seq: e.GetSeq(), Time: time.Unix(0, e.GetUnixNano()), Kind: e.GetKind().Name(), Table: e.GetTable(),
			Message: e.GetMessage(), Cause: e.GetCause(), Duration: e.GetDurationSeconds(), Figures: e.GetFigures(),
		})
	}
	return out
}
