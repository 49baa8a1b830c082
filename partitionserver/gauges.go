package partitionserver

import (
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// busiestRanges bounds the per-range load series a server exports: a
// server may lead thousands of ranges, and the busiest few are what an
// operator looks for (the master's dashboard has the rest).
const busiestRanges = 10

// rangeRate is one led range's load.
type rangeRate struct {
	rangeID        uint64
	table          string
	entitiesPerSec float64
}

// busiest returns the n ranges with the highest load, busiest first (ties
// by range id, so the exported set is stable).
func busiest(rates []rangeRate, n int) []rangeRate {
	out := append([]rangeRate(nil), rates...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].entitiesPerSec != out[j].entitiesPerSec {
			return out[i].entitiesPerSec > out[j].entitiesPerSec
		}
		return out[i].rangeID < out[j].rangeID
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// publishGauges sets this server's replica, leader, busiest-range, disk
// and state file gauges (each heartbeat).
func (s *Server) publishGauges(replicas, broken int, led []rangeRate) {
	replicasGauge.WithLabelValues(s.id).Set(float64(replicas))
	brokenReplicasGauge.WithLabelValues(s.id).Set(float64(broken))
	leadersGauge.WithLabelValues(s.id).Set(float64(len(led)))
	rangeEntitiesPerSec.DeletePartialMatch(prometheus.Labels{"server": s.id})
	for _, r := range busiest(led, busiestRanges) {
		rangeEntitiesPerSec.WithLabelValues(s.id, r.table, strconv.FormatUint(r.rangeID, 10)).Set(r.entitiesPerSec)
	}
	// The refusal counter exists from the first heartbeat, so rate()
	// and the alert see zeros rather than nothing.
	diskReserveRefusedTotal.WithLabelValues(s.id)
	if avail, capacity, ok := diskSpace(s.cfg.DataDir); ok {
		diskAvailableBytes.WithLabelValues(s.id).Set(float64(avail))
		diskCapacityBytes.WithLabelValues(s.id).Set(float64(capacity))
	}
	s.publishStateFile()
}

// forgetGauges removes this server's series (Close: a stopped server in a
// process that goes on, as in dev or tests, must not look alive).
func (s *Server) forgetGauges() {
	for _, v := range []*prometheus.GaugeVec{replicasGauge, brokenReplicasGauge, leadersGauge, rangeEntitiesPerSec, diskAvailableBytes, diskCapacityBytes,
		diskCommitMedianSeconds, diskCommitsWindow, stateFileBytes, stateFileFreeBytes} {
		v.DeletePartialMatch(prometheus.Labels{"server": s.id})
	}
	diskReserveRefusedTotal.DeletePartialMatch(prometheus.Labels{"server": s.id})
}
