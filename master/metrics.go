package master

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

var (
	eventsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "events_total",
		Help: "Events recorded, by kind (split, merge, move, leader transfer, throttle, server down, …).",
	}, []string{"kind"})
	opSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "operation_seconds",
		Help:    "Time a split, merge or move took from decision to completion.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	}, []string{"op"})
	opFailuresTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "operation_failures_total",
		Help: "Split, merge, move and leader-transfer operations that failed.",
	}, []string{"op"})
	mergePauseSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "merge_pause_seconds",
		Help:    "Time a merged-away range served nothing: from its freeze to its removal from the map.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
	mergeAbortsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "merge_aborts_total",
		Help: "Merges aborted after the freeze (a replica of the right range did not apply it in time) and unfrozen.",
	})
	joinFloorMissingTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "join_floor_missing_total",
		Help: "Replicas created empty without a join floor, by a move or from the map (the range's leader runs a partition server older than the floor).",
	})
	rangesGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "ranges",
		Help: "Ranges in the partition map.",
	})
	diskAvailableGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "data_dir_available_bytes",
		Help: "Free bytes available to this master on the file system of its data directory (its Raft log and snapshots).",
	}, []string{"master"})
	diskCapacityGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "data_dir_capacity_bytes",
		Help: "Size in bytes of the file system of this master's data directory.",
	}, []string{"master"})
	isLeaderGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "is_leader",
		Help: "1 on the master that leads the group, else 0.",
	})
	serversGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "servers",
		Help: "Registered partition servers by liveness (up, down); set by the leader, 0 elsewhere.",
	}, []string{"state"})
	underReplicatedGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "under_replicated_ranges",
		Help: "Ranges with fewer replicas on live servers than the replication factor; set by the leader, 0 elsewhere.",
	})
	mapSendsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "map_watch_sends_total",
		Help: "Messages sent to partition map watchers that take deltas, by kind (full: the whole map; delta; keepalive: nothing changed for a second).",
	}, []string{"kind"})
	serverSlowGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "server_slow",
		Help: "1 for a partition server whose disk commits are slow (--slow-disk-commit: it gets no leadership), else 0; set by the leader, absent elsewhere.",
	}, []string{"server"})
	serverClockOffsetGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "server_clock_offset_seconds",
		Help: "A partition server's clock offset from the median of the servers' clocks, as its heartbeats measure it (absent for a server that reports no clock, or none for 10 s); set by the leader, absent elsewhere.",
	}, []string{"server"})
	serverClockSkewedGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "server_clock_skewed",
		Help: "1 for a partition server whose clock offset is over --max-clock-offset (it gets no leadership; its leaders refuse writes once it is over a minute off), else 0; set by the leader, absent elsewhere.",
	}, []string{"server"})
	serverDiskAvailableGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "server_disk_available_bytes",
		Help: "Free bytes on a partition server's data directory file system, as its last heartbeat reported them (absent for a server that reports none); set by the leader, absent elsewhere.",
	}, []string{"server"})
	serverDiskLowGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "server_disk_low",
		Help: "1 for a partition server whose free disk space is under its low mark, max(2x --disk-reserve, 5% of the file system), or under its reserve: it gets no new replicas; else 0. Set by the leader, absent elsewhere.",
	}, []string{"server"})
	serverDiskFullGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "server_disk_full",
		Help: "1 for a partition server whose free disk space is under its --disk-reserve (its leaders refuse writes; the master moves its leaderships, then its replicas, off), else 0. Set by the leader, absent elsewhere.",
	}, []string{"server"})
	unstartedGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "unstarted_ranges",
		Help: "Ranges at generation 1 not recorded as started (a server may bootstrap them); lasting ones are tables whose range never had a leader.",
	})
	leaderlessGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "master", Name: "leaderless_ranges",
		Help: "Ranges no live partition server reports leading; set by the leader, 0 elsewhere.",
	})
)

// clusterHealth are the leader's health figures of the whole cluster.
type clusterHealth struct {
	up, down, underReplicated, leaderless int
}

// assessCluster counts servers by liveness and the ranges that lack
// replicas on live servers or a leader.
func assessCluster(ranges map[uint64]*pb.RangeDescriptor, servers []string, alive map[string]bool, leaders map[uint64]string, rf int) clusterHealth {
	var h clusterHealth
	for _, id := range servers {
		if alive[id] {
			h.up++
		} else {
			h.down++
		}
	}
	for id, d := range ranges {
		live := 0
		for _, r := range d.GetReplicas() {
			if alive[r.GetServerId()] {
				live++
			}
		}
		if live < rf {
			h.underReplicated++
		}
		if l, ok := leaders[id]; !ok || !alive[l] {
			h.leaderless++
		}
	}
	return h
}

// publishSlow sets serverSlowGauge for every server heard from.
func publishSlow(seen map[string]time.Time, slow map[string]bool) {
	for id := range seen {
		serverSlowGauge.WithLabelValues(id).Set(map[bool]float64{true: 1}[slow[id]])
	}
}

// publishClocks sets the clock gauges: the offset of every server with a
// fresh measurement, skewed (0 or 1) for every server heard from.
func publishClocks(seen map[string]time.Time, clocks map[string]clockVerdict) {
	serverClockOffsetGauge.Reset()
	for id := range seen {
		v, ok := clocks[id]
		serverClockSkewedGauge.WithLabelValues(id).Set(map[bool]float64{true: 1}[v.skewed])
		if ok {
			serverClockOffsetGauge.WithLabelValues(id).Set(v.offset.Seconds())
		}
	}
}

func (h clusterHealth) publish(leader bool) {
	isLeaderGauge.Set(map[bool]float64{true: 1}[leader])
	serversGauge.WithLabelValues("up").Set(float64(h.up))
	serversGauge.WithLabelValues("down").Set(float64(h.down))
	underReplicatedGauge.Set(float64(h.underReplicated))
	leaderlessGauge.Set(float64(h.leaderless))
}

func init() {
	prometheus.MustRegister(mapSendsTotal, eventsTotal, opSeconds, opFailuresTotal, mergePauseSeconds, mergeAbortsTotal, joinFloorMissingTotal, rangesGauge,
		isLeaderGauge, serversGauge, underReplicatedGauge, leaderlessGauge, serverSlowGauge,
		serverClockOffsetGauge, serverClockSkewedGauge,
		serverDiskAvailableGauge, serverDiskLowGauge, serverDiskFullGauge,
		unstartedGauge, diskAvailableGauge, diskCapacityGauge)
	// Every series exists from the start, so rate() and alerts see zeros
	// rather than nothing before the first event.
	for k, name := range pb.EventKind_name {
		if k != 0 {
			eventsTotal.WithLabelValues(name)
		}
	}
	for _, op := range []string{"split", "merge", "move", "move_group", "detach", "isolate", "attach"} {
		opSeconds.WithLabelValues(op)
	}
	for k := scheduler.Split; k <= scheduler.Attach; k++ {
		opFailuresTotal.WithLabelValues(k.String())
	}
	clusterHealth{}.publish(false)
}
