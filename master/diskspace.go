package master

import (
	"time"

	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

// diskOf converts a heartbeat's disk space report to the scheduler's
// figures (zero, "no figures", for nil: an older server, or one that
// cannot tell, which counts as having space).
func diskOf(d *pb.DiskSpace) scheduler.Disk {
	return scheduler.Disk{Available: d.GetAvailableBytes(), Capacity: d.GetCapacityBytes(), Reserve: d.GetReserveBytes()}
}

// observeSpace records server's last disk space report (nil: none) and
// returns the disk state before and after it.
func (r *reports) observeSpace(server string, d *pb.DiskSpace) (was, now scheduler.DiskState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	was = diskOf(r.space[server]).State()
	if d == nil {
		delete(r.space, server)
	} else {
		r.space[server] = d
	}
	return was, diskOf(d).State()
}

// spaceOf returns server's last disk space report (nil: none). Called
// with r.mu held.
func (r *reports) spaceOf(server string) *pb.DiskSpace { return r.space[server] }

// spaces returns a copy of every server's last disk space report.
func (r *reports) spaces() map[string]*pb.DiskSpace {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]*pb.DiskSpace, len(r.space))
	for id, d := range r.space {
		out[id] = d
	}
	return out
}

// noteSpace folds a heartbeat's disk space report in and logs a change of
// the server's disk state (scheduler.Disk.State: what the policies do with
// it follows).
func (s *Server) noteSpace(server string, d *pb.DiskSpace) {
	was, now := s.reports.observeSpace(server, d)
	if was == now {
		return
	}
	dk := diskOf(d)
	args := []any{"server", server, "available_bytes", dk.Available, "capacity_bytes", dk.Capacity,
		"reserve_bytes", dk.Reserve, "low_mark_bytes", dk.LowMark(), "was", was.String()}
	switch now {
	case scheduler.DiskFull:
		s.logger.Error("partition server's disk is under its reserve: the ranges it leads refuse writes; its leaderships and then its replicas move to servers with space", args...)
	case scheduler.DiskLow:
		s.logger.Warn("partition server's disk is low on space: it gets no new replicas", args...)
	default:
		s.logger.Info("partition server's disk has space again", args...)
	}
}

// publishSpace sets the per-server disk gauges for every server heard
// from: free bytes where it reported them, and whether its disk is low or
// full by the scheduler's rule (0 without figures).
func publishSpace(seen map[string]time.Time, spaces map[string]*pb.DiskSpace) {
	for id := range seen {
		d, ok := spaces[id]
		st := diskOf(d).State()
		serverDiskLowGauge.WithLabelValues(id).Set(map[bool]float64{true: 1}[st != scheduler.DiskOK])
		serverDiskFullGauge.WithLabelValues(id).Set(map[bool]float64{true: 1}[st == scheduler.DiskFull])
		if ok {
			serverDiskAvailableGauge.WithLabelValues(id).Set(float64(d.GetAvailableBytes()))
		} else {
			serverDiskAvailableGauge.DeleteLabelValues(id)
		}
	}
}
