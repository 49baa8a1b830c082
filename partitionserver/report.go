package partitionserver

import (
	"math"
	"slices"
	"time"

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

// ackedReport is a replica's report as the master holds it, and when it
// was sent.
type ackedReport struct {
	rs *pb.RangeStatus
	at time.Time
}

// reportDelta is what a heartbeat carries given the reports the master
// acknowledged: the replicas whose report changed or that are new, and
// those no longer hosted. A report that moved only a little from the
// acknowledged one (closeReport) is left out until refresh has passed
// since that one was sent: a busy range's applied index, entity count and
// rates change at every heartbeat, and with every report carried, 1,000
// busy tables cost each server a heartbeat of 1,000 range reports every
// 500 ms and the master their decoding and folding (docs/performance.md,
// "Session 36"). The master reads a left-out report as the acknowledged one
// repeated (reports.smooth); refresh bounds how stale that gets.
func reportDelta(acked map[uint64]ackedReport, cur []*pb.RangeStatus, now time.Time, refresh time.Duration) (changed []*pb.RangeStatus, removed []uint64) {
	seen := make(map[uint64]bool, len(cur))
	for _, rs := range cur {
		seen[rs.GetRangeId()] = true
		a, ok := acked[rs.GetRangeId()]
		if ok && (sameReport(a.rs, rs) || now.Sub(a.at) < refresh && closeReport(a.rs, rs)) {
			continue
		}
		changed = append(changed, rs)
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
// replica state and an idle load both times. A busy range's report is
// never the same (closeReport says when it is near enough); an idle one
// changes when it goes idle.
func sameReport(a, b *pb.RangeStatus) bool {
	if a == nil || b == nil || a == b {
		return a == b
	}
	if a.GetAppliedIndex() != b.GetAppliedIndex() || !sameState(a, b) {
		return false
	}
	la, lb := a.GetLoad(), b.GetLoad()
	return idleLoad(la) && idleLoad(lb) && la.GetEntityCount() == lb.GetEntityCount() && la.GetBytes() == lb.GetBytes() &&
		la.GetLifecycle() == lb.GetLifecycle()
}

// sameState reports whether a and b hold the same replica state, the
// applied index and the load apart: what every report change the master
// acts on at once is made of (leadership, membership, generation,
// descriptor, freeze, lifecycle).
func sameState(a, b *pb.RangeStatus) bool {
	if a.GetRangeId() != b.GetRangeId() || a.GetGeneration() != b.GetGeneration() || a.GetLeader() != b.GetLeader() ||
		a.GetFrozen() != b.GetFrozen() || a.GetFrozenIndex() != b.GetFrozenIndex() || a.GetLifecycle() != b.GetLifecycle() ||
		!slices.Equal(a.GetVoters(), b.GetVoters()) || !slices.Equal(a.GetNonvoters(), b.GetNonvoters()) {
		return false
	}
	return a.GetRange() == b.GetRange() || proto.Equal(a.GetRange(), b.GetRange())
}

const (
	// indexDrift is how far a replica's applied index may move before
	// its report is carried: well inside the master's lag bound for a
	// leadership transfer target (transferMaxLag, 2,000 entries), which
	// compares reports of the replicas.
	indexDrift = 512
	// rateFloor (entities or requests per second) and rateDrift (of the
	// larger rate) bound how far a rate may move unreported. The floor
	// covers the noise of half-second windows at low rates (a table
	// written once a second reads 0, 2 or 4 per second by turns); the
	// master's thresholds (merge-load 100, split-load 1,000 by default)
	// are far above it, and refresh bounds the delay where a tuned one
	// is not.
	rateFloor = 8
	rateDrift = 0.25
	// sizeDrift is the share of its last reported size or entity count a
	// range may grow or shrink by unreported, and sizeFloor and countFloor
	// the drift allowed however small the range: a table of a few
	// entities written once a second would otherwise be carried at every
	// heartbeat. Size thresholds are megabytes (merge-bytes 32 MiB,
	// split-bytes 512 MiB by default); refresh bounds the delay where a
	// tuned one is smaller.
	sizeDrift  = 1.0 / 16
	sizeFloor  = 64 << 10
	countFloor = 64
)

// closeReport reports whether b differs from the acknowledged a only by
// drift the master need not see at once: the same state, an applied index
// a little further (never across a freeze, nor a range's first entries:
// the master reads those), rates and sizes near a's, throttling and
// server-busy refusals neither starting nor stopping.
func closeReport(a, b *pb.RangeStatus) bool {
	if !sameState(a, b) || a.GetFrozen() || a.GetFrozenIndex() != 0 {
		return false
	}
	if ai, bi := a.GetAppliedIndex(), b.GetAppliedIndex(); ai <= 1 || bi < ai || bi-ai >= indexDrift {
		return false
	}
	la, lb := a.GetLoad(), b.GetLoad()
	if la.GetLifecycle() != lb.GetLifecycle() ||
		(la.GetThrottledPerSec() > 0) != (lb.GetThrottledPerSec() > 0) || (la.GetServerBusyPerSec() > 0) != (lb.GetServerBusyPerSec() > 0) {
		return false
	}
	return closeRate(la.GetEntitiesPerSec(), lb.GetEntitiesPerSec()) && closeRate(la.GetReadsPerSec(), lb.GetReadsPerSec()) &&
		closeRate(la.GetWritesPerSec(), lb.GetWritesPerSec()) && closeRate(la.GetThrottledPerSec(), lb.GetThrottledPerSec()) &&
		closeRate(la.GetServerBusyPerSec(), lb.GetServerBusyPerSec()) &&
		closeSize(la.GetEntityCount(), lb.GetEntityCount(), countFloor) && closeSize(la.GetBytes(), lb.GetBytes(), sizeFloor)
}

func closeRate(a, b float64) bool {
	return math.Abs(a-b) <= max(rateFloor, rateDrift*max(a, b))
}

func closeSize(a, b, floor uint64) bool {
	d := max(a, b) - min(a, b)
	return d <= floor || float64(d) <= sizeDrift*float64(a)
}

// idleLoad reports a load report of a range that served nothing.
func idleLoad(l *pb.RangeLoad) bool {
	return l.GetReadsPerSec() == 0 && l.GetWritesPerSec() == 0 && l.GetEntitiesPerSec() == 0 &&
		l.GetThrottledPerSec() == 0 && l.GetServerBusyPerSec() == 0 && l.GetMeanLatencyMs() == 0 &&
		len(l.GetHotKeys()) == 0 && len(l.GetLoadSample()) == 0 && l.GetDistinctKeys() == 0
}
