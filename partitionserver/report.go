package partitionserver

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

var (
	heartbeatReportsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "heartbeat_reports_total",
		Help: "Heartbeats the master acknowledged, by kind: full (every hosted replica) or delta (only changed ones).",
	}, []string{"kind"})
	heartbeatReportedRanges = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "heartbeat_reported_ranges_total",
		Help: "Replica reports carried by acknowledged heartbeats.",
	})
)

func init() {
	prometheus.MustRegister(heartbeatReportsTotal, heartbeatReportedRanges)
}

// reportDelta is what a heartbeat carries given the report the master
// acknowledged last: the replicas whose report changed or that are new,
// and those no longer hosted.
func reportDelta(acked map[uint64]*pb.RangeStatus, cur []*pb.RangeStatus) (changed []*pb.RangeStatus, removed []uint64) {
	seen := make(map[uint64]bool, len(cur))
	for _, rs := range cur {
		seen[rs.GetRangeId()] = true
		if !sameReport(acked[rs.GetRangeId()], rs) {
			changed = append(changed, rs)
		}
	}
	for id := range acked {
		if !seen[id] {
			removed = append(removed, id)
		}
	}
	slices.Sort(removed)
	return changed, removed
}

// sameReport reports whether b says nothing a holds not already: the same
// replica state and an idle load both times. A busy range is always
// reported (its rates are what the master's load view and policies
// follow); an idle one only when it goes idle.
func sameReport(a, b *pb.RangeStatus) bool {
	if a == nil || b == nil || a == b {
		return a == b
	}
	if a.GetRangeId() != b.GetRangeId() || a.GetGeneration() != b.GetGeneration() || a.GetLeader() != b.GetLeader() ||
		a.GetAppliedIndex() != b.GetAppliedIndex() || a.GetFrozen() != b.GetFrozen() || a.GetFrozenIndex() != b.GetFrozenIndex() || a.GetLifecycle() != b.GetLifecycle() ||
		!slices.Equal(a.GetVoters(), b.GetVoters()) || !slices.Equal(a.GetNonvoters(), b.GetNonvoters()) {
		return false
	}
	if a.GetRange() != b.GetRange() && !proto.Equal(a.GetRange(), b.GetRange()) {
		return false
	}
	la, lb := a.GetLoad(), b.GetLoad()
	return idleLoad(la) && idleLoad(lb) && la.GetEntityCount() == lb.GetEntityCount() && la.GetBytes() == lb.GetBytes() &&
		la.GetLifecycle() == lb.GetLifecycle()
}

// idleLoad reports a load report of a range that served nothing.
func idleLoad(l *pb.RangeLoad) bool {
	return l.GetReadsPerSec() == 0 && l.GetWritesPerSec() == 0 && l.GetEntitiesPerSec() == 0 &&
		l.GetThrottledPerSec() == 0 && l.GetServerBusyPerSec() == 0 && l.GetMeanLatencyMs() == 0 &&
		len(l.GetHotKeys()) == 0 && len(l.GetLoadSample()) == 0 && l.GetDistinctKeys() == 0
}
