package master

import (
	"sort"
	"sync"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// historySamples bounds the dashboard's history: at one sample a second,
// the last ten minutes.
const historySamples = 600

// historyInterval is how often the dashboard's history is sampled.
const historyInterval = time.Second

// historyTables bounds the tables one sample keeps: the busiest (entities/s
// plus refusals). The page draws a few lines per chart anyway, and ten
// minutes of 1,000 busy tables were 68 MB of JSON to load.
const historyTables = 16

// historyRangeCells bounds the key visualizer's cells of one table in one
// sample: beyond it neighbouring ranges share a cell (their load summed). A
// table of 1,000 ranges was 600,000 cells to draw each second.
const historyRangeCells = 100

// histSample is the partition map's load at one moment, as the dashboard's
// charts and heat map draw it.
type histSample struct {
	UnixMs  int64                 `json:"t"`
	Tables  map[string]*histTable `json:"tables"`
	Servers map[string]float64    `json:"servers"` // entities/s led
	// ServerLatencyMs is the mean latency of the requests each server
	// served as leader (weighted by the ranges' load).
	ServerLatencyMs map[string]float64 `json:"server_latency_ms"`
}

type histTable struct {
	EntitiesPerSec  float64 `json:"eps"`
	ThrottledPerSec float64 `json:"throttled"`
	// BusyPerSec is requests refused for the leaders' server capacity.
	BusyPerSec float64 `json:"busy"`
	// LatencyMs is the mean latency of the table's requests as its range
	// leaders measured them (weighted by the ranges' load).
	LatencyMs float64 `json:"latency_ms"`
	// RangeCount is the table's ranges; Ranges has fewer cells when
	// historyRangeCells merged neighbours.
	RangeCount int         `json:"range_count"`
	Ranges     []histRange `json:"ranges"` // in key order
}

// histRange is one cell column entry of the key visualizer: a range's key
// span and load.
type histRange struct {
	ID             uint64  `json:"id"` // the cell's first range
	Start          string  `json:"s"`
	End            string  `json:"e"`
	EntitiesPerSec float64 `json:"v"`
	// Ranges is how many neighbouring ranges the cell holds when more than
	// one (historyRangeCells).
	Ranges int `json:"n,omitempty"`
}

// sampleOf summarises a partition map at now.
func sampleOf(m *pb.PartitionMap, now time.Time) histSample {
	h := histSample{UnixMs: now.UnixMilli(), Tables: map[string]*histTable{}, Servers: map[string]float64{},
		ServerLatencyMs: map[string]float64{}}
	for _, sv := range m.GetServers() {
		h.Servers[sv.GetServerId()] = 0
	}
	// Sums of latency × load, divided by the load at the end.
	tableLat, serverLat := map[string]float64{}, map[string]float64{}
	for _, r := range m.GetRanges() {
		t := h.Tables[r.GetTable()]
		if t == nil {
			t = &histTable{}
			h.Tables[r.GetTable()] = t
		}
		load := m.GetLoads()[r.GetRangeId()]
		v := load.GetEntitiesPerSec()
		t.EntitiesPerSec += v
		t.ThrottledPerSec += load.GetThrottledPerSec()
		t.BusyPerSec += load.GetServerBusyPerSec()
		tableLat[r.GetTable()] += v * load.GetMeanLatencyMs()
		t.Ranges = append(t.Ranges, histRange{ID: r.GetRangeId(), Start: r.GetStart(), End: r.GetEnd(), EntitiesPerSec: v})
		if l := m.GetLeaders()[r.GetRangeId()]; l != "" {
			h.Servers[l] += v
			serverLat[l] += v * load.GetMeanLatencyMs()
		}
	}
	for name, t := range h.Tables {
		// An idle table with one range draws nothing (the charts read a
		// missing table as zero); leaving it out keeps ten minutes of
		// samples small with thousands of idle tables.
		if len(t.Ranges) == 1 && t.EntitiesPerSec == 0 && t.ThrottledPerSec == 0 && t.BusyPerSec == 0 {
			delete(h.Tables, name)
			continue
		}
		sort.Slice(t.Ranges, func(i, j int) bool { return t.Ranges[i].Start < t.Ranges[j].Start })
		t.RangeCount = len(t.Ranges)
		t.Ranges = mergeCells(t.Ranges, historyRangeCells)
		if t.EntitiesPerSec > 0 {
			t.LatencyMs = tableLat[name] / t.EntitiesPerSec
		}
	}
	keepBusiest(h.Tables, historyTables)
	for id, v := range h.Servers {
		if v > 0 {
			h.ServerLatencyMs[id] = serverLat[id] / v
		}
	}
	return h
}

// keepBusiest deletes from tables all but the n busiest (entities/s plus
// refusals; ties by name).
func keepBusiest(tables map[string]*histTable, n int) {
	if len(tables) <= n {
		return
	}
	names := make([]string, 0, len(tables))
	for name := range tables {
		names = append(names, name)
	}
	busy := func(t *histTable) float64 { return t.EntitiesPerSec + t.ThrottledPerSec + t.BusyPerSec }
	sort.Slice(names, func(i, j int) bool {
		a, b := busy(tables[names[i]]), busy(tables[names[j]])
		return a > b || a == b && names[i] < names[j]
	})
	for _, name := range names[n:] {
		delete(tables, name)
	}
}

// mergeCells returns rs (in key order) as at most n cells: runs of
// neighbours of about equal length share one, its load their sum.
func mergeCells(rs []histRange, n int) []histRange {
	if len(rs) <= n {
		return rs
	}
	out := make([]histRange, 0, n)
	for i := range n {
		lo, hi := i*len(rs)/n, (i+1)*len(rs)/n
		c := histRange{ID: rs[lo].ID, Start: rs[lo].Start, End: rs[hi-1].End, Ranges: hi - lo}
		for _, r := range rs[lo:hi] {
			c.EntitiesPerSec += r.EntitiesPerSec
		}
		out = append(out, c)
	}
	return out
}

// historyRing keeps the last n samples.
type historyRing struct {
	mu      sync.Mutex
	n       int
	samples []histSample // oldest first
}

func newHistoryRing(n int) *historyRing { return &historyRing{n: n} }

func (h *historyRing) add(s histSample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.samples) == h.n {
		copy(h.samples, h.samples[1:])
		h.samples = h.samples[:h.n-1]
	}
	h.samples = append(h.samples, s)
}

// after returns the samples taken after unixMs, oldest first.
func (h *historyRing) after(unixMs int64) []histSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := sort.Search(len(h.samples), func(i int) bool { return h.samples[i].UnixMs > unixMs })
	return append([]histSample{}, h.samples[i:]...)
}

// recordHistory samples the partition map into ring until the master
// stops. Only the leader has load and leaders; a follower records nothing.
func (s *Server) recordHistory(ring *historyRing) {
	t := time.NewTicker(historyInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			if s.IsLeader() {
				ring.add(sampleOf(s.PartitionMap(), now))
			}
		}
	}
}
