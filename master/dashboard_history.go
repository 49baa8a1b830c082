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
	LatencyMs float64     `json:"latency_ms"`
	Ranges    []histRange `json:"ranges"` // in key order
}

// histRange is one cell column entry of the key visualizer: a range's key
// span and load.
type histRange struct {
	ID             uint64  `json:"id"`
	Start          string  `json:"s"`
	End            string  `json:"e"`
	EntitiesPerSec float64 `json:"v"`
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
		if t.EntitiesPerSec > 0 {
			t.LatencyMs = tableLat[name] / t.EntitiesPerSec
		}
	}
	for id, v := range h.Servers {
		if v > 0 {
			h.ServerLatencyMs[id] = serverLat[id] / v
		}
	}
	return h
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
