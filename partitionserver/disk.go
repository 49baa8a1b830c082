package partitionserver

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tablestore/internal/diskspace"
	"tablestore/partitionserver/disklatency"
	pb "tablestore/proto/tablestorepb"
)

var (
	diskCommitMedianSeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "disk_commit_median_seconds",
		Help: "Median duration of this server's disk commits over the last 10 s, by commit: state (the state file's group commits) " +
			"or log (the shared Raft log's syncs); 0 without commits. The master takes the leaderships off a server whose median stays slow.",
	}, []string{"server", "commit"})
	diskCommitsWindow = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "disk_commits_window",
		Help: "Disk commits in the window of disk_commit_median_seconds, by commit (state, log).",
	}, []string{"server", "commit"})

	stateCommitSeconds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "state_commit_seconds_total",
		Help: "Time spent in the state file's group commits of applied entries.",
	}, []string{"server"})
	stateApplyWaitSeconds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "state_apply_wait_seconds_total",
		Help: "Time the applies of this server's ranges waited for the state file's write lock, mostly behind a group commit " +
			"(the rest behind other ranges' applies and range creations), which the answers of the range leaders here wait out too.",
	}, []string{"server"})
)

func init() {
	prometheus.MustRegister(diskCommitMedianSeconds, diskCommitsWindow, stateCommitSeconds, stateApplyWaitSeconds)
}

// diskReport is the heartbeat's account of the server's recent disk
// commits (nil on a server built without New's windows), also exported as
// gauges.
func (s *Server) diskReport(now time.Time) *pb.DiskLatency {
	if s.stateCommits == nil || s.logSyncs == nil {
		return nil
	}
	st, lg := s.stateCommits.Summary(now), s.logSyncs.Summary(now)
	for _, c := range []struct {
		name string
		sum  disklatency.Summary
	}{{"state", st}, {"log", lg}} {
		diskCommitMedianSeconds.WithLabelValues(s.id, c.name).Set(c.sum.Median.Seconds())
		diskCommitsWindow.WithLabelValues(s.id, c.name).Set(float64(c.sum.Commits))
	}
	return &pb.DiskLatency{
		WindowSeconds: s.stateCommits.Span().Seconds(),
		StateCommits:  uint32(st.Commits), StateCommitMedianSeconds: st.Median.Seconds(),
		LogSyncs: uint32(lg.Commits), LogSyncMedianSeconds: lg.Median.Seconds(),
	}
}

// diskSpaceReport is the heartbeat's account of the data directory's file
// system and the write reserve (nil where the free space is unknown: the
// master then treats the server as having space). It reads the free space
// through the write guard's hook, so that the master hears the figure the
// guard refuses writes by (tests replace the hook).
func (s *Server) diskSpaceReport() *pb.DiskSpace {
	space, reserve := diskSpace, s.cfg.DiskReserve
	if s.disk != nil {
		space, reserve = s.disk.space, s.disk.reserve
	}
	avail, capacity, ok := space(s.cfg.DataDir)
	if !ok {
		return nil
	}
	return &pb.DiskSpace{AvailableBytes: avail, CapacityBytes: capacity, ReserveBytes: reserve}
}

// diskSpace reports the available and total bytes of dir's file system
// (ok false where unknown: the disk gauges stay unset, the reserve is off).
func diskSpace(dir string) (avail, capacity uint64, ok bool) { return diskspace.Of(dir) }
